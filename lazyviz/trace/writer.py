"""Writes a trace: one committed transaction per execution, so readers can follow it
and a killed process leaves a valid file up to its last execution."""
from __future__ import annotations

import json
import os
import queue
import sqlite3
import threading
import weakref
from pathlib import Path
from typing import NamedTuple

from lazyviz.trace.schema import (
    FORMAT,
    INSERT_EXECUTION,
    INSERT_GRAPH,
    INSERT_STACK,
    SCHEMA_VERSION,
    TABLES,
    ExecutionRecord,
    GraphRecord,
    StackRecord,
)


class _RunFields(NamedTuple):
    fields: list[tuple[str, str]]  # key, JSON value


class _NewExecution(NamedTuple):
    execution: ExecutionRecord
    graph: GraphRecord | None
    stack: StackRecord | None


class _ExecuteTime(NamedTuple):
    index: int
    execute_ms: float


# What the writer thread receives: a record to store, an Event to set once everything
# before it is committed (flush), or None to stop.
_Item = _RunFields | _NewExecution | _ExecuteTime | threading.Event | None

# Writers alive in this process: a forked child must never use (or wait on) them.
_WRITERS: weakref.WeakSet[TraceWriter] = weakref.WeakSet()


class TraceWriter:
    """Writes executions from a background thread, so the traced step never waits on
    SQLite; `flush()` waits for what was queued (the tracer calls it after each
    mark_step and at exit, so a killed run keeps every completed step).

    The file must not exist or be empty (`lazyviz run` creates and locks it first):
    a writer never removes or replaces anything."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        _create_empty(self.path)
        # isolation_level=None: we open and commit transactions ourselves.
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode: a commit survives the process being killed, without an fsync.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(TABLES)
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT INTO meta VALUES (?, ?)",
                [("format", FORMAT), ("schema_version", str(SCHEMA_VERSION))],
            )
        self.error: str | None = None  # the first write that failed, for the user
        self.written = 0  # executions committed
        self._abandoned = False
        # SimpleQueue: a put is a few microseconds of C, on the traced step's hot path.
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
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
        done.wait()

    def close(self) -> None:
        """Commit what is queued, fold the WAL back into the file, and close it."""
        if self._abandoned:
            return
        self._queue.put(None)
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
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            if self.error is None:
                try:
                    self._write(item)
                except sqlite3.Error as error:
                    self.error = str(error)

    def _write(self, item: _RunFields | _NewExecution | _ExecuteTime) -> None:
        db = self._db
        db.execute("BEGIN")
        try:
            if isinstance(item, _RunFields):
                db.executemany("INSERT OR REPLACE INTO run VALUES (?, ?)", item.fields)
            elif isinstance(item, _ExecuteTime):
                db.execute("UPDATE executions SET execute_ms = ?, sync_ms = compile_ms + ? WHERE idx = ?",
                           (item.execute_ms, item.execute_ms, item.index))
            else:
                if item.graph is not None:
                    db.execute(INSERT_GRAPH, item.graph)
                if item.stack is not None:
                    db.execute(INSERT_STACK, item.stack._replace(frames=json.dumps(item.stack.frames)))
                execution = item.execution
                db.execute(INSERT_EXECUTION, execution._replace(fallback_ops=json.dumps(execution.fallback_ops),
                                                                counters=json.dumps(execution.counters)))
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        if isinstance(item, _NewExecution):
            self.written += 1


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
