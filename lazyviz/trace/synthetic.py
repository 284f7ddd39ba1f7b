"""Traces made without running torch, through the real writer and records: for unit
tests, and for benches that need a big trace fast."""
from __future__ import annotations

import os
from collections.abc import Iterable

from lazyviz.trace.schema import ExecutionRecord, GraphRecord, StackRecord
from lazyviz.trace.writer import TraceWriter


def execution(idx: int, **fields: object) -> ExecutionRecord:
    """An execution record with plausible defaults; pass any field to change it."""
    record = ExecutionRecord(
        idx=idx, step=idx, cause="mark_step", detail=None, file="/repo/train.py", line=30, function="main",
        stack_id=None, graph="g0", nodes=5, cache="hit", sync_ms=1.0, trace_ms=2.0, compile_ms=0.0,
        execute_ms=1.0, start_ms=idx * 3.0, fallback_ops={}, counters={},
    )
    return record._replace(**fields)


def chain_ir(nodes: int, rows: int = 16, ops: tuple[str, ...] = ("aten::mm", "aten::relu", "aten::add")) -> str:
    """IR text of a chain of ops on one input, as torch prints it."""
    lines = ["IR {", f"  %0 = [Float[{rows},64]] lazy_tensors::device_data(), device=CPU0, NodeType=D"]
    for index in range(1, nodes):
        lines.append(f"  %{index} = [Float[{rows},64]] {ops[index % len(ops)]}(%{index - 1}), NodeType=N")
    lines[-1] += ", ROOT=0"
    return "\n".join(lines + ["}"]) + "\n"


def write_trace(path: str | os.PathLike[str], executions: Iterable[ExecutionRecord],
                graphs: Iterable[GraphRecord] = (), stacks: Iterable[StackRecord] = (),
                finished: bool = True, **run: object) -> None:
    """A whole trace: run fields (argv, backend, ... with defaults), graphs stored with
    the first execution that names them, then the ending unless finished=False."""
    writer = TraceWriter(path)
    writer.set_run(**{"argv": ["train.py"], "backend": "ts", "capture": "full", "device": "lazy",
                      "versions": {"torch": "2.13.0"}, "cwd": "/repo", **run})
    pending = {graph.id: graph for graph in graphs}
    pending_stacks = {stack.id: stack for stack in stacks}
    steps = 0
    for record in executions:
        writer.add_execution(record, pending.pop(record.graph, None),
                             pending_stacks.pop(record.stack_id, None) if record.stack_id else None)
        steps = max(steps, record.step + (record.cause == "mark_step"))
    if finished:
        writer.set_run(exit_status=0, error=None, traceback=None, steps=steps, complete=True, elapsed_s=1.0)
    writer.close()
