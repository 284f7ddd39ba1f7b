"""The trace file's schema: the one place that knows table and column names."""
from __future__ import annotations

FORMAT = "lazyviz-trace"
SCHEMA_VERSION = 1

TABLES = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE run (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE graphs (
    id TEXT PRIMARY KEY,
    nodes INTEGER NOT NULL,
    ir_text TEXT NOT NULL,
    backend_text TEXT NOT NULL,
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
    counters TEXT NOT NULL
);
"""

EXECUTION_COLUMNS = (
    "idx, step, cause, detail, file, line, function, stack_id, graph, nodes, cache, sync_ms, trace_ms, "
    "compile_ms, execute_ms, start_ms, fallback_ops, counters"
)

# The columns a reader needs, per table: checked when a trace is opened.
COLUMNS = {
    "run": ("key", "value"),
    "graphs": ("id", "nodes", "ir_text", "backend_text", "first_execution"),
    "stacks": ("id", "frames"),
    "executions": tuple(c.strip() for c in EXECUTION_COLUMNS.split(",")),
}
