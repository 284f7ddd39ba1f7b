"""The run at a glance: counts, fallbacks, and the sync sites that cost the most."""
from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from lazyviz.trace.model import Execution


@dataclass(frozen=True)
class SiteStats:
    site: str
    function: str
    causes: dict[str, int]
    executions: int
    total_ms: float

    @property
    def mean_ms(self) -> float:
        return self.total_ms / self.executions if self.executions else 0.0


@dataclass(frozen=True)
class Summary:
    executions: int
    steps: int
    graphs: int
    misses: int
    causes: dict[str, int]
    fallbacks: dict[str, int]
    sync_ms: float
    trace_ms: float
    sites: list[SiteStats]  # every sync site, most executions first

    @property
    def slowest_sites(self) -> list[SiteStats]:
        return sorted(self.sites, key=lambda s: s.total_ms, reverse=True)


def summarize(executions: list[Execution], steps: int | None = None) -> Summary:
    causes: Counter[str] = Counter()
    fallbacks: Counter[str] = Counter()
    per_site: dict[str, list[Execution]] = defaultdict(list)
    for execution in executions:
        causes[execution.cause] += 1
        fallbacks.update(execution.fallback_ops)
        per_site[execution.site].append(execution)
    sites = [
        SiteStats(
            site=site,
            function=group[0].frame.function if group[0].frame else "?",
            causes=dict(Counter(e.cause for e in group)),
            executions=len(group),
            total_ms=sum(e.sync_ms for e in group),
        )
        for site, group in per_site.items()
    ]
    sites.sort(key=lambda s: (-s.executions, s.site))
    if steps is None:
        steps = max((e.step for e in executions), default=0)
    return Summary(
        executions=len(executions),
        steps=steps,
        graphs=len({e.graph for e in executions}),
        misses=sum(1 for e in executions if e.is_miss),
        causes=dict(causes.most_common()),
        fallbacks=dict(fallbacks.most_common()),
        sync_ms=sum(e.sync_ms for e in executions),
        trace_ms=sum(e.trace_ms for e in executions),
        sites=sites,
    )


def graph_stats(executions: list[Execution]) -> list[dict]:
    """Per distinct graph: node count, how often it ran, its first execution."""
    stats: dict[str, dict] = {}
    for execution in executions:
        entry = stats.setdefault(
            execution.graph,
            {"id": execution.graph, "nodes": execution.nodes, "executions": 0,
             "first_execution": execution.index},
        )
        entry["executions"] += 1
    return list(stats.values())


def chart_scale(step_totals: list[float]) -> float:
    """The top of a per-step time chart. The first step also holds the script's start-up
    (imports, model building), so with enough steps it does not set the scale."""
    body = step_totals[1:] if len(step_totals) >= 5 else step_totals
    return max(body, default=0.0) or max(step_totals, default=0.0) or 1.0


@dataclass(frozen=True)
class StepTime:
    step: int
    trace_ms: float  # Python tracing between graphs, over the step's executions
    sync_ms: float
    executions: int
    compiled: bool  # a cache miss happened in the step

    @property
    def total_ms(self) -> float:
        return self.trace_ms + self.sync_ms


def step_times(executions: Iterable[Execution]) -> list[StepTime]:
    """Time per step, in step order: the one computation the report, HTML, UI and
    `lazyviz diff` share."""
    totals: dict[int, list] = {}
    for e in executions:
        entry = totals.setdefault(e.step, [0.0, 0.0, 0, False])
        entry[0] += e.trace_ms
        entry[1] += e.sync_ms
        entry[2] += 1
        entry[3] = entry[3] or e.is_miss
    return [StepTime(step, *entry) for step, entry in sorted(totals.items())]
