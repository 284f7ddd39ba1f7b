"""`lazyviz check`: does a run keep its budget, or its baseline? Pure functions: trace
data in, breaches (one line each) out."""
from __future__ import annotations

import itertools
import os
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lazyviz.analysis.collectives import Moved, run_collectives
from lazyviz.analysis.findings.collective import collective_findings
from lazyviz.analysis.findings.crash import crash_findings
from lazyviz.analysis.findings.failed_execution import failure_findings
from lazyviz.analysis.findings.missing_mark_step import missing_mark_step_findings
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.library import Stacks, no_stacks
from lazyviz.analysis.memory import over_budget
from lazyviz.analysis.recompiles import PendingRecompile, Recompile
from lazyviz.trace.model import Execution, RunInfo
from lazyviz.trace.table import ExecutionTable, Kind

BASELINE_FORMAT = "lazyviz-baseline"
BASELINE_VERSION = 1


@dataclass(frozen=True)
class Budget:
    warmup_steps: int = 2
    max_misses_after: int | None = 0
    max_executions_per_step: int | None = 1
    allowed_fallbacks: frozenset[str] | None = frozenset()  # None: any op may fall back
    allow_unfinished: bool = False  # check what a killed or cut-short trace holds
    # Of the executions after warm-up, the share that may be cache misses; what catches a
    # run without steps, where no execution is "after warm-up" by step.
    max_miss_rate: float | None = 0.5
    # SPMD: bytes each device may send for collectives in a step after warm-up (None: any),
    # and whether collectives the layout did not ask for fail the check.
    max_collective_bytes_per_step: int | None = None
    unasked_collectives: bool = True
    max_peak_rss_kb: int | None = None  # the process's peak resident memory allowed (None: any)


MIN_EXECUTIONS_FOR_RATE = 8  # fewer after warm-up: too few to speak of a rate


def executions_after_warmup(table: ExecutionTable, warmup_steps: int) -> list[int]:
    """The positions after warm-up: by step, or in a run without steps, every site's
    executions after its first warmup_steps (each site may compile while it warms up)."""
    if any(table.step):
        return [p for p in range(len(table)) if table.step[p] >= warmup_steps]
    seen: Counter[str] = Counter()
    after = []
    for position in range(len(table)):
        site = table.kind_at(position).site
        seen[site] += 1
        if seen[site] > warmup_steps:
            after.append(position)
    return after


def site_key(execution: Execution | Kind, cwd: str) -> str:
    """A site as a baseline names it: relative to the run's directory, with its cause."""
    if execution.frame is None:
        return f"? {execution.cause}"
    file = execution.frame.file
    if cwd and file.startswith(cwd.rstrip(os.sep) + os.sep):
        file = os.path.relpath(file, cwd)
    return f"{file}:{execution.frame.line} {execution.cause}"


def steady_steps(executions: Sequence[Execution], run: RunInfo, warmup_steps: int) -> dict[int, list[Execution]]:
    """Executions per step after warm-up, for the steps that completed (a final partial
    step of a run that ended without mark_step is left out)."""
    steps: dict[int, list[Execution]] = defaultdict(list)
    last = run.steps if run.steps is not None else max((e.step for e in executions), default=0)
    for execution in executions:
        if warmup_steps <= execution.step < last:
            steps[execution.step].append(execution)
    return steps


def _steady_positions(table: ExecutionTable, run: RunInfo, warmup_steps: int) -> list[int]:
    """The positions of the executions in steady_steps, ordered by step."""
    last = run.steps if run.steps is not None else max(table.step, default=0)
    step = table.step
    return sorted((p for p in range(len(table)) if warmup_steps <= step[p] < last), key=step.__getitem__)


