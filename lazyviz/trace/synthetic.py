"""Traces made without running torch, through the real writer and records: for unit
tests, and for benches that need a big trace fast."""
from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from lazyviz.trace.files import rank_trace
from lazyviz.trace.schema import ExecutionRecord, GraphRecord, StackRecord, split_row
from lazyviz.trace.writer import TraceWriter, stored


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


GRAPHS_PER_STEP = 5  # a training step: forward+backward, optimizer, an item(), a fallback's two


def write_rank(path: Path, rank: int, world: int, executions: int, diverge_at: int | None = None,
               died: bool = False) -> None:
    """One rank of a data-parallel job: GRAPHS_PER_STEP graphs a step, written as the
    tracer writes them (a graph's first execution with it, later ones as repeated rows).
    diverge_at: from this step on, the first graph's batch is 24 rows, not 16. died: the
    rank stops a third of the way in, without an end record."""
    writer = TraceWriter(path)
    writer.set_run(argv=["train.py"], backend="ts", capture="full", device="lazy", versions={"torch": "2.13.0"},
                   cwd="/repo", rank={"rank": str(rank), "world_size": str(world)})
    graphs: set[str] = set()
    repeated: list[tuple] = []
    stop = executions // 3 if died else executions
    for index in range(stop):
        step, slot = divmod(index, GRAPHS_PER_STEP)
        rows = 24 if diverge_at is not None and step >= diverge_at and slot == 0 else 16
        graph = f"{slot:02d}{rows:02d}" + "0" * 12
        cause = ("mark_step", "mark_step", "item", "fallback", "fallback")[slot]
        record = execution(index, step=step, cause=cause, line=30 + slot, graph=graph, nodes=40,
                           cache="hit" if graph in graphs else "miss",
                           detail="aten::nonzero" if cause == "fallback" else None)
        if graph not in graphs:
            graphs.add(graph)
            writer.add_execution(record, GraphRecord(graph, 40, chain_ir(40, rows), "graph()", index))
        else:
            kind, row = split_row(stored(record))
            repeated.append((row[0], row[1], writer.kind_id(kind), *row[2:]))
    writer.add_rows(repeated)
    if not died:
        writer.set_run(exit_status=0, error=None, traceback=None, steps=stop // GRAPHS_PER_STEP, complete=True,
                       elapsed_s=1.0)
    writer.close()


def write_rank_job(folder: Path, ranks: int, executions: int, diverge_at: int | None = None) -> None:
    """A torchrun job's folder of rank traces: rank ranks // 2 diverges at diverge_at,
    and (of three or more) the last rank died early."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        write_rank(rank_trace(folder, rank), rank, ranks, executions,
                   diverge_at=diverge_at if rank == ranks // 2 else None, died=ranks > 2 and rank == ranks - 1)
