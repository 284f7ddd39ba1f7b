"""Writes a trace: what arrives is committed in one transaction per time window (0.1 s),
so readers follow it within a second and a killed process leaves a valid file that
lacks at most the last window."""
from __future__ import annotations

import itertools
import json
import os
import queue
import re
import resource
import sqlite3
import sys
import threading
import time
import weakref
import zlib
from array import array
from collections.abc import Callable
from itertools import chain
from pathlib import Path
from typing import NamedTuple

from lazyviz.trace.files import journal_for
from lazyviz.trace.schema import (
    COMPRESS_FROM,
    FORMAT,
    INSERT_GRAPH,
    INSERT_KIND,
    INSERT_LINES,
    INSERT_STACK,
    KIND_FIELDS,
    LINE_ID,
    ROW_FIELDS,
    SCHEMA_VERSION,
    TABLES,
    ExecutionRecord,
    GraphRecord,
    StackRecord,
    insert_executions,
    split_row,
)

_COUNTERS_AT = KIND_FIELDS.index("counters")  # in a kind's stored fields


class _RunFields(NamedTuple):
    fields: list[tuple[str, str]]  # key, JSON value


class _NewExecution(NamedTuple):
    execution: ExecutionRecord
    graph: GraphRecord | None
    stack: StackRecord | None


class _ExecuteTime(NamedTuple):
    index: int
    execute_ms: float


# What the writer thread receives: a record to store, a list of rows (ROW_FIELDS), an
# Event to set once everything before it is committed (flush), or None to stop.
_Item = _RunFields | _NewExecution | _ExecuteTime | list | threading.Event | None
_Record = _RunFields | _NewExecution | _ExecuteTime | list

# How long executions may wait to be committed: what a SIGKILL can lose, and what the
# live UI lags. One commit per window, not per execution: a commit per execution cost
# the traced loop about 130 us each (the writer thread's wake-up and the GIL).
COMMIT_WINDOW_S = 0.1
# getrusage's ru_maxrss is in KiB on Linux, in bytes on macOS.
_RSS_UNIT = 1024 if sys.platform == "darwin" else 1
MAX_ROWS_PER_INSERT = 1024
# IR lines the writer remembers, to store a line met again by its id: a heavy run's
# distinct lines (a BERT fine-tune's 1,100 graphs: 54,000, 18 MB of the traced process).
# Past this many they are let go, and a line met again is stored again.
KEPT_LINES = 65_536
# Line breaks other than "\n" that str.splitlines() also splits at: a text holding one
# is stored whole, so that its lines read back are the lines the IR parser reads.
_OTHER_BREAKS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")

# Writers alive in this process: a forked child must never use (or wait on) them.
_WRITERS: weakref.WeakSet[TraceWriter] = weakref.WeakSet()


