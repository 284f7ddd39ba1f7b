"""`lazyviz diff A B`: two runs of the same program side by side."""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lazyviz.analysis.budget import site_key, steady_steps
from lazyviz.analysis.collectives import Row
from lazyviz.analysis.graphs import diff_across
from lazyviz.analysis.persistent import PersistentCache, persistent_cache
from lazyviz.analysis.recompiles import WARMUP_STEPS
from lazyviz.analysis.summary import step_times
from lazyviz.analysis.units import size_text
from lazyviz.trace.model import Execution, RunInfo


@dataclass(frozen=True)
class RunStats:
    executions_per_step: float
    misses: int
    step_ms: float  # median over steps after warm-up: python tracing + sync


@dataclass(frozen=True)
class ChangedGraph:
    site: str
    old: str
    new: str
    headline: str


@dataclass(frozen=True)
class RunDiff:
    a: RunStats
    b: RunStats
    only_a: list[tuple[str, str]]  # (site, graph)
    only_b: list[tuple[str, str]]
    changed: list[ChangedGraph]
    # SPMD: each run's collectives (PyTorch/XLA), alike ones added up; empty elsewhere.
    collectives_a: Sequence[Row] = ()
    collectives_b: Sequence[Row] = ()
    # XLA's persistent compile cache: how each run had its new graphs, and why B compiled
    # each graph it compiled (site, graph, why); None and () without the cache.
    persistent_a: PersistentCache | None = None
    persistent_b: PersistentCache | None = None
    b_compiled: Sequence[tuple[str, str, str]] = ()

    @property
    def same_graphs(self) -> bool:
        return not (self.only_a or self.only_b)


def run_stats(run: RunInfo, executions: list[Execution]) -> RunStats:
    steps = steady_steps(executions, run, WARMUP_STEPS)
    per_step = [len(g) for g in steps.values()]
    times = [step.total_ms for group in steps.values() for step in step_times(group)]
    return RunStats(
        executions_per_step=statistics.median(per_step) if per_step else 0.0,
        misses=sum(1 for e in executions if e.is_miss),
        step_ms=statistics.median(times) if times else 0.0,
    )


def _graphs_by_site(run: RunInfo, executions: list[Execution]) -> dict[str, list[str]]:
    sites: dict[str, list[str]] = {}
    for e in executions:
        graphs = sites.setdefault(site_key(e, run.cwd), [])
        if e.graph not in graphs:
            graphs.append(e.graph)
    return sites


def compare_runs(run_a: RunInfo, executions_a: list[Execution], ir_a: Mapping[str, str],
                 run_b: RunInfo, executions_b: list[Execution], ir_b: Mapping[str, str],
                 collectives_a: Sequence[Row] = (), collectives_b: Sequence[Row] = ()) -> RunDiff:
    sites_a, sites_b = _graphs_by_site(run_a, executions_a), _graphs_by_site(run_b, executions_b)
    all_a = {g for graphs in sites_a.values() for g in graphs}
    all_b = {g for graphs in sites_b.values() for g in graphs}
    only_a = [(site, g) for site, graphs in sites_a.items() for g in graphs if g not in all_b]
    only_b = [(site, g) for site, graphs in sites_b.items() for g in graphs if g not in all_a]
    changed = []
    for site, graph in only_b:
        candidates = [g for g in sites_a.get(site, []) if g not in all_b]
        for old in candidates[-1:]:
            diff = diff_across(ir_a, old, ir_b, graph)
            first = diff.first if diff else None
            changed.append(ChangedGraph(site, old, graph, first.describe() if first else "no IR to compare"))
    cached_b = persistent_cache(executions_b)
    return RunDiff(run_stats(run_a, executions_a), run_stats(run_b, executions_b), only_a, only_b, changed,
                   collectives_a, collectives_b, persistent_cache(executions_a), cached_b,
                   _why_compiled(run_b, executions_b, all_a, changed) if cached_b else ())


def _why_compiled(run_b: RunInfo, executions_b: list[Execution], graphs_a: set[str],
                  changed: list[ChangedGraph]) -> list[tuple[str, str, str]]:
    """Each graph B compiled though it read a persistent cache: (site, graph, why)."""
    headline = {(change.site, change.new): f"{change.headline} (A's graph {change.old} there)" for change in changed}
    why = []
    for execution in executions_b:
        state = execution.persistent
        if state not in ("not_cached", "load_failed"):
            continue
        site = site_key(execution, run_b.cwd)
        if state == "load_failed":
            reason = "in the cache, but XLA could not load it, so compiled again (PersistentCacheDeserializeFailure)"
        elif execution.graph in graphs_a:
            reason = "not in the cache B read, though A ran it (A wrote to another cache, or none)"
        else:
            reason = "not in the cache: A never ran it; " + headline.get(
                (site, execution.graph), "no graph of A's at this line to compare with")
        why.append((site, execution.graph, reason))
    return why


def run_diff_text(diff: RunDiff, name_a: str, name_b: str) -> str:
    def ratio(a: float, b: float) -> str:
        return f"{b / a:.2f}x" if a else ("-" if not b else "new")

    rows = [("executions per step (median)", diff.a.executions_per_step, diff.b.executions_per_step),
            ("cache misses", diff.a.misses, diff.b.misses),
            ("step time ms (median)", diff.a.step_ms, diff.b.step_ms)]
    lines = [f"lazyviz diff: A = {name_a}", f"              B = {name_b}",
             f"  {'':<30}{'A':>12}{'B':>12}{'B/A':>8}"]
    for name, a, b in rows:
        lines.append(f"  {name:<30}{a:>12.2f}{b:>12.2f}{ratio(a, b):>8}")
    if diff.same_graphs:
        lines.append("  graphs: the same set in both runs")
    for site, graph in diff.only_a:
        lines.append(f"  only in A: graph {graph} at {site}")
    for site, graph in diff.only_b:
        lines.append(f"  only in B: graph {graph} at {site}")
    for change in diff.changed:
        lines.append(f"  changed at {change.site}: {change.old} -> {change.new}: {change.headline}")
    if diff.persistent_a or diff.persistent_b:
        for name, cached in (("A", diff.persistent_a), ("B", diff.persistent_b)):
            lines.append(f"  persistent compile cache, {name}: {cached.text() if cached else 'not used'}")
        for site, graph, why in diff.b_compiled:
            lines.append(f"  B compiled graph {graph} at {site}: {why}")
    return "\n".join(lines + _collective_lines(diff.collectives_a, diff.collectives_b)) + "\n"


def _collective_lines(a: Sequence[Row], b: Sequence[Row]) -> list[str]:
    """The collectives gone and come between two runs: the proof that a changed sharding
    annotation did what was meant."""
    if not a and not b:
        return []
    sent_a, sent_b = (sum(row.sent_per_step for row in rows) for rows in (a, b))
    lines = [f"  collectives, bytes each device sends per step: A {size_text(sent_a)}, B {size_text(sent_b)}"]
    named_a, named_b = ({row.describe(): row for row in rows} for rows in (a, b))
    for name, row in named_a.items():
        if name not in named_b:
            lines.append(f"  only in A: {name}, {size_text(row.sent_per_step)} per step"
                         + ("" if row.expected else " (not asked for by the layout)"))
    for name, row in named_b.items():
        if name not in named_a:
            lines.append(f"  only in B: {name}, {size_text(row.sent_per_step)} per step"
                         + ("" if row.expected else " (not asked for by the layout)"))
    if named_a.keys() == named_b.keys():
        lines.append("  collectives: the same in both runs")
    return lines
