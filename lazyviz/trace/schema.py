"""The trace file's schema and its records: the one place that knows table and column
names. The writer stores these records and the reader reads them back; column lists and
INSERT statements are derived from the records' fields."""
from __future__ import annotations

import functools
import operator
from array import array
from typing import NamedTuple

FORMAT = "lazyviz-trace"
# 3: graph texts stored zlib-compressed (a BLOB; short ones stay TEXT).
# 4: what repeats about an execution (cause, site, graph, cache, ...) stored once per
#    distinct combination in `kinds`; an execution row is its index, step, kind and times.
# 5: an IR text stored as the ids of its lines in `ir_lines`, where each distinct line
#    (at its place) is stored once: a run's graphs repeat most of their lines, and the
#    reader parses each line once, not each graph (graphs.ir_lines; ir_text then "").
# 6: the process's peak resident memory where it rose, by execution, in `memory`.
SCHEMA_VERSION = 6
# Texts at least this long are stored compressed: an IR or TorchScript dump shrinks 5-10x.
COMPRESS_FROM = 256
# Columns added after version 1: a version-1 trace lacks them and reads them as NULL.
ADDED_COLUMNS = {"executions": ("call", "context")}
# The first version with the `kinds` table.
KINDS_FROM = 4
# The first version with `ir_lines`, and graphs that name their lines.
LINES_FROM = 5
# The first version with `memory`.
MEMORY_FROM = 6
# The array type of a graph's line ids: 4 bytes each (stored little-endian).
LINE_ID = "I" if array("I").itemsize == 4 else "L"


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


# An ExecutionRecord's fields split into what a row stores (its times, and its kind's id
# in `kind`) and what its kind stores: everything that stays the same while a step repeats.
_ROW_OWN = ("idx", "step", "sync_ms", "trace_ms", "compile_ms", "execute_ms", "start_ms")
ROW_FIELDS = ("idx", "step", "kind", *_ROW_OWN[2:])
KIND_FIELDS = tuple(f for f in ExecutionRecord._fields if f not in _ROW_OWN)
_kind_part = operator.itemgetter(*(ExecutionRecord._fields.index(f) for f in KIND_FIELDS))
_row_part = operator.itemgetter(*(ExecutionRecord._fields.index(f) for f in _ROW_OWN))


def split_row(row: tuple) -> tuple[tuple, tuple]:
    """An ExecutionRecord in stored form -> (its kind's fields, its row's fields without the
    kind id)."""
    return _kind_part(row), _row_part(row)


