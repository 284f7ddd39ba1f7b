"""Writes a trace: one committed transaction per execution, so readers can follow it
and a killed process leaves a valid file up to its last execution."""
from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path

from lazyviz.trace.schema import EXECUTION_COLUMNS, FORMAT, SCHEMA_VERSION, TABLES


def remove_trace(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


class TraceWriter:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        remove_trace(self.path)
        # isolation_level=None: we open and commit transactions ourselves.
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode: a commit survives the process being killed, without an fsync.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._lock = threading.Lock()
        self._db.executescript(TABLES)
        with self._transaction():
            self._db.executemany(
                "INSERT INTO meta VALUES (?, ?)",
                [("format", FORMAT), ("schema_version", str(SCHEMA_VERSION))],
            )

    def _transaction(self) -> "_Transaction":
        return _Transaction(self._db, self._lock)

    def set_run(self, **fields: object) -> None:
        with self._transaction():
            self._db.executemany(
                "INSERT OR REPLACE INTO run VALUES (?, ?)",
                [(key, json.dumps(value)) for key, value in fields.items()],
            )

    def add_execution(
        self,
        row: tuple,
        graph: tuple | None = None,
        stack: tuple[int, str] | None = None,
    ) -> None:
        """Write one execution, with its graph and stack when they are new."""
        with self._transaction():
            if graph is not None:
                self._db.execute("INSERT OR IGNORE INTO graphs VALUES (?, ?, ?, ?, ?)", graph)
            if stack is not None:
                self._db.execute("INSERT OR IGNORE INTO stacks VALUES (?, ?)", stack)
            self._db.execute(
                f"INSERT INTO executions ({EXECUTION_COLUMNS}) VALUES ({', '.join('?' * 18)})", row
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()


class _Transaction:
    def __init__(self, db: sqlite3.Connection, lock: threading.Lock) -> None:
        self._db = db
        self._lock = lock

    def __enter__(self) -> None:
        self._lock.acquire()
        self._db.execute("BEGIN")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self._db.execute("ROLLBACK" if exc_type else "COMMIT")
        finally:
            self._lock.release()
