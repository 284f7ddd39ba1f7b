"""The script raised: where, and what led to it where lazyviz can tell
(analysis.failures reads the error)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from lazyviz.analysis.failures import FailureDetails, crash, headline
from lazyviz.analysis.findings.base import Finding, FindingKind, KindInfo, RunFacts
from lazyviz.analysis.findings.fallback import FALLBACK_FIXES
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.trace.model import Execution, RunInfo
from lazyviz.trace.table import ExecutionTable


def crash_findings(run: RunInfo, executions: Sequence[Execution], ir_texts: Mapping[str, str] | None = None) -> list[Finding]:
    """The script raised: where, and what led to it where lazyviz can tell (a tensor
    that is not lazy reached a lazy op: the fallback that made it). A failed execution
    already explains its own error."""
    table = ExecutionTable.of(executions)
    found = crash(run, table, IRGraphs.of(ir_texts or {}))
    if found is None or any(failure.error.strip() and headline(failure.error) in (run.error or "") for failure in run.failures):
        return []
    what, fix, details, frame = found
    # The execution it points at: the fallback's, or the graph the device could not hold.
    position = table.position_of(details.execution) if details.execution is not None else None
    positions = [position] if position is not None else []
    fallback_fix = FALLBACK_FIXES.get(details.op) if details.op else None
    fix = fix + (f"; {fallback_fix}" if fallback_fix else "")
    return [Finding(FindingKind.CRASH, "error", what, frame, table.indices(positions), fix, details,
                    short=details.error)]


KINDS = (KindInfo(FindingKind.CRASH, "raised", "miss", FailureDetails),)


def find(facts: RunFacts) -> list[Finding]:
    return crash_findings(facts.run, facts.executions, facts.graphs) if facts.run else []