class GraphRecord(NamedTuple):
    """One row of `graphs`: a distinct graph, stored once."""

    id: str
    nodes: int
    ir_text: str | bytes  # bytes: zlib-compressed UTF-8 (schema 3)
    backend_text: str | bytes
    first_execution: int
    # The IR as line ids (4-byte little-endian, zlib-compressed), ir_text then "" (schema 5).
    # What the writer is given holds the text in ir_text: it stores the lines itself.
    ir_lines: bytes | None = None


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
    first_execution INTEGER NOT NULL,
    ir_lines BLOB  -- NULL where ir_text holds the text
);
-- Each distinct line of the graphs' IR at its place in a graph (its line number) once,
-- numbered from 1: a row holds `count` lines from id `first` on, joined by newlines (TEXT,
-- or a BLOB of zlib-compressed UTF-8). A graph's ir_lines lists its lines' ids in order,
-- its text those lines joined by newlines.
CREATE TABLE ir_lines (first INTEGER PRIMARY KEY, count INTEGER NOT NULL, text NOT NULL);
CREATE TABLE stacks (id INTEGER PRIMARY KEY, frames TEXT NOT NULL);
-- The process's peak resident memory (KiB, getrusage's ru_maxrss) as the writer found it
-- when it stored executions: a row where it rose, by the last execution stored then.
CREATE TABLE memory (execution INTEGER PRIMARY KEY, step INTEGER NOT NULL, peak_rss_kb INTEGER NOT NULL);
CREATE TABLE kinds (
    id INTEGER PRIMARY KEY,
    cause TEXT NOT NULL,
    detail TEXT,
    file TEXT,
    line INTEGER,
    function TEXT,
    stack_id INTEGER,
    graph TEXT NOT NULL,
    nodes INTEGER NOT NULL,
    cache TEXT NOT NULL,
    fallback_ops TEXT NOT NULL,
    counters TEXT NOT NULL,
    call TEXT,
    context TEXT
);
CREATE TABLE executions (
    idx INTEGER PRIMARY KEY,
    step INTEGER NOT NULL,
    kind INTEGER NOT NULL,
    sync_ms REAL NOT NULL,
    trace_ms REAL NOT NULL,
    compile_ms REAL NOT NULL,
    execute_ms REAL NOT NULL,
    start_ms REAL NOT NULL
);
-- For people querying a trace with sqlite3: every execution with its kind, one row each
-- (the columns of an ExecutionRecord). lazyviz itself never reads it.
CREATE VIEW execution_rows AS
    SELECT e.idx, e.step, k.cause, k.detail, k.file, k.line, k.function, k.stack_id, k.graph, k.nodes,
           k.cache, e.sync_ms, e.trace_ms, e.compile_ms, e.execute_ms, e.start_ms, k.fallback_ops,
           k.counters, k.call, k.context
    FROM executions AS e JOIN kinds AS k ON k.id = e.kind;
"""


def _insert(table: str, record: type[tuple], verb: str = "INSERT") -> str:
    fields = record._fields  # type: ignore[attr-defined]
    return f"{verb} INTO {table} ({', '.join(fields)}) VALUES ({', '.join('?' * len(fields))})"


GRAPH_COLUMNS = ", ".join(GraphRecord._fields)


@functools.cache
def insert_executions(rows: int) -> str:
    """One INSERT of `rows` execution rows, their values (ROW_FIELDS) flattened in order."""
    values = "(" + ", ".join("?" * len(ROW_FIELDS)) + ")"
    return f"INSERT INTO executions ({', '.join(ROW_FIELDS)}) VALUES " + ", ".join([values] * rows)


INSERT_KIND = f"INSERT INTO kinds (id, {', '.join(KIND_FIELDS)}) VALUES ({', '.join('?' * (len(KIND_FIELDS) + 1))})"
# Graphs and stacks are stored once: a second insert of the same one is a no-op.
INSERT_GRAPH = _insert("graphs", GraphRecord, "INSERT OR IGNORE")
INSERT_STACK = _insert("stacks", StackRecord, "INSERT OR IGNORE")
INSERT_LINES = "INSERT INTO ir_lines (first, count, text) VALUES (?, ?, ?)"

# The columns a reader needs, per table: checked when a trace is opened.
COLUMNS = {
    "run": ("key", "value"),
    "graphs": GraphRecord._fields,
    "stacks": StackRecord._fields,
    "kinds": ("id", *KIND_FIELDS),
    "executions": ROW_FIELDS,
    "ir_lines": ("first", "count", "text"),
    "memory": ("execution", "step", "peak_rss_kb"),
}
# Before MEMORY_FROM: no memory.
V5_COLUMNS = {t: c for t, c in COLUMNS.items() if t != "memory"}
# Before LINES_FROM: no ir_lines, and the graphs hold their texts whole.
V4_COLUMNS = {**{t: c for t, c in V5_COLUMNS.items() if t != "ir_lines"},
              "graphs": tuple(f for f in GraphRecord._fields if f != "ir_lines")}
# Before KINDS_FROM: no kinds either, and each execution row holds all its fields.
OLD_COLUMNS = {**{t: c for t, c in V4_COLUMNS.items() if t != "kinds"}, "executions": ExecutionRecord._fields}
