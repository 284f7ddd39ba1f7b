"""Whole tensors copied to the host one at a time, back to back at one line, among the
run's costliest sites: one copy of them all does it in one execution."""
from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lazyviz.analysis.findings._shared import growing_sites, runs_of
from lazyviz.analysis.findings.base import Details, Finding, FindingKind, KindInfo, RunFacts
from lazyviz.trace.model import TS_NAMES, Execution
from lazyviz.trace.table import ExecutionTable

# Copies of whole tensors (torch.save's, a state moved by hand): a loop's `.item()` each
# iteration reads one value at one line again and again, which is not this.
_HOST_READS = frozenset({"cpu", "to"})
MIN_READS_IN_A_ROW = 4  # reads of one line, back to back, that make "one at a time"
COSTLIEST_SITES = 3  # only among the run's costliest sites: a few cheap reads are nobody's problem
# A loop's read of each iteration's result: one graph nearly every time, built between the
# reads (Python time). A state's tensors are other tensors, already pending: no build between.
LOOP_SAME_GRAPH = 0.9
LOOP_BUILD_MS = 1.0


@dataclass(frozen=True, kw_only=True)
class OneByOneReadsDetails(Details):
    cause: str  # the read: cpu, to
    count: int  # reads at the line
    in_a_row: int  # the longest run of them with nothing between
    graphs: int  # distinct graphs they ran

    @property
    def subject(self) -> str:
        return self.cause


def one_by_one_read_findings(executions: Sequence[Execution], names: Mapping[str, str] = TS_NAMES) -> list[Finding]:
    """One line reads many tensors to the host one at a time, each read its own graph (on
    PyTorch/XLA `torch.save(model.state_dict(), path)` ran 41 graphs, 58% of a run's sync
    time, at one line): among the run's costliest sync sites, a run of reads at one line
    with nothing else between. Moved together after one sync they copy without a graph each."""
    table = ExecutionTable.of(executions)
    by_site = table.group_by(lambda kind: kind.site if kind.cause in _HOST_READS and kind.frame else None)
    costs = table.group_by(lambda kind: kind.site if kind.frame else None)
    costliest = sorted(costs, key=lambda site: -table.sum(table.sync_ms, costs[site]))[:COSTLIEST_SITES]
    growing = growing_sites(table)  # a loop's read at each iteration, its graph growing: not one by one
    findings = []
    for site in costliest:
        if site in growing:
            continue
        positions = by_site.get(site, [])
        runs = runs_of(positions)
        longest = max((len(run) for run in runs), default=0)
        if longest < MIN_READS_IN_A_ROW or _a_loops_reads(table, max(runs, key=len)):
            continue
        first = table.kind_at(positions[0])
        graphs = len({table.kind_at(p).graph for p in positions})
        ms = table.sum(table.sync_ms, positions)
        findings.append(Finding(
            FindingKind.ONE_BY_ONE_READS, "warning",
            f"{len(positions)} reads to the host at this line ({first.detail or first.cause}), up to {longest} in a "
            f"row with nothing between, each an execution of its own ({graphs} graph{'s' * (graphs != 1)}, "
            f"{ms:,.0f} ms): a state or a list of tensors moved one tensor at a time (torch.save of a state_dict "
            "does this)",
            first.frame, table.indices(positions),
            f"call {names['mark_step']} first, then move them: after the sync they are device data and copy "
            "without a graph each (for torch.save: save the state moved to the CPU)",
            OneByOneReadsDetails(cause=first.cause, count=len(positions), in_a_row=longest, graphs=graphs),
            short=f"{len(positions)} reads to the host one at a time ({graphs} graphs, {ms:,.0f} ms)",
        ))
    return findings


def _a_loops_reads(table: ExecutionTable, run: Sequence[int]) -> bool:
    """Reads in a row that are a loop's, one per iteration (adder's evaluation: each batch's
    `(pred == gt).cpu()`, 95 in a row): the same graph nearly every time, each built in the
    Python time before its read. A mark_step() first would change nothing there."""
    same = Counter(table.kind_at(p).graph for p in run).most_common(1)[0][1]
    built = statistics.median(table.trace_ms[p] for p in run[1:])
    return same >= LOOP_SAME_GRAPH * len(run) and built >= LOOP_BUILD_MS


KINDS = (KindInfo(FindingKind.ONE_BY_ONE_READS, "host reads", "sync", OneByOneReadsDetails),)


def find(facts: RunFacts) -> list[Finding]:
    return one_by_one_read_findings(facts.executions, facts.names)