def check_budget(run: RunInfo, executions: Sequence[Execution], recompiles: list[Recompile | PendingRecompile], budget: Budget,
                 ir_texts: Mapping[str, str] | None = None, stacks: Stacks = no_stacks) -> list[str]:
    breaches = []
    if not run.complete and not budget.allow_unfinished:
        breaches.append(f"the trace is unfinished: {run.state}; --allow-unfinished checks what it holds")
    # A graph the backend could not run, or a script that raised, fails any budget.
    for finding in failure_findings(run.failures, executions, ir_texts or {}):
        where = f" at {finding.frame.site}" if finding.frame else ""
        breaches.append(f"failed execution{where}: {finding.message}")
    ended = "the script raised" if run.error else "the script died"  # killed for memory: no exception
    breaches += [f"{ended}: {finding.message}" for finding in crash_findings(run, executions, ir_texts or {})]
    # The report's missing-mark_step warnings (both forms) fail the check too: the two must agree.
    for finding in missing_mark_step_findings(executions, ir_texts or {}, run.names,
                                              optimizer_marks=() if run.steps else run.optimizer_marks, stacks=stacks):
        where = f" at {finding.frame.site}" if finding.frame else ""
        breaches.append(f"missing mark_step(){where}: {finding.message}")
    if budget.max_peak_rss_kb is not None:
        memory = over_budget(run.peak_rss, budget.max_peak_rss_kb, bool(run.steps))
        if memory is not None:
            breaches.append(memory)
    table = ExecutionTable.of(executions)
    if budget.max_miss_rate is not None:
        after = executions_after_warmup(table, budget.warmup_steps)
        missed = sum(table.kind_at(p).is_miss for p in after)
        if len(after) >= MIN_EXECUTIONS_FOR_RATE and missed > budget.max_miss_rate * len(after):
            breaches.append(f"cache miss rate after warm-up: {missed} of {len(after)} executions "
                            f"({missed / len(after):.0%}, budget {budget.max_miss_rate:.0%}): "
                            "most syncs compile a graph never seen before")
    late = [r for r in recompiles if r.step >= budget.warmup_steps]
    misses = table.where(lambda kind: kind.is_miss)
    late_misses = [p for p in misses if table.step[p] >= budget.warmup_steps]
    if budget.max_misses_after is not None and len(late_misses) > budget.max_misses_after:
        first = late[0] if late else None
        first_miss = table[late_misses[0]]
        where = f" at {first_miss.site}" if first_miss.frame else ""
        why = f": {first.headline()}" if first else ""
        breaches.append(f"cache misses after warm-up: {len(late_misses)} (budget {budget.max_misses_after}); "
                        f"first in step {first_miss.step}{where}{why}")
    if budget.max_executions_per_step is not None:
        last = run.steps if run.steps is not None else max(table.step, default=0)
        steady = range(budget.warmup_steps, last)
        # A sync in few steps (a log line every N steps, as the extra-sync fix advises) is
        # not a per-step cost: only sites that sync in at least half the steps count.
        sites_steps: dict[tuple, set[int]] = {}
        for step, number in zip(table.step, table.kind):
            kind = table.kinds[number]
            if step in steady and kind.cause not in ("mark_step", "bound"):
                sites_steps.setdefault((kind.detail or kind.cause, kind.site), set()).add(step)
        rare = {site for site, steps in sites_steps.items() if len(steps) < max(2, len(steady) / 2)}
        per_step = Counter(step for step, number in zip(table.step, table.kind) if step in steady and
                           (table.kinds[number].detail or table.kinds[number].cause,
                            table.kinds[number].site) not in rare)
        over = {step for step, count in per_step.items() if count > budget.max_executions_per_step}
        if over:
            worst = max(per_step[step] for step in over)
            extra: Counter[tuple[str, str]] = Counter()
            for step, number in zip(table.step, table.kind):
                if step in over:
                    kind = table.kinds[number]
                    if kind.cause not in ("mark_step", "bound") and (kind.detail or kind.cause, kind.site) not in rare:
                        extra[(kind.detail or kind.cause, kind.site)] += 1
            culprits = ", ".join(f"{what} at {site} x{n}" for (what, site), n in extra.most_common(3))
            breaches.append(f"executions per step: up to {worst} in {len(over)} steps "
                            f"(budget {budget.max_executions_per_step}); {culprits or 'mark_step only'}")
    if isinstance(ir_texts, IRGraphs) and ir_texts.has_hlo:
        breaches += _collective_breaches(run, table, ir_texts, budget)
    if budget.allowed_fallbacks is not None:
        calls: Counter[str] = Counter()
        sites: dict[str, str] = {}
        for number in table.in_order:
            kind = table.kinds[number]
            for op, count in kind.fallback_ops.items():
                calls[op] += count * len(table.positions[number])
            if kind.cause == "fallback" and kind.detail:
                sites.setdefault(kind.detail, kind.site)
        for op, count in calls.most_common():
            if op not in budget.allowed_fallbacks:
                where = f" at {sites[op]}" if op in sites else ""
                breaches.append(f"fallback: {op} x{count}{where} (allow it with --allow-fallback {op})")
    return breaches


def _collective_breaches(run: RunInfo, table: ExecutionTable, graphs: IRGraphs, budget: Budget) -> list[str]:
    breaches = []
    if budget.unasked_collectives:
        for finding in collective_findings(table, graphs, run.annotations, run.steps or 0):
            where = f" at {finding.frame.site}" if finding.frame else ""
            breaches.append(f"{finding.short}{where}; fix: {finding.fix}")
    if budget.max_collective_bytes_per_step is not None:
        moved = run_collectives(table, graphs.hlo, run.annotations)
        sent: Counter[int] = Counter()
        for m in moved:
            for position in m.positions:
                sent[table.step[position]] += m.collective.sent
        steady = {step: n for step, n in sent.items() if step >= budget.warmup_steps} or sent
        worst = max(steady, key=steady.__getitem__, default=None)
        if worst is not None and steady[worst] > budget.max_collective_bytes_per_step:
            what = ", ".join(list(dict.fromkeys(_named(m) for m in sorted(moved, key=lambda m: -m.collective.sent)))[:3])
            breaches.append(f"collective bytes per step: each device sends {steady[worst]:,} in step {worst} "
                            f"(budget {budget.max_collective_bytes_per_step:,}); the largest: {what}")
    return breaches


