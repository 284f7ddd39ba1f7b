"""The traces of a multi-process run, by rank: which one is shown, which comes next on
[ and ], and the overview of every rank's graphs step by step (the Ranks tab)."""
from __future__ import annotations

from pathlib import Path

from lazyviz.analysis.ranks import find_divergence, rank_list, step_graphs
from lazyviz.present import divergence_text
from lazyviz.trace import Trace
from lazyviz.trace.files import launch_folder


class Ranks:
    def __init__(self, paths: dict[int, Path] | None = None) -> None:
        self.paths = dict(paths or {})

    @classmethod
    def launched_by(cls, trace_path: Path) -> Ranks:
        """The traces of the processes torch_xla.launch started from this script's run."""
        return cls({int(path.stem[4:]): path for path in launch_folder(trace_path).glob("rank*.trace")
                    if path.stem[4:].isdigit()})

    def __len__(self) -> int:
        return len(self.paths)

    def first(self) -> int:
        return min(self.paths)

    def of(self, trace_path: Path) -> int | None:
        return next((rank for rank, path in self.paths.items() if path == trace_path), None)

    def after(self, trace_path: Path, direction: int) -> int:
        """The rank [ (-1) or ] (+1) goes to from the one shown, round the ends."""
        order = sorted(self.paths)
        current = self.of(trace_path)
        at = order.index(current) if current is not None else 0
        return order[(at + direction) % len(order)]

    def label(self, trace_path: Path) -> str:
        rank = self.of(trace_path)
        return "" if rank is None else f"rank {rank} of {len(self)} · "

    def overview(self) -> str:
        """Each step's graphs, the ranks that ran the same ones together, and where they
        first diverge. Reads every rank's trace: call it off the UI thread."""
        executions, ir_texts, stopped = {}, {}, []
        for rank, path in self.paths.items():
            with Trace(path) as trace:  # columns: a rank's steps and graphs, no Execution made
                executions[rank], ir_texts[rank] = trace.table(), trace.ir_texts()
                if not trace.run.ended_cleanly:
                    stopped.append(rank)
        per_rank = {rank: step_graphs(found) for rank, found in executions.items()}
        divergence = find_divergence(executions, ir_texts, stopped)
        lines = [f"# {len(self)} ranks; [ and ] show another rank's executions",
                 f"# {divergence_text(divergence) if divergence else 'every rank ran the same graphs at every step'}",
                 ""]
        for step in sorted(set().union(*(steps.keys() for steps in per_rank.values()))):
            # The ranks that ran the same graphs, together: 256 ranks stay one short line.
            groups: dict[tuple[str, ...], list[int]] = {}
            for rank, steps in per_rank.items():
                groups.setdefault(steps.get(step, ()), []).append(rank)
            mark = "!" if len(groups) > 1 else " "
            cells = "  |  ".join(f"{'rank' if len(ranks) == 1 else 'ranks'} {rank_list(ranks)}: "
                                 f"{' '.join(g[:8] for g in seq) or '-'}" for seq, ranks in groups.items())
            lines.append(f"{mark} step {step:4d}  {cells}")
        return "\n".join(lines)
