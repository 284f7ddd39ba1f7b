"""An execution the backend failed to compile or run: the error the script got, first in
every list."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from lazyviz.analysis.failures import FailureDetails, explain
from lazyviz.analysis.findings.base import Finding, FindingKind, KindInfo, RunFacts
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.trace.model import Execution, Failure
from lazyviz.trace.table import ExecutionTable


def failure_findings(failures: Sequence[Failure], executions: Sequence[Execution],
                     ir_texts: Mapping[str, str]) -> list[Finding]:
    """The executions the backend failed to compile or run: the script got that error,
    so each is an error, first in every list."""
    table = ExecutionTable.of(executions)
    findings = []
    for failure in failures:
        position = table.position_of(failure.execution)
        if position is None:
            continue  # the trace stopped before the row (a full disk)
        kind = table.kind_at(position)
        what, fix, details = explain(failure, IRGraphs.of(ir_texts).parsed(kind.graph))
        sync = kind.detail or kind.cause
        findings.append(Finding(
            FindingKind.FAILED_EXECUTION, "error",
            f"execution {failure.execution} ({sync}, graph {kind.graph}, {kind.nodes} nodes) failed in the "
            f"backend: {what}",
            kind.frame, (failure.execution,), fix, replace(details, graph=kind.graph),
            short=f"execution {failure.execution} failed: {details.error}",
        ))
    return findings


KINDS = (KindInfo(FindingKind.FAILED_EXECUTION, "failed", "miss", FailureDetails),)


def find(facts: RunFacts) -> list[Finding]:
    return failure_findings(facts.run.failures if facts.run else (), facts.executions, facts.graphs)
