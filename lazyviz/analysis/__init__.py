"""Pure functions from trace data to findings: no torch, no Textual, no file access."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lazyviz.analysis.findings import Finding, find_all
from lazyviz.analysis.recompiles import PendingRecompile, Recompile, explain_recompiles
from lazyviz.analysis.summary import Summary, summarize
from lazyviz.trace.model import Execution, RunInfo
from lazyviz.trace.table import ExecutionTable


@dataclass(frozen=True)
class Analysis:
    summary: Summary
    recompiles: list[Recompile | PendingRecompile]
    findings: list[Finding]


def analyze(run: RunInfo, executions: Sequence[Execution], ir_texts: Mapping[str, str]) -> Analysis:
    """Everything the report and the UI show about a run. ir_texts: graph id -> IR text."""
    executions = ExecutionTable.of(executions)  # once, for every pass below
    summary = summarize(executions, run.steps)
    recompiles = explain_recompiles(executions, ir_texts)
    return Analysis(summary, recompiles, find_all(executions, summary.steps, recompiles, ir_texts, run.names, run))
