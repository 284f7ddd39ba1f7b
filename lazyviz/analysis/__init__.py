"""Pure functions from trace data to findings: no torch, no Textual, no file access."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lazyviz.analysis.findings import Finding, find_all
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.library import Stacks, no_stacks
from lazyviz.analysis.recompiles import PendingRecompile, Recompile, explain_recompiles
from lazyviz.analysis.summary import Summary, summarize
from lazyviz.trace.model import Execution, RunInfo
from lazyviz.trace.table import ExecutionTable


@dataclass(frozen=True)
class Analysis:
    summary: Summary
    recompiles: list[Recompile | PendingRecompile]
    findings: list[Finding]
    complete: bool = True  # False: a quick pass, without what needs every graph's IR


def analyze(run: RunInfo, executions: Sequence[Execution], ir_texts: Mapping[str, str],
            quick: bool = False, stacks: Stacks = no_stacks) -> Analysis:
    """Everything the report and the UI show about a run. ir_texts: graph id -> IR text.
    quick: only what needs no graph's IR parsed in full (failures, extra syncs,
    fallbacks, growing graphs), for a UI to show while the whole analysis runs: on a
    word language model's 68 MB of IR that is 0.1 s of 4. stacks: each execution's
    Python stack by its id (Trace.stack), for where in a library a sync happened."""
    executions = ExecutionTable.of(executions)  # once, for every pass below
    ir_texts = IRGraphs.of(ir_texts)  # each graph parsed once, for every pass below
    summary = summarize(executions, run.steps, after_last_execution=run.counters_after_last_execution,
                        fallbacks_after=run.fallbacks_after_last_execution)
    marks = () if run.steps else run.optimizer_marks  # a run without steps: its loop counted by the optimizer
    recompiles = [] if quick else explain_recompiles(executions, ir_texts, optimizer_marks=marks,
                                                     optimizer_steps=run.optimizer_steps)
    findings = find_all(executions, summary.steps, recompiles, ir_texts, run.names, run, quick=quick, stacks=stacks)
    return Analysis(summary, recompiles, findings, complete=not quick)