class TraceWriter:
    """Writes executions from a background thread, so the traced step never waits on
    SQLite. The thread commits what has arrived at most once per COMMIT_WINDOW_S, as one
    transaction; `flush()` waits for what was queued (at exit, and for a reader that
    must see everything now).

    The file must not exist or be empty (`lazyviz run` creates and locks it first):
    a writer never removes or replaces anything."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        _create_empty(self.path)
        # isolation_level=None: we open and commit transactions ourselves.
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        # WAL: readers (the live UI) never block the writer. On a network filesystem a
        # rollback journal: WAL's shared memory is not shared between hosts there.
        self.journal, self.journal_note = journal_for(self.path)
        self._db.execute(f"PRAGMA journal_mode={self.journal}")
        # NORMAL: a commit survives the process being killed, without an fsync each.
        self._db.execute("PRAGMA synchronous=NORMAL")
        # Fold the WAL into the file every 64 pages (256 KB), not SQLite's 1,000: what is
        # recorded lives in the trace file itself as it grows, so a disk that fills
        # mid-run leaves a trace with most of the run in it, not a 4 KB file beside a WAL.
        self._db.execute("PRAGMA wal_autocheckpoint=64")
        self._db.executescript(TABLES)
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT INTO meta VALUES (?, ?)",
                [("format", FORMAT), ("schema_version", str(SCHEMA_VERSION))],
            )
        self.error: str | None = None  # the first write that failed, for the user
        self.written = 0  # executions committed
        self._peak_rss = 0  # KiB, as last noted in `memory`
        # An execution's kind (KIND_FIELDS) -> its id in `kinds`: a loop's steps repeat a
        # few kinds, so a row stores 8 values, not 20. Numbered when first asked for (by
        # any thread: the tracer numbers the kinds its repeated rows use); written with
        # the next window, before any row that uses them.
        self._kinds: dict[tuple, int] = {}
        self._unwritten_kinds: list[tuple] = []  # (id, *kind)
        self._kind_fields: list[tuple] = []  # each kind by its id
        self._kinds_lock = threading.Lock()
        # (IR line, its line number) -> its id in `ir_lines` (KEPT_LINES of them); the
        # writer thread's alone.
        self._lines: dict[tuple[str, int], int] = {}
        self._line_count = 0
        # Where rows wait outside the queue (the backend's repeated rows): taken each window.
        self._source: Callable[[], list[tuple]] | None = None
        self._abandoned = False
        # SimpleQueue: a put is a few microseconds of C, on the traced step's hot path.
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._urgent = threading.Event()  # a flush or close: commit now, not at the window's end
        self._thread = threading.Thread(target=self._write_loop, name="lazyviz-trace-writer", daemon=True)
        self._thread.start()
        _WRITERS.add(self)

    def set_run(self, **fields: object) -> None:
        if not self._abandoned:
            self._queue.put(_RunFields([(key, json.dumps(value)) for key, value in fields.items()]))

    def add_execution(self, execution: ExecutionRecord, graph: GraphRecord | None = None,
                      stack: StackRecord | None = None) -> None:
        """Queue one execution, with its graph and stack when they are new. It is
        committed as one transaction."""
        if not self._abandoned:
            self._queue.put(_NewExecution(execution, graph, stack))

    def kind_id(self, kind: tuple) -> int:
        """The id of an execution kind (KIND_FIELDS, stored form) in `kinds`, numbering it
        if new."""
        with self._kinds_lock:
            number = self._kinds.get(kind)
            if number is None:
                number = self._kinds[kind] = len(self._kinds)
                self._kind_fields.append(kind)
                self._unwritten_kinds.append((number, *kind))
            return number

    def kind_with_counters(self, kind: int, counters: dict[str, int]) -> int:
        """The id of kind `kind` (an id kind_id gave) with `counters` added to its own."""
        with self._kinds_lock:
            fields = self._kind_fields[kind]
        own = json.loads(fields[_COUNTERS_AT])
        for name, count in counters.items():
            own[name] = own.get(name, 0) + count
        return self.kind_id((*fields[:_COUNTERS_AT], _counts_json(own), *fields[_COUNTERS_AT + 1:]))

    def add_rows(self, rows: list[tuple]) -> None:
        """Queue executions as rows (ROW_FIELDS, their kinds from kind_id)."""
        if rows and not self._abandoned:
            self._queue.put(rows)

    def set_source(self, take_rows: Callable[[], list[tuple]] | None) -> None:
        """Rows waiting elsewhere (ROW_FIELDS, their kinds from kind_id): taken and
        committed once per window, and by flush and close."""
        self._source = take_rows
        self._queue.put([])  # wakes a writer thread asleep on the queue: it now wakes every window

    def set_execute_ms(self, index: int, execute_ms: float) -> None:
        """An execute time learnt after the execution was queued (asynchronous backends)."""
        if not self._abandoned:
            self._queue.put(_ExecuteTime(index, execute_ms))

    def flush(self) -> None:
        """Wait until everything queued so far is committed."""
        if self._abandoned:
            return
        done = threading.Event()
        self._queue.put(done)
        self._urgent.set()
        done.wait()

    def close(self) -> None:
        """Commit what is queued, fold the WAL back into the file, and close it."""
        if self._abandoned:
            return
        self._queue.put(None)
        self._urgent.set()
        self._thread.join()
        try:
            # One self-contained file: no -wal or -shm left beside it. Fails harmlessly
            # while a reader (the live UI) still has it open; `lazyviz run` retries after.
            self._db.execute("PRAGMA busy_timeout=100")
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.execute("PRAGMA journal_mode=DELETE")
        except sqlite3.Error:
            pass
        self._db.close()
        self._abandoned = True

    def abandon(self) -> None:
        """In a forked child: the writer thread was not copied and the connection belongs
        to the parent, so drop everything without touching either."""
        self._abandoned = True

    def _write_loop(self) -> None:
        last_commit = 0.0
        while True:
            source = self._source
            # Sleep until something arrives; with a source, also wake once per window.
            try:
                batch: list[_Item] = [self._queue.get(timeout=COMMIT_WINDOW_S if source is not None else None)]
            except queue.Empty:
                batch = []
            # Let a window's worth gather (a flush or close cuts it short); waiting on an
            # Event holds no GIL, so the traced thread runs on.
            wait = last_commit + COMMIT_WINDOW_S - time.monotonic()
            if wait > 0 and not self._urgent.is_set():
                self._urgent.wait(wait)
            self._urgent.clear()
            # Taken before the queue: every kind a taken row uses was numbered before it.
            taken = self._take(source) if source is not None else []
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            # The taken rows first: an execute time queued since may update one of them.
            records: list[_Record] = [taken] if taken else []
            records += [item for item in batch
                        if item is not None and item != [] and not isinstance(item, threading.Event)]
            if records and self.error is None:
                try:
                    self._write(records)
                except (sqlite3.Error, ValueError):  # ValueError: a time that is not finite
                    self._write_each(records)
                last_commit = time.monotonic()
            for item in batch:
                if isinstance(item, threading.Event):
                    item.set()
            if any(item is None for item in batch):
                return

    def _take(self, source: Callable[[], list[tuple]]) -> list[tuple]:
        try:
            return source()
        except Exception as error:  # lazyviz's own failure: say it, and go on without the source
            self.error = self.error or f"taking repeated rows: {type(error).__name__}: {error}"
            self._source = None
            return []

    def _write_each(self, records: list[_Record]) -> None:
        """The window's transaction failed (a full disk): keep what still fits, one record
        per transaction, up to the first that fails."""
        for record in records:
            try:
                self._write([record])
            except (sqlite3.Error, ValueError) as error:
                self.error = str(error)
                return

    def _write(self, records: list[_Record]) -> None:
        """One transaction for the window: new kinds first, then the records in order;
        consecutive executions go in as a few inserts."""
        db = self._db
        # Rows for the executions first: numbering their kinds may add unwritten ones.
        prepared = [(item, self._row_of(item.execution)) if isinstance(item, _NewExecution) else (item, None)
                    for item in records]
        with self._kinds_lock:
            new_kinds, self._unwritten_kinds = self._unwritten_kinds, []
        executions: list[tuple] = []
        inserted, lines_before = 0, self._line_count
        last: tuple | None = None  # the last execution's row stored
        db.execute("BEGIN")
        try:
            if new_kinds:
                db.executemany(INSERT_KIND, new_kinds)
            for item, row in prepared:
                if type(item) is list:  # rows
                    executions += item
                    continue
                if isinstance(item, _NewExecution):
                    if item.graph is not None:
                        db.execute(INSERT_GRAPH, self._graph_row(db, item.graph))
                    if item.stack is not None:
                        db.execute(INSERT_STACK, item.stack._replace(frames=json.dumps(item.stack.frames)))
                    executions.append(row)
                    continue
                if executions:  # keep the order: an execute time may update a row just queued
                    _insert_executions(db, executions)
                    inserted += len(executions)
                    last = executions[-1]
                    executions = []
                if isinstance(item, _RunFields):
                    db.executemany("INSERT OR REPLACE INTO run VALUES (?, ?)", item.fields)
                else:
                    db.execute("UPDATE executions SET execute_ms = ?, sync_ms = compile_ms + ? WHERE idx = ?",
                               (item.execute_ms, item.execute_ms, item.index))
            if executions:
                _insert_executions(db, executions)
                inserted += len(executions)
                last = executions[-1]
            if last is not None:
                self._note_memory(db, last[0], last[1])
            db.execute("COMMIT")
        except BaseException:
            with self._kinds_lock:  # not written: with the next transaction
                self._unwritten_kinds[:0] = new_kinds
            # Lines numbered in it are rolled back: none is known stored, numbers go on from before.
            self._lines.clear()
            self._line_count = lines_before
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        self.written += inserted

    def _note_memory(self, db: sqlite3.Connection, execution: int, step: int) -> None:
        """The process's peak resident memory, where it rose since the last note, by the
        last execution stored (its index and step): read on this thread, it costs the
        traced program nothing, in every capture."""
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // _RSS_UNIT
        if peak > self._peak_rss:
            db.execute("INSERT OR REPLACE INTO memory (execution, step, peak_rss_kb) VALUES (?, ?, ?)",
                       (execution, step, peak))
            self._peak_rss = peak

    def _graph_row(self, db: sqlite3.Connection, graph: GraphRecord) -> GraphRecord:
        """The graph as stored: its IR as the ids of its lines (each new line stored now),
        or whole where it is short or holds other line breaks; texts compressed."""
        text = graph.ir_text
        if not isinstance(text, str) or len(text) < COMPRESS_FROM or _OTHER_BREAKS.search(text):
            return graph._replace(ir_text=_packed(text), backend_text=_packed(graph.backend_text))
        lines, known = text.split("\n"), self._lines
        if len(known) + len(lines) > KEPT_LINES:
            known.clear()
        # Most lines were met before, at the same place: one lookup each, in C.
        ids = array(LINE_ID, map(known.get, zip(lines, itertools.count(1)), itertools.repeat(0)))
        if 0 in ids:
            first, new = self._line_count + 1, []
            for at, line_id in enumerate(ids):
                if not line_id:
                    self._line_count += 1
                    ids[at] = known[lines[at], at + 1] = self._line_count
                    new.append(lines[at])
            db.execute(INSERT_LINES, (first, len(new), _packed("\n".join(new))))  # numbered on from first
        if sys.byteorder == "big":
            ids.byteswap()
        return graph._replace(ir_text="", backend_text=_packed(graph.backend_text),
                              ir_lines=zlib.compress(ids.tobytes(), 6))

    def _row_of(self, execution: ExecutionRecord) -> tuple:
        kind, row = split_row(stored(execution))
        return (row[0], row[1], self.kind_id(kind), *row[2:])


def _insert_executions(db: sqlite3.Connection, rows: list[tuple]) -> None:
    """`executions` rows (ROW_FIELDS), many per statement (INSERT ... VALUES (..), (..),
    ...): executemany would step SQLite once per row, giving the GIL away and taking it
    back each time, and on two cores every such hand-off is a wait for the traced thread.
    Chunks of 2**k rows, so a handful of statements are prepared once and cached."""
    limit = db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // len(ROW_FIELDS)
    done = 0
    while done < len(rows):
        size = 1 << min(len(rows) - done, limit, MAX_ROWS_PER_INSERT).bit_length() - 1
        db.execute(insert_executions(size), list(chain.from_iterable(rows[done:done + size])))
        done += size


def _packed(text: str | bytes) -> str | bytes:
    """A graph text as stored: compressed when long (zlib gives up the GIL while it works)."""
    if isinstance(text, str) and len(text) >= COMPRESS_FROM:
        return zlib.compress(text.encode("utf-8", "surrogatepass"), 6)
    return text


def stored(execution: ExecutionRecord) -> ExecutionRecord:
    """The record as its row stores it: counts as JSON."""
    return execution._replace(fallback_ops=_counts_json(execution.fallback_ops),
                              counters=_counts_json(execution.counters))


def _counts_json(counts: dict[str, int]) -> str:
    return json.dumps(counts) if counts else "{}"


def _create_empty(path: Path) -> None:
    """Create the file exclusively, or accept an empty one created for us."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        if not path.is_file() or path.stat().st_size != 0:
            raise FileExistsError(f"{path} exists: a trace writer never replaces a file") from None


def _abandon_after_fork() -> None:
    for writer in list(_WRITERS):
        writer.abandon()


os.register_at_fork(after_in_child=_abandon_after_fork)
