"""One recorded run as everything downstream reads it: the trace's parts, each read once
and only when asked, and their analysis, computed once. Every renderer, the notebook
summary, the API and the UI's watcher take a Run (pyinstrument's Session plays this part
there)."""
from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cached_property, lru_cache
from pathlib import Path

from lazyviz.analysis import Analysis, analyze
from lazyviz.analysis.collectives import Moved, run_collectives
from lazyviz.analysis.findings import Finding
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.library import Stacks, no_stacks
from lazyviz.analysis.recompiles import PendingRecompile, Recompile
from lazyviz.analysis.summary import Summary
from lazyviz.trace.model import Execution, Frame, Graph, RunInfo
from lazyviz.trace.reader import Trace, TraceError
from lazyviz.trace.table import ExecutionTable


class Run:
    """Made from an open trace (`Run(trace)`, parts read on first use) or from parts
    already in memory (`Run.of(info, executions, ir_texts)`: a live view's rows so far)."""

    def __init__(self, trace: Trace | None = None) -> None:
        self.trace = trace
        self.path: Path | None = trace.path if trace is not None else None

    @classmethod
    def of(cls, info: RunInfo, executions: Sequence[Execution], ir_texts: Mapping[str, str],
           path: Path | None = None, stacks: Stacks = no_stacks) -> Run:
        """ir_texts: best an IRGraphs kept across the live view's updates (what it parsed
        stays parsed). stacks: each execution's Python stack by its id (stacks_of(trace))."""
        run = cls()
        run.path = path
        run.__dict__["stacks"] = stacks
        # cached_property reads the instance's __dict__ first: these are the parts.
        run.__dict__.update(info=info, executions=ExecutionTable.of(executions), ir_texts=IRGraphs.of(ir_texts))
        return run

    def _trace(self) -> Trace:
        if self.trace is None:
            raise ValueError("this run was made from parts: it has no trace to read more from")
        return self.trace

    @cached_property
    def info(self) -> RunInfo:
        return self._trace().run

    @cached_property
    def stacks(self) -> Stacks:
        return stacks_of(self.trace, self.info.capabilities.packages) if self.trace is not None else no_stacks

    @cached_property
    def executions(self) -> ExecutionTable:
        return self._trace().table()

    @cached_property
    def graphs(self) -> list[Graph]:
        return self._trace().graphs()

    @cached_property
    def ir_texts(self) -> IRGraphs:
        """graph id -> IR text, each graph parsed once when first asked (IRGraphs): every
        analysis, renderer and tab asks here. Texts from the graphs when they are read
        already (one read, not two); on PyTorch/XLA each graph's HLO too, when asked."""
        texts = {g.id: g.ir_text for g in self.graphs} if "graphs" in self.__dict__ else self._trace().ir_texts()
        return with_hlo(texts, self._trace(), self.info)

    @cached_property
    def analysis(self) -> Analysis:
        with _collector_paused():
            return analyze(self.info, self.executions, self.ir_texts, stacks=self.stacks)

    def analysed(self, quick: bool = False) -> Run:
        """This run with its analysis computed now (a live view does it off the UI's
        thread); quick: the quick pass only (Analysis.complete is False)."""
        if quick and "analysis" not in self.__dict__:
            with _collector_paused():
                self.__dict__["analysis"] = analyze(self.info, self.executions, self.ir_texts, quick=True,
                                                    stacks=self.stacks)
        _ = self.analysis
        return self

    @cached_property
    def collectives(self) -> list[Moved]:
        """Each collective of each graph that ran (PyTorch/XLA SPMD), and why the layout
        asked for it; [] on a backend that records no HLO."""
        if not self.ir_texts.has_hlo:
            return []
        return run_collectives(self.executions, self.ir_texts.hlo, self.info.annotations)

    @property
    def summary(self) -> Summary:
        return self.analysis.summary

    @property
    def findings(self) -> list[Finding]:
        """What the run says to fix, worst first."""
        return self.analysis.findings

    @property
    def recompiles(self) -> list[Recompile | PendingRecompile]:
        return self.analysis.recompiles

    @property
    def steps(self) -> int:
        return self.summary.steps

    @cached_property
    def _recompile_by_execution(self) -> dict[int, Recompile | PendingRecompile]:
        return {r.execution: r for r in self.recompiles}

    def recompile_at(self, index: int) -> Recompile | PendingRecompile | None:
        """The recompile that execution `index` was, if it was one."""
        return self._recompile_by_execution.get(index)

    def execution(self, index: int) -> Execution:
        """One execution by its index: from the trace (a cheap read) or the parts."""
        if self.trace is not None and "executions" not in self.__dict__:
            return self.trace.execution(index)
        position = self.executions.position_of(index)
        if position is None:
            raise KeyError(f"no execution {index}")
        return self.executions[position]

    def graph(self, graph_id: str) -> Graph | None:
        if self.trace is not None:
            return self.trace.graph(graph_id)
        return next((g for g in self.graphs if g.id == graph_id), None)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a run is analysed: the analysis makes
    millions of small objects that hold no cycles (parsed nodes, changes), and the
    collector scanning them again and again was a fifth of a heavy report's time (a
    BERT fine-tune's 1,100 graphs: 3.3 -> 2.7 s) and 40% of 3,000 graphs'. What cycles
    the analysis leaves are collected once it is done."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def stacks_of(trace: Trace, packages: tuple[str, ...]) -> Stacks:
    """The trace's stacks by id, each read once; a damaged one reads as no stack (the
    findings that ask say less, the rest stands). packages: the run's framework packages."""

    @lru_cache(maxsize=4096)
    def stack(stack_id: int | None) -> list[Frame]:
        try:
            return trace.stack(stack_id)
        except TraceError:
            return []

    return Stacks(stack, packages)


def with_hlo(ir_texts: Mapping[str, str], trace: Trace, info: RunInfo) -> IRGraphs:
    """The IR texts as IRGraphs, answering each graph's HLO too where the trace may hold
    it: PyTorch/XLA's."""
    if not info.capabilities.hlo:
        return IRGraphs.of(ir_texts)

    def backend_text(graph_id: str) -> str:
        graph = trace.graph(graph_id)
        return graph.backend_text if graph is not None else ""

    return IRGraphs(ir_texts, backend_text)
