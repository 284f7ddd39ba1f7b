"""The trace file's schema and its records: the one place that knows table and column
names. The writer stores these records and the reader reads them back; column lists and
INSERT statements are derived from the records' fields."""
from __future__ import annotations

import functools
from typing import NamedTuple

FORMAT = "lazyviz-trace"
# 3: graph texts stored zlib-compressed (a BLOB; short ones stay TEXT), indexes for readers.
SCHEMA_VERSION = 3
# Texts at least this long are stored compressed: an IR or TorchScript dump shrinks 5-10x.
COMPRESS_FROM = 256
# Columns added after version 1: a version-1 trace lacks them and reads them as NULL.
ADDED_COLUMNS = {"executions": ("call", "context")}


class ExecutionRecord(NamedTuple):
    """One row of `executions`, in column order."""

    idx: int
    step: int
    cause: str
    detail: str | None
    file: str | None
    line: int | None
    function: str | None
    stack_id: int | None
    graph: str
    nodes: int
    cache: str  # "hit" or "miss"
    sync_ms: float
    trace_ms: float
    compile_ms: float
    execute_ms: float
    start_ms: float
    fallback_ops: dict[str, int]  # stored as JSON
    counters: dict[str, int]  # stored as JSON
    call: str | None = None  # the call the user's line made that led here ("clip_grad_norm_")
    context: str | None = None  # the test running (pytest's PYTEST_CURRENT_TEST, without the phase)


class GraphRecord(NamedTuple):
    """One row of `graphs`: a distinct graph, stored once."""

    id: str
    nodes: int
    ir_text: str | bytes  # bytes: zlib-compressed UTF-8 (schema 3)
    backend_text: str | bytes
    first_execution: int


class StackRecord(NamedTuple):
    """One row of `stacks`: a distinct Python stack, outermost frame first."""

    id: int
    frames: list[tuple[str, int, str]]  # stored as JSON


TABLES = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE run (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE graphs (
    id TEXT PRIMARY KEY,
    nodes INTEGER NOT NULL,
    ir_text NOT NULL,  -- TEXT, or a BLOB of zlib-compressed UTF-8
    backend_text NOT NULL,
    first_execution INTEGER NOT NULL
);
CREATE TABLE stacks (id INTEGER PRIMARY KEY, frames TEXT NOT NULL);
CREATE TABLE executions (
    idx INTEGER PRIMARY KEY,
    step INTEGER NOT NULL,
    cause TEXT NOT NULL,
    detail TEXT,
    file TEXT,
    line INTEGER,
    function TEXT,
    stack_id INTEGER,
    graph TEXT NOT NULL,
    nodes INTEGER NOT NULL,
    cache TEXT NOT NULL,
    sync_ms REAL NOT NULL,
    trace_ms REAL NOT NULL,
    compile_ms REAL NOT NULL,
    execute_ms REAL NOT NULL,
    start_ms REAL NOT NULL,
    fallback_ops TEXT NOT NULL,
    counters TEXT NOT NULL,
    call TEXT,
    context TEXT
);
"""


def _insert(table: str, record: type[tuple], verb: str = "INSERT") -> str:
    fields = record._fields  # type: ignore[attr-defined]
    return f"{verb} INTO {table} ({', '.join(fields)}) VALUES ({', '.join('?' * len(fields))})"


EXECUTION_COLUMNS = ", ".join(ExecutionRecord._fields)
GRAPH_COLUMNS = ", ".join(GraphRecord._fields)
INSERT_EXECUTION = _insert("executions", ExecutionRecord)
EXECUTION_FIELDS = ExecutionRecord._fields


@functools.cache
def insert_executions(rows: int) -> str:
    """One INSERT of `rows` executions, their values flattened in column order."""
    values = "(" + ", ".join("?" * len(EXECUTION_FIELDS)) + ")"
    return f"INSERT INTO executions ({EXECUTION_COLUMNS}) VALUES " + ", ".join([values] * rows)
# Graphs and stacks are stored once: a second insert of the same one is a no-op.
INSERT_GRAPH = _insert("graphs", GraphRecord, "INSERT OR IGNORE")
INSERT_STACK = _insert("stacks", StackRecord, "INSERT OR IGNORE")

# The columns a reader needs, per table: checked when a trace is opened.
COLUMNS = {
    "run": ("key", "value"),
    "graphs": GraphRecord._fields,
    "stacks": StackRecord._fields,
    "executions": ExecutionRecord._fields,
}
