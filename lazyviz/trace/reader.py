"""Reads a trace, finished or still being written. Never runs code from the file, and
treats every stored value as untrusted: any damage becomes a TraceError with one line
naming the file and what is wrong, never a traceback."""
from __future__ import annotations

import gc
import io
import json
import math
import os
import re
import sqlite3
import sys
import threading
import time
import zlib
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple
from weakref import WeakSet

from lazyviz.errors import LazyvizError
from lazyviz.trace.files import SQLITE_MAGIC, read_only_uri
from lazyviz.trace.lines import StoredLines
from lazyviz.trace.model import (
    CAUSES,
    EARLIER_CAPABILITIES,
    TS_NAMES,
    Annotation,
    Capabilities,
    Execution,
    Failure,
    Frame,
    Graph,
    GraphTexts,
    PeakRss,
    RunInfo,
    TrialRecord,
)
from lazyviz.trace.schema import (
    ADDED_COLUMNS,
    COLUMNS,
    FORMAT,
    GRAPH_COLUMNS,
    KIND_FIELDS,
    KINDS_FROM,
    LINE_ID,
    LINES_FROM,
    MEMORY_FROM,
    OLD_COLUMNS,
    SCHEMA_VERSION,
    V4_COLUMNS,
    V5_COLUMNS,
    ExecutionRecord,
    GraphRecord,
)
from lazyviz.trace.table import ExecutionTable, Kind


class TraceError(LazyvizError):
    """The file is not a trace lazyviz can read; the message is one line for the user."""


class _Damaged(ValueError):
    """A stored value of the wrong type or out of range."""


def _int(value: Any, name: str, minimum: int | None = 0) -> int:
    if type(value) is not int or (minimum is not None and value < minimum):
        raise _Damaged(f"{name} is {_shown(value)}")
    return value


def _opt_int(value: Any, name: str) -> int | None:
    return None if value is None else _int(value, name)


def _float(value: Any, name: str) -> float:
    if type(value) not in (int, float) or not math.isfinite(value):
        raise _Damaged(f"{name} is {_shown(value)}")
    return float(value)


def _str(value: Any, name: str) -> str:
    if type(value) is not str:
        raise _Damaged(f"{name} is {_shown(value)}")
    return value


def _opt_str(value: Any, name: str) -> str | None:
    return None if value is None else _str(value, name)


def _counts(text: Any, name: str) -> dict[str, int]:
    """A JSON object of name -> count, as the writer stores fallback ops and counters."""
    if text == "{}":
        return {}  # most rows: skip the parser
    value = _json(_str(text, name), name)
    if not isinstance(value, dict) or not all(type(v) is int for v in value.values()):
        raise _Damaged(f"{name} is not a table of counts")
    return value


