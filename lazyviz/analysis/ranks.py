"""Multi-process runs: one trace per rank, and the first step where ranks ran
different graphs (one rank saw another batch shape or took another branch)."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from lazyviz.analysis.graphs import diff_across
from lazyviz.trace.model import Execution, Frame
from lazyviz.trace.table import ExecutionTable


@dataclass(frozen=True)
class Divergence:
    step: int
    groups: dict[tuple[str, ...], list[int]]  # graph sequence of the step -> ranks that ran it
    frame: Frame | None  # where the first differing execution synced
    graphs: dict[int, str]  # rank -> its first graph that differs
    change: str  # the diff between the majority's graph and the odd one
    divergent_steps: int  # how many steps differ in all

    def message(self) -> str:
        ranks = "; ".join(f"{'rank' if len(r) == 1 else 'ranks'} {rank_list(r)} ran [{', '.join(g[:8] for g in seq)}]"
                          for seq, r in self.groups.items())
        return f"ranks diverge at step {self.step} ({self.divergent_steps} divergent steps): {ranks}; {self.change}"


def rank_list(ranks: list[int]) -> str:
    """"0-127, 129-254": consecutive ranks as ranges (a job of 256 ranks stays one line)."""
    spans: list[list[int]] = []
    for rank in sorted(ranks):
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    return ", ".join(str(a) if a == b else f"{a}, {b}" if b == a + 1 else f"{a}-{b}" for a, b in spans)


def step_graphs(executions: Sequence[Execution]) -> dict[int, tuple[str, ...]]:
    """Step -> the graphs it ran, in order; from the table's columns (no Execution is made)."""
    table = ExecutionTable.of(executions)
    graph_of = [kind.graph for kind in table.kinds]
    steps: dict[int, list[str]] = defaultdict(list)
    for step, kind in zip(table.step, table.kind):
        steps[step].append(graph_of[kind])
    return {step: tuple(graphs) for step, graphs in steps.items()}


def find_divergence(ranks: Mapping[int, Sequence[Execution]], ir_texts: Mapping[int, Mapping[str, str]],
                    stopped: Collection[int] = ()) -> Divergence | None:
    """The first step at which ranks ran different graphs. stopped: ranks that did not
    end cleanly (died, crashed, killed): the step they stopped in is not compared, as
    they ran only part of it."""
    per_rank = {rank: step_graphs(executions) for rank, executions in ranks.items()}
    for rank in stopped:
        if per_rank.get(rank):
            del per_rank[rank][max(per_rank[rank])]
    if len(per_rank) < 2:
        return None
    # Each step among the ranks that ran it: a rank that died early leaves the later
    # steps to the others.
    ran = {step: [rank for rank in sorted(per_rank) if step in per_rank[rank]]
           for step in sorted(set().union(*per_rank.values()))}
    divergent = [step for step, who in ran.items() if len({per_rank[rank][step] for rank in who}) > 1]
    if not divergent:
        return None
    step = divergent[0]
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for rank in ran[step]:
        groups[per_rank[rank][step]].append(rank)
    majority = max(groups, key=lambda seq: len(groups[seq]))
    position = next(i for i in range(max(len(s) for s in groups))
                    if len({s[i] if i < len(s) else None for s in groups}) > 1)
    odd_rank = next(r for seq, rs in groups.items() if seq != majority for r in rs)
    base_rank = groups[majority][0]
    graphs = {rank: (per_rank[rank][step] + ("",) * (position + 1))[position] for rank in ran[step]}
    odd = ExecutionTable.of(ranks[odd_rank])
    in_step = [p for p, s in enumerate(odd.step) if s == step]
    frame = odd.kind_at(in_step[position]).frame if position < len(in_step) else None
    diff = diff_across(ir_texts[base_rank], graphs[base_rank], ir_texts[odd_rank], graphs[odd_rank])
    if diff is None or diff.first is None:
        change = "no IR to compare" if diff is None else "same IR"
    else:
        change = f"rank {odd_rank} vs rank {base_rank}: {diff.first.describe()}"
    return Divergence(step, dict(groups), frame, graphs, change, len(divergent))
