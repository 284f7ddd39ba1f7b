"""Findings: what a user should fix, with where and how. Pure functions of trace data.

One module per kind (or a pair a finder tells apart, as recompile's): each declares its
KINDS (name, label, colour role) and one `find(facts)`; FINDERS lists them, and the
report's labels and the UI's colours are read from KINDS. A new kind of finding is a
new module and a line in FINDERS."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from lazyviz.analysis.failures import FailureDetails
from lazyviz.analysis.findings import (
    collective,
    crash,
    extra_sync,
    failed_execution,
    fallback,
    host_call,
    missing_mark_step,
    one_by_one_reads,
    recompile,
)
from lazyviz.analysis.findings.base import SEVERITIES, Details, Finding, FindingKind, KindInfo, RunFacts
from lazyviz.analysis.findings.collective import CollectiveDetails
from lazyviz.analysis.findings.extra_sync import ExtraSyncDetails
from lazyviz.analysis.findings.fallback import FallbackDetails
from lazyviz.analysis.findings.host_call import HostCallDetails
from lazyviz.analysis.findings.missing_mark_step import (
    GrowingGraph,
    MissingMarkStepDetails,
    RepeatedBlock,
    StepsWithoutSync,
)
from lazyviz.analysis.findings.one_by_one_reads import OneByOneReadsDetails
from lazyviz.analysis.findings.recompile import RecompileDetails, ShapeStep
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.library import Stacks, no_stacks
from lazyviz.analysis.recompiles import PendingRecompile, Recompile
from lazyviz.trace.model import TS_NAMES, Execution, RunInfo
from lazyviz.trace.table import ExecutionTable

__all__ = ["FINDERS", "KINDS", "KIND_LABELS", "ROOT_KINDS", "SEVERITIES", "CollectiveDetails", "Details",
           "ExtraSyncDetails", "FailureDetails", "FallbackDetails", "Finding", "FindingKind", "GrowingGraph",
           "HostCallDetails", "KindInfo", "MissingMarkStepDetails", "OneByOneReadsDetails", "RecompileDetails",
           "RepeatedBlock", "RunFacts", "ShapeStep", "StepsWithoutSync", "find_all"]

# The finders, in the order their findings list at equal rank (host calls last: they take
# in what the others found inside them).
FINDERS = (failed_execution, crash, recompile, extra_sync, fallback, one_by_one_reads, missing_mark_step, collective,
           host_call)
KINDS: dict[str, KindInfo] = {info.kind: info for finder in FINDERS for info in finder.KINDS}
KIND_LABELS: dict[str, str] = {kind: info.label for kind, info in KINDS.items()}


def find_all(
    executions: Sequence[Execution], steps: int, recompiles: list[Recompile | PendingRecompile],
    ir_texts: Mapping[str, str], names: Mapping[str, str] = TS_NAMES, run: RunInfo | None = None,
    quick: bool = False, stacks: Stacks = no_stacks,
) -> list[Finding]:
    """Every finding, root causes first: by severity, then a missing mark_step() before
    the rest (it multiplies what every other sync costs), then by the time it cost."""
    table = ExecutionTable.of(executions)
    facts = RunFacts(table, steps, recompiles, IRGraphs.of(ir_texts), names, run, quick, stacks)
    findings = [replace(finding, cost_ms=table.sum_at(table.sync_ms, finding.executions))
                for finder in FINDERS for finding in finder.find(facts)]
    findings = _absorbed(findings)
    findings = _blame_uncut_graph(_crash_speaks_for_its_op(findings), table, steps, names)
    root = _roots(findings)
    return sorted(findings, key=lambda f: (SEVERITIES.index(f.severity), id(f) not in root, -f.cost_ms))


def _roots(findings: list[Finding]) -> set[int]:
    """The missing mark_step() findings to fix first: those that other findings' syncs pay
    for (blamed on the uncut graph), or that cost as much as any other finding. A small
    graph left uncut (63 nodes) is not ranked above fallbacks that cost most of the run."""
    blamed = any(f.uncut_syncs for f in findings)
    costliest = max((f.cost_ms for f in findings if f.kind not in ROOT_KINDS), default=0.0)
    return {id(f) for f in findings if f.kind in ROOT_KINDS and (blamed or f.cost_ms >= costliest)}



def _crash_speaks_for_its_op(findings: list[Finding]) -> list[Finding]:
    """The fallback a crash names (split's pieces left on the CPU) is that crash's cause:
    one finding says it, with the op's line, not a second one about the same op."""
    named = {f.details.op for f in findings if isinstance(f.details, FailureDetails) and f.kind == FindingKind.CRASH}
    return [f for f in findings if not (isinstance(f.details, FallbackDetails) and f.details.op in named)]


# Findings whose fix changes what every other finding measures: fixed first.
ROOT_KINDS = frozenset({FindingKind.MISSING_MARK_STEP})
MIN_INFLATED_MS = 5.0  # syncs quicker than this are not worth blaming on an uncut graph


def _blame_uncut_graph(findings: list[Finding], table: ExecutionTable, steps: int,
                       names: Mapping[str, str] = TS_NAMES) -> list[Finding]:
    """A sync that runs a graph a missing mark_step() left uncut pays for all the work
    pending since the loop began: findings that point at such syncs say so, with what
    each cost, so the user fixes the root first. In a run without any step every sync
    is such a sync (word_language_model's clip_grad_norm_ fallbacks, 440 ms each)."""
    uncut = {e for f in findings if f.kind in ROOT_KINDS for e in f.executions}
    if not uncut:
        return findings
    if not steps:  # every sync while the uncut loop ran holds its work, not those before or after it
        first, last = min(uncut), max(uncut)
        uncut = {e for e in table.indices(range(len(table))) if first <= e <= last}
    cut = names["mark_step"].removeprefix("torch._lazy.")  # mark_step(), or torch_xla.sync() on XLA
    blamed = []
    for finding in findings:
        inflated = [e for e in finding.executions if e in uncut]
        each = table.sum_at(table.sync_ms, inflated) / len(inflated) if inflated else 0.0
        if finding.kind in ROOT_KINDS or each < MIN_INFLATED_MS:
            blamed.append(finding)
            continue
        note = (f"; {each:.0f} ms per sync because the graph is not cut: "
                f"fix the missing {cut} finding first")
        blamed.append(replace(finding, message=finding.message + note, uncut_syncs=len(inflated)))
    return blamed


def _absorbed(findings: list[Finding]) -> list[Finding]:
    """Findings of a kind that absorbs others (KindInfo.absorbs) take in theirs whose
    executions are all theirs together (one copy fallback counted over two save_image()
    calls is both calls' work), and each says which kinds it took."""
    absorbers = [(finding, KINDS[finding.kind].absorbs) for finding in findings
                 if finding.kind in KINDS and KINDS[finding.kind].absorbs]
    taken: dict[int, Finding] = {}  # id() of the finding taken in: it
    for other in findings:
        covered = set().union(*(f.executions for f, kinds in absorbers if other.kind in kinds))
        if other.executions and set(other.executions) <= covered:
            taken[id(other)] = other
    result = []
    for finding in findings:
        if id(finding) in taken:
            continue
        absorbs = KINDS[finding.kind].absorbs if finding.kind in KINDS else frozenset()
        if absorbs:
            own = set(finding.executions)
            kinds = sorted({t.kind for t in taken.values() if t.kind in absorbs and own & set(t.executions)})
            finding = replace(finding, details=replace(finding.details, absorbed=tuple(kinds)))  # HostCallDetails
        result.append(finding)
    return result