def collective_keys(moved: Sequence[Moved]) -> list[str]:
    """Each distinct collective as a baseline names it: "all-reduce f32[64,64] over model at mlp.py:37"."""
    return sorted({_named(m) for m in moved})


def _named(m: Moved) -> str:
    c = m.collective
    return (f"{c.kind} {c.shape}" + (f" over {'+'.join(m.axes)}" if m.axes else "")
            + (f" at {c.location}" if c.location else " in the backward pass"))


def baseline_of(run: RunInfo, executions: Sequence[Execution], warmup_steps: int,
                collectives: Sequence[Moved] = ()) -> dict:
    """The run's graph set, per site: a small, stable, diff-friendly record to commit."""
    table = ExecutionTable.of(executions)
    sites: dict[str, dict] = {}
    keys = [site_key(kind, run.cwd) for kind in table.kinds]
    for number in table.in_order:
        kind = table.kinds[number]
        entry = sites.setdefault(keys[number], {"graphs": {}, "executions_per_step": 0})
        entry["graphs"][kind.graph] = kind.nodes
    per_step = []
    step, kind_of = table.step, table.kind
    for _, group in itertools.groupby(_steady_positions(table, run, warmup_steps), key=step.__getitem__):
        per_site = Counter(keys[kind_of[p]] for p in group)
        per_step.append(sum(per_site.values()))
        for site, count in per_site.items():
            sites[site]["executions_per_step"] = max(sites[site]["executions_per_step"], count)
    fallbacks: set[str] = set()
    for kind in table.kinds:
        fallbacks.update(kind.fallback_ops)
    return {
        "format": BASELINE_FORMAT,
        "version": BASELINE_VERSION,
        "warmup_steps": warmup_steps,
        "executions_per_step": max(per_step, default=0),
        "fallbacks": sorted(fallbacks),
        **({"collectives": collective_keys(collectives)} if collectives else {}),
        "sites": {site: {"graphs": dict(sorted(entry["graphs"].items())),
                         "executions_per_step": entry["executions_per_step"]}
                  for site, entry in sorted(sites.items())},
    }


def check_baseline(run: RunInfo, executions: Sequence[Execution], baseline: dict,
                   collectives: Sequence[Moved] = ()) -> list[str]:
    current = baseline_of(run, executions, baseline.get("warmup_steps", 2), collectives)
    breaches = []
    old_sites: dict = baseline.get("sites", {})
    for site, entry in current["sites"].items():
        before = old_sites.get(site)
        if before is None:
            breaches.append(f"new sync site {site}: {len(entry['graphs'])} graphs, not in the baseline")
            continue
        new_graphs = [g for g in entry["graphs"] if g not in before.get("graphs", {})]
        if new_graphs:
            sizes = ", ".join(f"{g} ({entry['graphs'][g]} nodes)" for g in new_graphs[:3])
            breaches.append(f"{site}: compiles {len(new_graphs)} graph(s) the baseline does not have: {sizes}")
        if entry["executions_per_step"] > before.get("executions_per_step", 0):
            breaches.append(f"{site}: {entry['executions_per_step']} executions per step "
                            f"(baseline {before.get('executions_per_step', 0)})")
    if current["executions_per_step"] > baseline.get("executions_per_step", 0):
        breaches.append(f"executions per step: {current['executions_per_step']} "
                        f"(baseline {baseline.get('executions_per_step', 0)})")
    new_fallbacks = sorted(set(current["fallbacks"]) - set(baseline.get("fallbacks", [])))
    if new_fallbacks:
        breaches.append(f"new fallbacks: {', '.join(new_fallbacks)}")
    new_collectives = sorted(set(current.get("collectives", [])) - set(baseline.get("collectives", [])))
    breaches += [f"new collective: {key}, not in the baseline" for key in new_collectives]
    return breaches


def baseline_problem(baseline: object) -> str | None:
    """What is wrong with a baseline read from JSON, in one phrase; None when it is sound."""
    if not isinstance(baseline, dict) or baseline.get("format") != BASELINE_FORMAT:
        return "no lazyviz-baseline format field"
    for key in ("version", "warmup_steps", "executions_per_step"):
        if type(baseline.get(key, 0)) is not int or baseline.get(key, 0) < 0:
            return f"{key} is not a count"
    fallbacks = baseline.get("fallbacks", [])
    if not isinstance(fallbacks, list) or not all(isinstance(op, str) for op in fallbacks):
        return "fallbacks is not a list of op names"
    collectives = baseline.get("collectives", [])
    if not isinstance(collectives, list) or not all(isinstance(key, str) for key in collectives):
        return "collectives is not a list of collectives"
    sites = baseline.get("sites", {})
    if not isinstance(sites, dict):
        return "sites is not a table"
    for site, entry in sites.items():
        if not isinstance(entry, dict):
            return f"site {site!r} is not a table"
        graphs = entry.get("graphs", {})
        if not isinstance(graphs, dict):
            return f"site {site!r}: graphs is not a table"
        if type(entry.get("executions_per_step", 0)) is not int:
            return f"site {site!r}: executions_per_step is not a count"
    return None
