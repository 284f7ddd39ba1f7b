"""Multi-process runs: one trace per rank, and the first step where ranks ran
different graphs (one rank saw another batch shape or took another branch)."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from lazyviz.analysis.diff import diff_texts
from lazyviz.trace.model import Execution, Frame


@dataclass(frozen=True)
class Divergence:
    step: int
    groups: dict[tuple[str, ...], list[int]]  # graph sequence of the step -> ranks that ran it
    frame: Frame | None  # where the first differing execution synced
    graphs: dict[int, str]  # rank -> its first graph that differs
    change: str  # the diff between the majority's graph and the odd one
    divergent_steps: int  # how many steps differ in all

    def message(self) -> str:
        ranks = "; ".join(f"ranks {', '.join(map(str, r))} ran [{', '.join(g[:8] for g in seq)}]"
                          for seq, r in self.groups.items())
        return f"ranks diverge at step {self.step} ({self.divergent_steps} divergent steps): {ranks}; {self.change}"


def step_graphs(executions: list[Execution]) -> dict[int, tuple[str, ...]]:
    steps: dict[int, list[str]] = defaultdict(list)
    for execution in executions:
        steps[execution.step].append(execution.graph)
    return {step: tuple(graphs) for step, graphs in steps.items()}


def find_divergence(ranks: Mapping[int, list[Execution]], ir_texts: Mapping[int, Mapping[str, str]]) -> Divergence | None:
    per_rank = {rank: step_graphs(executions) for rank, executions in ranks.items()}
    if len(per_rank) < 2:
        return None
    common = sorted(set.intersection(*(set(steps) for steps in per_rank.values())))
    divergent = [step for step in common if len({steps[step] for steps in per_rank.values()}) > 1]
    if not divergent:
        return None
    step = divergent[0]
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for rank in sorted(per_rank):
        groups[per_rank[rank][step]].append(rank)
    majority = max(groups, key=lambda seq: len(groups[seq]))
    position = next(i for i in range(max(len(s) for s in groups))
                    if len({s[i] if i < len(s) else None for s in groups}) > 1)
    odd_rank = next(r for seq, rs in groups.items() if seq != majority for r in rs)
    base_rank = groups[majority][0]
    graphs = {rank: (per_rank[rank][step] + ("",) * (position + 1))[position] for rank in per_rank}
    in_step = [e for e in ranks[odd_rank] if e.step == step]
    frame = in_step[position].frame if position < len(in_step) else None
    diff = diff_texts(ir_texts[base_rank].get(graphs[base_rank], ""), ir_texts[odd_rank].get(graphs[odd_rank], ""))
    if diff is None or diff.first is None:
        change = "no IR to compare" if diff is None else "same IR"
    else:
        change = f"rank {odd_rank} vs rank {base_rank}: {diff.first.describe()}"
    return Divergence(step, dict(groups), frame, graphs, change, len(divergent))
