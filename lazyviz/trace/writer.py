"""Writes a trace: one committed transaction per execution, so readers can follow it
and a killed process leaves a valid file up to its last execution."""
from __future__ import annotations

import json
import os
import queue
import sqlite3
import threading
from pathlib import Path

from lazyviz.trace.schema import EXECUTION_COLUMNS, FORMAT, SCHEMA_VERSION, TABLES


def remove_trace(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


class TraceWriter:
    """Writes executions from a background thread, so the traced step never waits on
    SQLite; `flush()` waits for what was queued (the tracer calls it after each
    mark_step and at exit, so a killed run keeps every completed step)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        remove_trace(self.path)
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
        # SimpleQueue: a put is a few microseconds of C, on the traced step's hot path.
        self._queue: queue.SimpleQueue[tuple | threading.Event | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write_loop, name="lazyviz-trace-writer", daemon=True)
        self._thread.start()

    def set_run(self, **fields: object) -> None:
        self._queue.put(("run", [(key, json.dumps(value)) for key, value in fields.items()]))

    def add_execution(self, row: tuple, graph: tuple | None = None, stack: tuple | None = None) -> None:
        """Queue one execution (its last two fields are dicts), with its graph and stack
        when they are new. It is committed as one transaction."""
        self._queue.put(("execution", row, graph, stack))

    def set_execute_ms(self, index: int, execute_ms: float) -> None:
        """An execute time learnt after the execution was queued (asynchronous backends)."""
        self._queue.put(("execute_ms", index, execute_ms))

    def flush(self) -> None:
        """Wait until everything queued so far is committed."""
        done = threading.Event()
        self._queue.put(done)
        done.wait()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        self._db.close()

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

    def _write(self, item: tuple) -> None:
        db = self._db
        db.execute("BEGIN")
        try:
            if item[0] == "run":
                db.executemany("INSERT OR REPLACE INTO run VALUES (?, ?)", item[1])
            elif item[0] == "execute_ms":
                _, index, execute_ms = item
                db.execute("UPDATE executions SET execute_ms = ?, sync_ms = compile_ms + ? WHERE idx = ?",
                           (execute_ms, execute_ms, index))
            else:
                _, row, graph, stack = item
                if graph is not None:
                    db.execute("INSERT OR IGNORE INTO graphs VALUES (?, ?, ?, ?, ?)", graph)
                if stack is not None:
                    db.execute("INSERT OR IGNORE INTO stacks VALUES (?, ?)", (stack[0], json.dumps(stack[1])))
                db.execute(_INSERT_EXECUTION, (*row[:-2], json.dumps(row[-2]), json.dumps(row[-1])))
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")


_INSERT_EXECUTION = f"INSERT INTO executions ({EXECUTION_COLUMNS}) VALUES ({', '.join('?' * 18)})"
