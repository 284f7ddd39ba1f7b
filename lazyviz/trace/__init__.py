"""The trace file: an SQLite database (WAL) that the tracer writes and everything else reads.

`lazyviz.trace.open(path)` reads one. The package is also callable: `lazyviz.trace(path)`
records one from inside Python (lazyviz.session.trace), so that the name a user reaches
for does both; the call is forwarded at call time, so reading never imports the tracer.
"""
from __future__ import annotations

import sys
import types
from typing import Any

from lazyviz.trace.model import CAUSES, Execution, Frame, Graph, RunInfo
from lazyviz.trace.reader import Trace, TraceError, open, open_ranks

__all__ = ["CAUSES", "Execution", "Frame", "Graph", "RunInfo", "Trace", "TraceError", "open", "open_ranks"]


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from lazyviz.session import trace

        return trace(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
