"""Explain every cache miss that is not the first graph of its site: the closest graph
compiled before (same site first, then any), and what differs, origins first."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lazyviz.analysis.diff import Change, GraphDiff, diff_texts
from lazyviz.analysis.ir import parsed
from lazyviz.trace.model import Execution, Frame

# Misses in the first steps are warm-up: step 0 also runs initialisation, step 1 is the
# first steady-state step (optimizer state now exists).
WARMUP_STEPS = 2
MAX_CANDIDATES = 8


@dataclass(frozen=True)
class Recompile:
    execution: int
    step: int
    graph: str
    closest: str | None  # the graph compared against; None when nothing was compiled before
    closest_execution: int | None
    same_site: bool
    frame: Frame | None
    warmup: bool
    diff: GraphDiff | None  # None when the IR was not captured or did not parse
    note: str = ""

    @property
    def changes(self) -> tuple[Change, ...]:
        return self.diff.changes if self.diff else ()

    def headline(self) -> str:
        if self.diff is None:
            return self.note or "no IR to compare"
        first = self.diff.first
        if first is None:
            return (f"same IR as graph {self.closest}, but its inputs share buffers differently "
                    "(a Python number now equal or no longer equal to another input): torch hashes that "
                    "into the cache key")
        more = len(self.diff.origins) - 1
        return first.describe() + (f" (+{more} more)" if more > 0 else "")


def explain_recompiles(
    executions: list[Execution], ir_texts: Mapping[str, str], warmup_steps: int = WARMUP_STEPS
) -> list[Recompile]:
    """ir_texts: graph id -> IR text (empty when captured light)."""
    compiled: list[Execution] = []  # earlier misses, one per distinct graph
    seen_sites: set[str] = set()
    explained: list[Recompile] = []
    for execution in executions:
        if not execution.is_miss:
            continue
        site = execution.site
        if site in seen_sites:
            explained.append(_explain(execution, compiled, ir_texts, execution.step < warmup_steps))
        seen_sites.add(site)
        if all(e.graph != execution.graph for e in compiled):
            compiled.append(execution)
    return explained


def _explain(execution: Execution, compiled: list[Execution], ir_texts: Mapping[str, str],
             warmup: bool) -> Recompile:
    same_site = [e for e in compiled if e.site == execution.site and e.graph != execution.graph]
    candidates = same_site or [e for e in compiled if e.graph != execution.graph]
    new = parsed(ir_texts.get(execution.graph, ""))
    base = dict(execution=execution.index, step=execution.step, graph=execution.graph,
                frame=execution.frame, warmup=warmup)
    if not candidates:
        return Recompile(closest=None, closest_execution=None, same_site=False, diff=None,
                         note="nothing compiled before to compare with", **base)
    if new is None:
        latest = candidates[-1]
        return Recompile(closest=latest.graph, closest_execution=latest.index, same_site=bool(same_site),
                         diff=None, note="no IR captured (run with --capture full)", **base)
    best: tuple[tuple[int, int, int], Execution, GraphDiff] | None = None
    # The most recent few: a site that compiled dozens of graphs compares in bounded time.
    for order, candidate in enumerate(reversed(candidates[-MAX_CANDIDATES:])):  # most recent first on ties
        diff = diff_texts(ir_texts.get(candidate.graph, ""), ir_texts.get(execution.graph, ""))
        if diff is None:
            continue
        score = (len(diff.origins), len(diff.changes), order)
        if best is None or score < best[0]:
            best = (score, candidate, diff)
    if best is None:
        return Recompile(closest=None, closest_execution=None, same_site=False, diff=None,
                         note="no IR of earlier graphs to compare with", **base)
    _, closest, diff = best
    return Recompile(closest=closest.graph, closest_execution=closest.index, same_site=bool(same_site),
                     diff=diff, **base)


def explain_execution(
    executions: list[Execution], ir_texts: Mapping[str, str], index: int, warmup_steps: int = WARMUP_STEPS
) -> Recompile | None:
    """Explain any execution's graph against the closest graph compiled before it (the UI's
    Diff tab and `export --diff`); None for the first graph of the run."""
    target = next((e for e in executions if e.index == index), None)
    if target is None:
        return None
    compiled: list[Execution] = []
    for execution in executions:
        if execution.index >= index:
            break
        if execution.is_miss and all(e.graph != execution.graph for e in compiled):
            compiled.append(execution)
    if not any(e.graph != target.graph for e in compiled):
        return None
    return _explain(target, compiled, ir_texts, target.step < warmup_steps)
