"""The trace file: an SQLite database (WAL) that the tracer writes and everything else reads."""
from __future__ import annotations

from lazyviz.trace.model import CAUSES, Execution, Frame, Graph, RunInfo
from lazyviz.trace.reader import Trace, TraceError, open, open_ranks

__all__ = ["CAUSES", "Execution", "Frame", "Graph", "RunInfo", "Trace", "TraceError", "open", "open_ranks"]
