"""The trace file: an SQLite database (WAL) that the tracer writes and everything else
reads. `lazyviz.open(path)` (this package's `open`) reads one. Recording is
`lazyviz.trace(...)`, a function of the lazyviz package, not this package.
"""
from __future__ import annotations

from lazyviz.trace.model import CAUSES, Execution, Frame, Graph, GraphTexts, RunInfo
from lazyviz.trace.reader import Trace, TraceError, open, open_ranks

__all__ = ["CAUSES", "Execution", "Frame", "Graph", "GraphTexts", "RunInfo", "Trace", "TraceError", "open", "open_ranks"]
