"""Reads a trace, finished or still being written. Never runs code from the file:
rows are plain SQL values and JSON."""
from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from lazyviz.trace.model import TS_NAMES, Execution, Frame, Graph, RunInfo
from lazyviz.trace.schema import EXECUTION_COLUMNS, FORMAT, SCHEMA_VERSION


class TraceError(Exception):
    """The file is not a trace lazyviz can read; the message is one line for the user."""


def _json_dict(text: str) -> dict:
    return json.loads(text) if text != "{}" else {}  # most rows: skip the parser


def _execution(row: tuple) -> Execution:
    (idx, step, cause, detail, file, line, function, stack_id, graph, nodes, cache, sync_ms, trace_ms,
     compile_ms, execute_ms, start_ms, fallback_ops, counters) = row
    return Execution(
        index=idx, step=step, cause=cause, detail=detail,
        frame=Frame(file, line, function) if file is not None else None,
        stack_id=stack_id, graph=graph, nodes=nodes, cache=cache,
        sync_ms=sync_ms, trace_ms=trace_ms, compile_ms=compile_ms, execute_ms=execute_ms,
        start_ms=start_ms, fallback_ops=_json_dict(fallback_ops), counters=_json_dict(counters),
    )


class Trace:
    """One trace file. Cheap to open; every call reads the file's current state."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise TraceError(f"{self.path}: no such trace file")
        try:
            self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.Error:
            raise TraceError(f"{self.path}: not a lazyviz trace") from None
        if meta.get("format") != FORMAT:
            raise TraceError(f"{self.path}: not a lazyviz trace")
        version = int(meta.get("schema_version", "0"))
        if version > SCHEMA_VERSION:
            raise TraceError(
                f"{self.path}: trace schema {version} is newer than this lazyviz reads "
                f"({SCHEMA_VERSION}); upgrade lazyviz"
            )
        self.schema_version = version

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def run(self) -> RunInfo:
        fields = {key: json.loads(value) for key, value in self._db.execute("SELECT key, value FROM run")}
        return RunInfo(
            argv=fields.get("argv", []),
            backend=fields.get("backend", "?"),
            capture=fields.get("capture", "?"),
            versions=fields.get("versions", {}),
            start_time=fields.get("start_time", ""),
            pid=fields.get("pid", 0),
            cwd=fields.get("cwd", ""),
            rank=fields.get("rank", {}),
            finished="exit_status" in fields,
            exit_status=fields.get("exit_status"),
            error=fields.get("error"),
            traceback=fields.get("traceback"),
            steps=fields.get("steps"),
            elapsed_s=fields.get("elapsed_s"),
            names={**TS_NAMES, **fields.get("names", {})},
            device=fields.get("device", "lazy"),
        )

    def count(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM executions").fetchone()[0]

    def executions(self, start: int = 0, stop: int | None = None) -> list[Execution]:
        """Executions with start <= index < stop, in order."""
        query = f"SELECT {EXECUTION_COLUMNS} FROM executions WHERE idx >= ?"
        params: list[int] = [start]
        if stop is not None:
            query += " AND idx < ?"
            params.append(stop)
        return [_execution(row) for row in self._db.execute(query + " ORDER BY idx", params)]

    def execution(self, index: int) -> Execution:
        found = self.executions(index, index + 1)
        if not found:
            raise TraceError(f"{self.path}: no execution {index} (the trace has {self.count()})")
        return found[0]

    def stack(self, stack_id: int | None) -> list[Frame]:
        """The Python stack of an execution, outermost frame first."""
        if stack_id is None:
            return []
        row = self._db.execute("SELECT frames FROM stacks WHERE id = ?", (stack_id,)).fetchone()
        return [Frame(*frame) for frame in json.loads(row[0])] if row else []

    def graph(self, graph_id: str) -> Graph | None:
        row = self._db.execute(
            "SELECT id, nodes, ir_text, backend_text, first_execution FROM graphs WHERE id = ?",
            (graph_id,),
        ).fetchone()
        return Graph(*row) if row else None

    def graphs(self) -> list[Graph]:
        rows = self._db.execute(
            "SELECT id, nodes, ir_text, backend_text, first_execution FROM graphs ORDER BY first_execution"
        )
        return [Graph(*row) for row in rows]

    def ir_texts(self) -> dict[str, str]:
        """graph id -> IR text, for the analysis ("" where captured light)."""
        return dict(self._db.execute("SELECT id, ir_text FROM graphs"))

    def follow(
        self, poll_s: float = 0.25, should_stop: Callable[[], bool] = lambda: False
    ) -> Iterator[list[Execution]]:
        """Yield batches of new executions as the trace grows; ends once the run has
        finished and everything was read, or when should_stop() says so.

        Sleep-polls: select/poll on a regular file always reports ready and spins."""
        next_index = 0
        while not should_stop():
            batch = self.executions(next_index)
            if batch:
                next_index = batch[-1].index + 1
                yield batch
                continue
            if self.run.finished and self.count() == next_index:
                return
            time.sleep(poll_s)


def open(path: str | os.PathLike[str]) -> Trace:  # noqa: A001 - mirrors the builtin on purpose
    return Trace(path)


def open_ranks(folder: str | os.PathLike[str]) -> dict[int, Trace]:
    """The traces of a multi-process run (one per rank, as `lazyviz run -o DIR/` writes
    them under torchrun), by rank."""
    folder = Path(folder)
    traces: dict[int, Trace] = {}
    for path in sorted(folder.glob("rank*.trace")):
        trace = Trace(path)
        rank = trace.run.rank.get("rank")
        traces[int(rank) if rank is not None else int(path.stem.removeprefix("rank") or 0)] = trace
    if not traces:
        raise TraceError(f"{folder}: no rank*.trace files in this folder")
    return dict(sorted(traces.items()))
