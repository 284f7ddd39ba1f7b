"""Execution and run records as the reader makes them, for the unit tests (no torch):
from the trace factory's defaults (lazyviz.trace.synthetic) with the fields a test sets."""
from __future__ import annotations

import re

from lazyviz.trace.model import Execution, Frame, RunInfo
from lazyviz.trace.synthetic import chain_ir, execution


def ex(index: int, **fields: object) -> Execution:
    """An Execution as the reader makes it, from the factory's record defaults."""
    record = execution(index, **fields)
    return Execution(index=record.idx, step=record.step, cause=record.cause, detail=record.detail,
                     frame=Frame(record.file, record.line, record.function) if record.file else None,
                     stack_id=record.stack_id, graph=record.graph, nodes=record.nodes, cache=record.cache,
                     sync_ms=record.sync_ms, trace_ms=record.trace_ms, compile_ms=record.compile_ms,
                     execute_ms=record.execute_ms, start_ms=record.start_ms,
                     fallback_ops=record.fallback_ops, counters=record.counters, call=record.call,
                     context=record.context)


def run_info(**fields: object) -> RunInfo:
    base = dict(argv=["train.py"], backend="ts", capture="full", versions={}, start_time="", pid=1, cwd="/repo",
                rank={}, finished=True, exit_status=0, error=None, traceback=None, steps=None, elapsed_s=1.0,
                complete=True)
    return RunInfo(**{**base, **fields})  # type: ignore[arg-type]


def clean(steps: int = 6) -> list[Execution]:
    return [ex(i, step=i, cache="miss" if i == 0 else "hit") for i in range(steps)]


IR16, IR24 = chain_ir(6, rows=16), chain_ir(6, rows=24)


# A number printed as Python writes a float: more than three decimals, or an exponent.
UNROUNDED = re.compile(r"(?<![\w.])\d+\.\d{4,}(?![\w.])|\d\.?\d*e[-+]\d+")