def _json(text: str, name: str) -> Any:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise _Damaged(f"{name} is not valid JSON") from None
    # JSON may escape a lone surrogate ("\ud800"), which no encoder writes out: the
    # text is shown with U+FFFD in its place, as damaged UTF-8 is.
    return _without_surrogates(value) if _SURROGATE_ESCAPE.search(text) else value


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _without_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [_without_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {_without_surrogates(key): _without_surrogates(item) for key, item in value.items()}
    return value


def _one_line(error: BaseException, limit: int = 160) -> str:
    """SQLite quotes the offending text in some messages: keep the first line, clipped."""
    text = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _replacing_text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


_CACHES = frozenset({"hit", "miss"})
_CAUSES = frozenset(CAUSES)
_OPT_STR = frozenset({str, type(None)})
_OPT_INT = frozenset({int, type(None)})
_NUMBER = frozenset({int, float})
_TIMES = ("sync_ms", "trace_ms", "compile_ms", "execute_ms", "start_ms")


def _annotation(stored: Any) -> Annotation | None:
    """An annotation as the tracer stored it; None where it is damaged (it is skipped)."""
    try:
        frame = Frame(*stored["frame"]) if len(stored["frame"]) == 3 else None
        ints = lambda values: tuple(int(v) for v in values)
        spec = tuple(tuple(e) if isinstance(e, list) else e for e in stored["spec"])
        return Annotation(frame, ints(stored["shape"]), spec, str(stored["sharding"]), ints(stored["mesh_shape"]),
                          tuple(map(str, stored["axis_names"])), ints(stored["device_ids"]),
                          bool(stored["parameter"])) if frame else None
    except (KeyError, TypeError, ValueError):
        return None


def _frame(file: Any, line: Any, function: Any) -> Frame | None:
    return None if file is None else Frame(_str(file, "file"), _int(line, "line"), _str(function, "function"))


def _explain(row: tuple) -> None:
    """Raise _Damaged naming the first wrong value of a row that failed _ExecutionRows'
    quick checks (returns only for finite times whose sum is not)."""
    r = ExecutionRecord(*row)
    index = _int(r.idx, "an execution's index")
    try:
        if r.cache not in _CACHES:
            raise _Damaged(f"cache is {_shown(r.cache)}")
        if r.cause not in _CAUSES:
            raise _Damaged(f"cause is {_shown(r.cause)}")
        _frame(r.file, r.line, r.function)
        _int(r.step, "step")
        _opt_str(r.detail, "detail")
        _opt_int(r.stack_id, "stack id")
        _str(r.graph, "graph")
        _int(r.nodes, "nodes")
        for name in _TIMES:
            _float(getattr(r, name), name)
        _counts(r.fallback_ops, "fallback ops")
        _counts(r.counters, "counters")
        _opt_str(r.call, "call")
        _opt_str(r.context, "context")
    except _Damaged as error:
        raise _Damaged(f"execution {index}: {error}") from None


class _ExecutionRows:
    """Makes Executions from rows, checking every value, and sharing what repeats: one
    Frame per site and one string per distinct value, so a million executions of a few
    sites hold a few sites. The checks are one quick test per row; a row that fails it
    goes to _explain, which says what is wrong."""

    def __init__(self) -> None:
        self._frames: dict[tuple, Frame] = {}
        self._strings: dict[str, str] = {}
        self._counts: dict[str, dict[str, int]] = {}

    def __call__(self, row: tuple) -> Execution:
        (index, step, cause, detail, file, line, function, stack_id, graph, nodes, cache,
         sync_ms, trace_ms, compile_ms, execute_ms, start_ms, fallback_ops, counters, call, context) = row
        if not (type(index) is type(step) is type(nodes) is int and index >= 0 and step >= 0 and nodes >= 0
                and cause in _CAUSES and cache in _CACHES and type(graph) is str and type(stack_id) in _OPT_INT
                and type(detail) in _OPT_STR and type(call) in _OPT_STR and type(context) in _OPT_STR
                and type(sync_ms) in _NUMBER and type(trace_ms) in _NUMBER and type(compile_ms) in _NUMBER
                and type(execute_ms) in _NUMBER and type(start_ms) in _NUMBER
                and math.isfinite(sync_ms + trace_ms + compile_ms + execute_ms + start_ms)
                and (stack_id is None or stack_id >= 0)):
            _explain(row)
        frame = None
        if file is not None:
            frame = self._frames.get((file, line, function))
            if frame is None:  # checked once per site
                try:
                    frame = self._frames[file, line, function] = _frame(file, line, function)  # type: ignore[assignment]
                except _Damaged as error:
                    raise _Damaged(f"execution {index}: {error}") from None
        strings = self._strings
        return Execution(
            index, step, cause, detail if detail is None else strings.setdefault(detail, detail), frame, stack_id,
            strings.setdefault(graph, graph), nodes, cache, float(sync_ms), float(trace_ms), float(compile_ms),
            float(execute_ms), float(start_ms), self._table(fallback_ops, index, "fallback ops"),
            self._table(counters, index, "counters"),
            call if call is None else strings.setdefault(call, call),
            context if context is None else strings.setdefault(context, context),
        )

    def _table(self, text: Any, index: int, name: str) -> dict[str, int]:
        if text == "{}":
            return {}
        parsed = self._counts.get(text)
        if parsed is None:
            try:
                parsed = self._counts[text] = _counts(text, name)
            except _Damaged as error:
                raise _Damaged(f"execution {index}: {error}") from None
        return dict(parsed)  # a copy: the caller may change its own


# The most a stored graph text may expand to: a damaged or crafted BLOB must not
# exhaust memory (the largest real dump seen, 5,727 nodes, is under 1 MB).
MAX_TEXT = 256 * 1024 * 1024


def _text(value: Any, name: str) -> str:
    """A graph text: TEXT as it is, or a BLOB of zlib-compressed UTF-8 (schema 3)."""
    if type(value) is not bytes:
        return _str(value, name)
    try:
        unpacker = zlib.decompressobj()
        data = unpacker.decompress(value, MAX_TEXT)
        if unpacker.unconsumed_tail or not unpacker.eof:
            raise _Damaged(f"{name} is cut short or larger than {MAX_TEXT // 2**20} MB")
    except zlib.error:
        raise _Damaged(f"{name} is not readable compressed text") from None
    return data.decode("utf-8", "replace")


def _unpacked(value: Any, name: str = "IR lines") -> list[str]:
    """A row of ir_lines as its lines."""
    return _text(value, name).split("\n")


def _line_ids(value: Any, name: str) -> array:
    """A graph's IR as line ids (schema 5): zlib-compressed 4-byte little-endian ids."""
    if type(value) is not bytes:
        raise _Damaged(f"{name} is {_shown(value)}")
    try:
        unpacker = zlib.decompressobj()
        data = unpacker.decompress(value, MAX_TEXT)
        if unpacker.unconsumed_tail or not unpacker.eof or len(data) % 4:
            raise _Damaged(f"{name} is cut short or larger than {MAX_TEXT // 2**20} MB")
    except zlib.error:
        raise _Damaged(f"{name} is not readable") from None
    ids = array(LINE_ID)
    ids.frombytes(data)
    if sys.byteorder == "big":
        ids.byteswap()
    return ids


# What each run field must be, and its value when absent.
_RUN_FIELDS: dict[str, tuple[type | tuple[type, ...], object]] = {
    "argv": (list, []), "module": (bool, False), "backend": (str, "?"), "capture": (str, "?"),
    "versions": (dict, {}), "start_time": (str, ""), "pid": (int, 0), "cwd": (str, ""), "rank": (dict, {}),
    "exit_status": ((int, type(None)), None), "error": ((str, type(None)), None),
    "traceback": ((str, type(None)), None), "steps": ((int, type(None)), None),
    "elapsed_s": ((int, float, type(None)), None), "names": (dict, {}), "device": (str, "lazy"),
    "complete": (bool, None), "ended_by": ((str, type(None)), None),
    "startup_ms": ((int, float, type(None)), None), "tracer_errors": (list, []), "source": (str, "script"),
    "failures": (list, []), "notes": (list, []), "error_frames": (list, []), "cpu_at_raise": (list, []),
    "fallbacks_after_last_execution": (dict, {}), "counters_after_last_execution": (dict, {}),
    "device_used": (bool, False),
    "stopped_after_steps": ((int, type(None)), None), "sources": (dict, {}), "fix_trial": (dict, {}),
    "lost_pieces": (list, []), "stopped_after_iterations": ((int, type(None)), None), "optimizer_steps": (int, 0),
    "optimizer_marks": (list, []), "annotations": (list, []), "optimizer_step_at": ((list, type(None)), None),
    "capabilities": (dict, {}),
}


_OPEN: WeakSet[Trace] = WeakSet()  # every Trace open in this process (close_all)
_EXITING = False  # close_all ran: the process is about to exit, and opens no trace again
CLOSE_ALL_WAIT_S = 2.0  # how long close_all waits for a thread's read to end
_OPENING = threading.Lock()  # held from a trace's connect to its entry in _OPEN


def close_all() -> None:
    """Close every trace this process has open: before it exits without its normal
    teardown (os._exit after a closed terminal), so no reader's connection keeps the
    -wal and -shm beside a finished trace. From then on no trace opens: a UI's reader
    thread that opened one meanwhile kept the trace's WAL from being folded in. Best
    effort."""
    global _EXITING
    with _OPENING:  # a trace opening meanwhile is in _OPEN before this reads it, or never opens
        _EXITING = True
        traces = list(_OPEN)
    for trace in traces:
        # Closing a connection another thread is reading through crashes the process
        # (sqlite3 frees it under that thread): wait for its read to end. One that does
        # not end soon stays open: its -wal and -shm stay, the process does not crash.
        if not trace._using.acquire(timeout=CLOSE_ALL_WAIT_S):
            continue
        try:
            trace.close()
        except Exception:
            pass
        finally:
            trace._using.release()


class Trace:
    """One trace file. Cheap to open; every call reads the file's current state."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.version = SCHEMA_VERSION
        # SELECT ... FROM ... giving ExecutionRecord's columns in order (e: the row's table).
        self._execution_select = ""
        self._closed = False
        # The kinds extend() has read: by id, its number in the list.
        self._known_kinds: list[Kind] = []
        self._known_ids: dict[int, int] = {}
        # The graphs' columns as GraphRecord's, in order (older schemas: ir_lines NULL).
        self._graph_select = GRAPH_COLUMNS
        # ir_lines read so far, by id (0: an empty line), each row kept compressed.
        self._lines = StoredLines(_unpacked)
        # Held while the connection is in use, so close_all (another thread) closes it
        # only between reads.
        self._using = threading.RLock()
        with self._using:  # close_all waits for the schema's reads too
            self._open_connection()
            try:
                self._check_schema()
            except TraceError:
                self.close()
                raise

    def _open_connection(self) -> None:
        # A connection close_all cannot see would keep the -wal and -shm it leaves behind.
        with _OPENING:
            self._db, self._closed = self._connect(), False
            _OPEN.add(self)

    def _connect(self) -> sqlite3.Connection:
        path = self.path
        if _EXITING:
            raise TraceError(f"{path}: not opened: this process is exiting")
        if not os.path.lexists(path):
            raise TraceError(f"{path}: no such trace file")
        if not path.is_file():
            raise TraceError(f"{path}: not a lazyviz trace (not a regular file)")
        try:
            with io.open(path, "rb") as handle:
                header = handle.read(20)
                magic = header[:len(SQLITE_MAGIC)]
        except PermissionError:
            raise TraceError(f"{path}: permission denied") from None
        except OSError as error:
            raise TraceError(f"{path}: cannot read: {error.strerror}") from None
        if magic != SQLITE_MAGIC:
            raise TraceError(f"{path}: not a lazyviz trace" + (" (empty file)" if not magic else ""))
        uri = read_only_uri(path, header)
        try:
            db = sqlite3.connect(uri, uri=True, check_same_thread=False)
        except sqlite3.Error as error:
            raise TraceError(f"{path}: cannot open: {_one_line(error)}") from None
        return db

    def _check_schema(self) -> None:
        """The tables we read must be real tables with our columns: a crafted file (a
        recursive VIEW named `run`) must not make a reader hang."""
        try:
            kinds = dict(self._db.execute("SELECT name, type FROM sqlite_master"))
        except (sqlite3.Error, ValueError) as error:  # ValueError: undecodable schema text
            raise TraceError(f"{self.path}: not a lazyviz trace ({_one_line(error)})") from None
        if kinds.get("meta") != "table":
            raise TraceError(f"{self.path}: not a lazyviz trace")
        meta = dict(self._query("SELECT key, value FROM meta LIMIT 16"))
        if meta.get("format") != FORMAT:
            raise TraceError(f"{self.path}: not a lazyviz trace")
        version_text = meta.get("schema_version", "0")
        if not isinstance(version_text, str) or not version_text.isdigit() or len(version_text) > 6:
            raise TraceError(f"{self.path}: damaged: schema version {_shown(version_text)}")
        version = int(version_text)
        if version > SCHEMA_VERSION:
            raise TraceError(
                f"{self.path}: trace schema {version} is newer than this lazyviz reads "
                f"({SCHEMA_VERSION}); upgrade lazyviz"
            )
        self.version = version
        expected = (COLUMNS if version >= MEMORY_FROM else V5_COLUMNS if version >= LINES_FROM
                    else V4_COLUMNS if version >= KINDS_FROM else OLD_COLUMNS)
        if version < LINES_FROM:
            self._graph_select = GRAPH_COLUMNS.replace("ir_lines", "NULL AS ir_lines")
        for table, columns in expected.items():
            if kinds.get(table) != "table":
                raise TraceError(f"{self.path}: damaged: table {table} is missing")
            found = {row[1] for row in self._query(f"PRAGMA table_info({table})")}
            added = ADDED_COLUMNS.get(table, ()) if version < SCHEMA_VERSION else ()
            missing = [c for c in columns if c not in found and c not in added]
            if missing:
                raise TraceError(f"{self.path}: damaged: table {table} lacks {', '.join(missing)}")
            if table == "executions" and version < KINDS_FROM:
                wide = ", ".join(c if c in found else f"NULL AS {c}" for c in columns)
                self._execution_select = f"SELECT {wide} FROM executions AS e"
        if version >= KINDS_FROM:
            # LEFT JOIN: a row whose kind is missing reads as damaged, not as absent.
            wide = ", ".join(f"k.{c}" if c in KIND_FIELDS else f"e.{c}" for c in ExecutionRecord._fields)
            self._execution_select = f"SELECT {wide} FROM executions AS e LEFT JOIN kinds AS k ON k.id = e.kind"

    def _query(self, sql: str, params: tuple | list = ()) -> list[tuple]:
        with self._using:
            self._check_not_exiting()
            return self._query_now(sql, params)

    def _check_not_exiting(self) -> None:
        # Once close_all runs, no read starts: a thread reading in a loop would take the
        # lock again the moment it let it go (a lock is not fair), and close_all, never
        # getting it, would leave the connection, its -wal and -shm open.
        if _EXITING:
            raise TraceError(f"{self.path}: not read: this process is exiting")

    def _query_now(self, sql: str, params: tuple | list) -> list[tuple]:
        try:
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.OperationalError as error:
                if "decode" not in str(error) or self._db.text_factory is not str:
                    raise
                # A damaged byte in a stored text: read again, showing it as U+FFFD, so
                # what is readable still reads. Not the default: a Python text factory
                # costs seconds on a million rows.
                self._db.text_factory = _replacing_text
                return self._db.execute(sql, params).fetchall()
        except (sqlite3.Error, OverflowError, ValueError) as error:
            raise TraceError(f"{self.path}: damaged: {_one_line(error)}") from None
        except MemoryError:
            raise TraceError(f"{self.path}: damaged: a stored value is too large to read") from None

    def _rows(self, sql: str, params: tuple | list, make: Callable[[tuple], Any]) -> list:
        # Without the cyclic collector while the rows become objects: a million new
        # objects would set it off again and again, each time walking all made so far
        # (a million-execution `report` went from 34 s to 28 s). They hold no cycles.
        collecting = gc.isenabled()
        gc.disable()
        try:
            return [make(row) for row in self._query(sql, params)]
        except _Damaged as error:
            raise TraceError(f"{self.path}: damaged: {error}") from None
        finally:
            if collecting:
                gc.enable()

    def close(self) -> None:
        with self._using:
            self._db.close()
            self._closed = True
        _OPEN.discard(self)

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def run(self) -> RunInfo:
        fields: dict[str, Any] = {}
        for key, value in self._query("SELECT key, value FROM run"):
            if key in _RUN_FIELDS:
                try:
                    parsed = _json(_str(value, f"run field {key}"), f"run field {key}")
                    kind, _ = _RUN_FIELDS[key]
                    if not isinstance(parsed, kind) or (isinstance(parsed, bool) and kind in (int, (int, type(None)))):
                        raise _Damaged(f"run field {key} is {_shown(parsed)}")
                except _Damaged as error:
                    raise TraceError(f"{self.path}: damaged: {error}") from None
                fields[key] = parsed
        get = lambda key: fields.get(key, _RUN_FIELDS[key][1])
        argv = [str(a) for a in get("argv")]
        names = {str(k): str(v) for k, v in get("names").items()}
        finished = fields.get("exit_status") is not None or "ended_by" in fields
        complete = get("complete")
        return RunInfo(
            argv=argv, backend=get("backend"), capture=get("capture"),
            versions={str(k): str(v) for k, v in get("versions").items()},
            start_time=get("start_time"), pid=get("pid"), cwd=get("cwd"),
            rank={str(k): str(v) for k, v in get("rank").items()},
            finished=finished, exit_status=get("exit_status"), error=get("error"),
            traceback=get("traceback"), steps=get("steps"), elapsed_s=get("elapsed_s"),
            names={**TS_NAMES, **names}, device=get("device"), module=get("module"),
            capabilities=Capabilities.from_json(fields["capabilities"]) if "capabilities" in fields  # type: ignore[arg-type]
            else EARLIER_CAPABILITIES.get(get("backend"), Capabilities()),
            # Traces from before the parent recorded endings: an exit status is the child's.
            complete=finished if complete is None else complete,
            ended_by=get("ended_by"), startup_ms=get("startup_ms"),
            tracer_errors=[str(e) for e in get("tracer_errors")], source=get("source"),
            notes=[str(note) for note in get("notes")],
            error_frames=[Frame(f[0], f[1], f[2]) for f in get("error_frames") if isinstance(f, list) and len(f) == 3
                          and isinstance(f[0], str) and type(f[1]) is int and isinstance(f[2], str)],
            cpu_at_raise=[(f[0], f[1], f[2]) for f in get("cpu_at_raise") if isinstance(f, list) and len(f) == 3
                          and all(isinstance(part, str) for part in f)],
            device_used=get("device_used"), stopped_after_steps=get("stopped_after_steps"),
            stopped_after_iterations=get("stopped_after_iterations"), optimizer_steps=get("optimizer_steps"),
            optimizer_marks=[n for n in get("optimizer_marks") if type(n) is int],
            optimizer_step_at=_frame(*step_at) if (step_at := get("optimizer_step_at")) and len(step_at) == 3 else None,
            sources={str(k): str(v) for k, v in get("sources").items()}, fix_trial=TrialRecord.from_json(get("fix_trial")),
            fallbacks_after_last_execution={str(op): n for op, n in get("fallbacks_after_last_execution").items()
                                            if type(n) is int and n > 0},
            counters_after_last_execution={str(name): n for name, n in get("counters_after_last_execution").items()
                                           if type(n) is int},
            lost_pieces=[(f[0], Frame(f[1], f[2], f[3])) for f in get("lost_pieces") if isinstance(f, list)
                         and len(f) == 4 and isinstance(f[0], str) and isinstance(f[1], str) and type(f[2]) is int
                         and isinstance(f[3], str)],
            annotations=[a for a in map(_annotation, get("annotations")) if a is not None],
            failures=[Failure(f["execution"], f["error"]) for f in get("failures")
                      if isinstance(f, dict) and type(f.get("execution")) is int and isinstance(f.get("error"), str)],
            peak_rss=self.peak_rss(),
        )

    def peak_rss(self) -> list[PeakRss]:
        """The process's peak resident memory where it rose, in order; none for traces from
        before MEMORY_FROM."""
        if self.version < MEMORY_FROM:
            return []
        rows = self._query("SELECT execution, step, peak_rss_kb FROM memory ORDER BY execution")
        return [PeakRss(*row) for row in rows if all(type(value) is int and value >= 0 for value in row)]

    def count(self) -> int:
        return self._query("SELECT COUNT(*) FROM executions")[0][0]

    def executions(self, start: int = 0, stop: int | None = None) -> list[Execution]:
        """Executions with start <= index < stop, in order."""
        query = f"{self._execution_select} WHERE e.idx >= ?"
        params: list[int] = [start]
        if stop is not None:
            query += " AND e.idx < ?"
            params.append(stop)
        return self._rows(query + " ORDER BY e.idx", params, _ExecutionRows())

    def table(self) -> ExecutionTable:
        """Every execution, as columns: what a reader of the whole run holds (a million
        executions in about 32 MB, read in about 2 s)."""
        if self.version < KINDS_FROM:
            return ExecutionTable.of(self.executions())
        collecting = gc.isenabled()
        gc.disable()
        try:
            table = self._columns()
        finally:
            if collecting:
                gc.enable()
        # None: say what is wrong, and where, as the row-by-row reader does.
        return table if table is not None else ExecutionTable.of(self.executions())

    def _columns(self) -> ExecutionTable | None:
        """The columns a report reads (None: a value is out of range; the row-by-row reader
        then says which)."""
        kinds, numbers = self._kinds()
        low, high, count = self._query("SELECT MIN(idx), MAX(idx), COUNT(*) FROM executions")[0]
        # Indices without gaps (as written, unless a write failed) need not be read.
        contiguous = not count or (type(low) is type(high) is int and low >= 0 and high - low == count - 1)
        names = ("step", "kind", "sync_ms", "trace_ms")
        columns = self._read_columns(names if contiguous else ("idx", *names), count)
        if columns is None:
            return None
        if contiguous:
            columns.insert(0, range(low, high + 1) if count else range(0))
        index, step, kind, sync_ms, trace_ms = columns
        if len(index) != len(step) or (index and (index[0] < 0 or min(step) < 0)):
            return None
        if numbers is not None:  # ids are not 0..n-1 (the writer's): renumber
            try:
                kind = array("l", map(numbers.__getitem__, kind))
            except KeyError:
                return None
        elif kind and not (min(kind) >= 0 and max(kind) < len(kinds)):
            return None
        return ExecutionTable(kinds, kind, index, step, sync_ms, trace_ms, load_rest=self._rest_of,
                              load_one=self._rest_of_one)

    def _read_columns(self, names: tuple[str, ...], limit: int, start: int | None = None) -> list[array] | None:
        """These columns of the first `limit` executions (from index `start` on; limit -1:
        all), as arrays; None when a value is not a finite number of the column's type."""
        columns = [array("d" if name.endswith("_ms") else "q" if name != "kind" else "l") for name in names]
        try:
            where = "" if start is None else f"WHERE idx >= {int(start)} "
            with self._using:
                self._check_not_exiting()
                cursor = self._db.execute(f"SELECT {', '.join(names)} FROM executions {where}ORDER BY idx LIMIT ?",
                                          (limit,))
                while rows := cursor.fetchmany(65536):
                    for column, values in zip(columns, zip(*rows)):
                        column.extend(values)
        except (TypeError, OverflowError):  # a value of the wrong type
            return None
        except (sqlite3.Error, ValueError) as error:
            raise TraceError(f"{self.path}: damaged: {_one_line(error)}") from None
        if not all(all(map(math.isfinite, column)) for column in columns if column.typecode == "d"):
            return None
        return columns

    def _reopen(self) -> None:
        with self._using:
            if self._closed:  # a table outlived the `with` that read it
                self._open_connection()

    def _rest_of_one(self, index: int) -> tuple[float, float, float]:
        self._reopen()
        rows = self._query("SELECT compile_ms, execute_ms, start_ms FROM executions WHERE idx = ?", (index,))
        try:
            return (_float(rows[0][0], "compile_ms"), _float(rows[0][1], "execute_ms"),
                    _float(rows[0][2], "start_ms")) if rows else (0.0, 0.0, 0.0)
        except _Damaged as error:
            raise TraceError(f"{self.path}: damaged: execution {index}: {error}") from None

    def _rest_of(self, count: int) -> tuple[array, array, array]:
        self._reopen()
        columns = self._read_columns(("compile_ms", "execute_ms", "start_ms"), count)
        if columns is None or len(columns[0]) != count:
            self.executions()  # raises, saying which execution is damaged
            raise TraceError(f"{self.path}: damaged: executions changed while read")
        return columns[0], columns[1], columns[2]

    def _kinds(self) -> tuple[list[Kind], dict[int, int] | None]:
        """The kinds, checked as execution rows are; and id -> number where ids are not
        their numbers."""
        rows = self._query(f"SELECT id, {', '.join(KIND_FIELDS)} FROM kinds ORDER BY id")
        check = _ExecutionRows()
        kinds = [self._kind(row, check) for row in rows]
        ids = [row[0] for row in rows]
        numbers = None if ids == list(range(len(ids))) else {kind_id: n for n, kind_id in enumerate(ids)}
        return kinds, numbers

    def _kind(self, row: tuple, check: _ExecutionRows) -> Kind:
        """One row of the kinds table (its id first), checked as an execution row is."""
        kind_id, fields = row[0], row[1:]
        cause, detail, file, line, function, stack_id, graph, nodes, cache, fallback_ops, counters, call, context = fields
        try:
            e = check((0, 0, cause, detail, file, line, function, stack_id, graph, nodes, cache, 0.0, 0.0, 0.0,
                       0.0, 0.0, fallback_ops, counters, call, context))
        except _Damaged as error:
            raise TraceError(f"{self.path}: damaged: kind {_shown(kind_id)}: "
                             f"{str(error).partition(': ')[2]}") from None
        return Kind(e.cause, e.detail, e.frame, e.stack_id, e.graph, e.nodes, e.cache, e.fallback_ops,
                    e.counters, e.call, e.context)

    def read_more(self, table: ExecutionTable, limit: int | None = None) -> int:
        """Add to `table` the executions after the last one it holds, at most `limit`, read
        as columns: how the UI follows a growing trace of a million executions. Returns
        how many were added."""
        start = table.index[-1] + 1 if len(table) else 0
        stop = None if limit is None else start + limit
        columns = None
        if self.version >= KINDS_FROM:
            columns = self._read_columns(("idx", "kind", "step", "sync_ms", "trace_ms", "compile_ms", "execute_ms",
                                          "start_ms"), -1 if limit is None else limit, start)
        if columns is not None and columns[0] and min(columns[2]) >= 0:
            numbered = self._kind_numbers(columns[1])
            if numbered is not None:
                table.extend_columns(self._known_kinds, numbered, *columns[:1], *columns[2:])
                return len(numbered)
        if columns is not None and not columns[0]:
            return 0
        # An older trace, or a value out of range: row by row, which says what is wrong.
        found = self.executions(start, stop)
        table.extend(found)
        return len(found)

    def _kind_numbers(self, ids: array) -> array | None:
        """Kind ids as numbers into self._known_kinds, reading the kinds not read yet; None
        when an id names no kind."""
        known = self._known_ids
        new = [kind_id for kind_id in set(ids) if kind_id not in known]
        if new:
            check = _ExecutionRows()
            marks = ", ".join("?" * len(new))
            for row in self._query(f"SELECT id, {', '.join(KIND_FIELDS)} FROM kinds WHERE id IN ({marks}) ORDER BY id",
                                   new):
                known[row[0]] = len(self._known_kinds)
                self._known_kinds.append(self._kind(row, check))
            if any(kind_id not in known for kind_id in new):
                return None
        if all(known[kind_id] == kind_id for kind_id in set(ids)):  # as the writer numbers them
            return ids
        return array("l", map(known.__getitem__, ids))

    def execution(self, index: int) -> Execution:
        if not 0 <= index < 2**63:
            raise TraceError(f"{self.path}: no execution {index} (the trace has {self.count()})")
        found = self.executions(index, index + 1)
        if not found:
            raise TraceError(f"{self.path}: no execution {index} (the trace has {self.count()})")
        return found[0]

    def stack(self, stack_id: int | None) -> list[Frame]:
        """The Python stack of an execution, outermost frame first."""
        if stack_id is None:
            return []
        rows = self._query("SELECT frames FROM stacks WHERE id = ?", (stack_id,))
        if not rows:
            return []
        try:
            frames = _json(_str(rows[0][0], "a stack"), "a stack")
            if not isinstance(frames, list):
                raise _Damaged("a stack is not a list")
            return [Frame(_str(f[0], "a stack file"), _int(f[1], "a stack line"), _str(f[2], "a stack function"))
                    for f in frames if isinstance(f, list) and len(f) == 3]
        except _Damaged as error:
            raise TraceError(f"{self.path}: damaged: {error}") from None

    def graph(self, graph_id: str) -> Graph | None:
        found = self._rows(f"SELECT {self._graph_select} FROM graphs WHERE id = ?", (graph_id,), self._graph)
        return found[0] if found else None

    def graphs(self) -> list[Graph]:
        return self._rows(f"SELECT {self._graph_select} FROM graphs ORDER BY first_execution", (), self._graph)

    def _graph(self, row: tuple) -> Graph:
        r = GraphRecord(*row)
        name = f"graph {_shown(r.id)}"
        if r.ir_lines is None:
            ir_text = _text(r.ir_text, f"{name}'s IR")
        else:
            ir_text = "\n".join(map(self._lines.__getitem__, self._checked_ids(r.ir_lines, f"{name}'s IR")))
        return Graph(_str(r.id, "a graph id"), _int(r.nodes, f"{name}'s nodes"), ir_text,
                     _text(r.backend_text, f"{name}'s backend text"),
                     _int(r.first_execution, f"{name}'s first execution"))

    def ir_texts(self) -> GraphTexts:
        """graph id -> IR text, for the analysis ("" where captured light): the graphs
        stored as line ids stay so (GraphTexts), their lines read once."""
        def pair(row: tuple) -> tuple[str, str | array]:
            name = f"graph {_shown(row[0])}'s IR"
            return _str(row[0], "a graph id"), _text(row[1], name) if row[2] is None else self._checked_ids(row[2], name)

        ir_lines = "ir_lines" if self.version >= LINES_FROM else "NULL"
        graphs = dict(self._rows(f"SELECT id, ir_text, {ir_lines} FROM graphs ORDER BY first_execution", (), pair))
        return GraphTexts(graphs, self._lines)

    def _checked_ids(self, value: Any, name: str) -> array:
        """A graph's line ids, each naming a stored line (read now if new; 0 names an empty
        one, as no stored line is)."""
        ids = _line_ids(value, name)
        highest = max(ids, default=0)
        if highest >= len(self._lines):
            self._read_lines()
        if highest >= len(self._lines) or self._lines.lacks_any(ids):
            raise _Damaged(f"{name} names a line the trace lacks")
        return ids

    def _read_lines(self) -> None:
        """The lines stored since the last read (a live run's new graphs bring new ones),
        each row checked readable now and kept as stored."""
        lines = self._lines
        for first, count, text in self._query(
                "SELECT first, count, text FROM ir_lines WHERE first >= ? ORDER BY first", (len(lines),)):
            try:
                if type(first) is not int or type(count) is not int or count < 1 or first > len(lines) + 2**24:
                    raise _Damaged(f"IR lines from {_shown(first)} are out of order")
                read = _unpacked(text, f"IR lines from {first}")
            except _Damaged as error:
                raise TraceError(f"{self.path}: damaged: {error}") from None
            lines.add(first, count, read if len(read) == count else None, text)

    def poll(self, next_index: int, limit: int | None = None, writer_gone: bool = False) -> Followed:
        """One step of following a growing trace: executions from next_index on (at most
        limit), the run as it stands, and whether everything the run will write is read
        (writer_gone: its process is known to have exited, e.g. killed)."""
        stop = None if limit is None else next_index + limit
        executions = self.executions(next_index, stop)
        run = self.run
        read = next_index + len(executions)
        done = not executions and (run.finished or writer_gone) and self.count() == read
        return Followed(executions, run, done)

    def follow(
        self, poll_s: float = 0.25, should_stop: Callable[[], bool] = lambda: False
    ) -> Iterator[list[Execution]]:
        """Yield batches of new executions as the trace grows; ends once the run has
        finished and everything was read, or when should_stop() says so.

        Sleep-polls: select/poll on a regular file always reports ready and spins."""
        next_index = 0
        while not should_stop():
            step = self.poll(next_index)
            if step.executions:
                next_index = step.executions[-1].index + 1
                yield step.executions
                continue
            if step.done:
                return
            time.sleep(poll_s)


class Followed(NamedTuple):
    executions: list[Execution]
    run: RunInfo
    done: bool  # the run finished and every execution it wrote was read


def open(path: str | os.PathLike[str]) -> Trace:
    return Trace(path)


def open_ranks(folder: str | os.PathLike[str], problems: dict[int, str] | None = None) -> dict[int, Trace]:
    """The traces of a multi-process run (one per rank, as `lazyviz run -o DIR` writes
    them under torchrun), by rank. problems: where to put each rank whose trace cannot be
    opened (rank -> why), instead of raising on it: a job where a rank died while writing
    is still read for the others."""
    folder = Path(folder)
    if not os.access(folder, os.R_OK | os.X_OK):
        raise TraceError(f"{folder}: permission denied")
    traces: dict[int, Trace] = {}
    for path in sorted(folder.glob("rank*.trace")):
        named = path.stem.removeprefix("rank")
        try:
            trace = Trace(path)
            rank = trace.run.rank.get("rank")
        except TraceError as error:
            if problems is None or not named.isdigit():
                raise
            problems[int(named)] = str(error)
            continue
        number = rank if rank is not None and rank.isdigit() else named
        if not str(number).isdigit():
            continue
        traces[int(number)] = trace
    if not traces:
        if problems:
            raise TraceError(next(iter(problems.values())))
        raise TraceError(f"{folder}: no rank*.trace files in this folder")
    return dict(sorted(traces.items()))
