"""What the UI has read of one trace: the rows so far, the graphs' texts, the run's
record and its latest analysis. No widget here: the trace screen takes each update into
a TraceState and shows what it holds; switching to another rank's trace starts a new one."""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.recompiles import PendingRecompile, Recompile
from lazyviz.analysis.run import Run
from lazyviz.present import why_text
from lazyviz.trace import Execution, GraphTexts, RunInfo, Trace, TraceError
from lazyviz.tui.watcher import TraceUpdate, TraceWatcher
from lazyviz.tui.widgets.header import Counts


@dataclass(frozen=True)
class Taken:
    """What an update changed, for the screen to redraw."""
    rows: bool  # new executions
    analysis: bool  # a new analysis (a quick pass's or the whole one's)


class TraceState:
    def __init__(self, watcher: TraceWatcher) -> None:
        self.watcher = watcher
        self.trace_path = Path(watcher.path)
        self.count = 0  # rows of the watcher's table shown so far
        self.ir_texts = GraphTexts()  # as the watcher reads them: by line ids
        self.ir_graphs = IRGraphs(self.ir_texts)  # the tabs' parsed graphs; with the HLO on XLA (take)
        self.run_info: RunInfo | None = None
        self.latest: Run | None = None  # the run as its latest whole analysis saw it
        self.analysed = 0  # executions the latest analysis covered
        self.counts = Counts()
        self.process_status: int | None = None
        self.started = time.time()  # until the trace says when the run started
        self.opened = False  # the view went to the worst finding once the run ended

    @property
    def ended(self) -> bool:
        """The run's trace says how it ended (its process may take a moment more to
        exit, and the watcher stops once the trace is whole)."""
        return self.run_info is not None and self.run_info.finished

    def take(self, update: TraceUpdate) -> Taken:
        if update.run is not None:
            if update.run.capabilities.hlo and not self.ir_graphs.has_hlo:
                self.ir_graphs = IRGraphs(self.ir_texts, self.backend_text)
            self.run_info = update.run
        self.process_status = update.process_status
        self.ir_texts.update(update.ir_texts)
        rows = update.count > self.count
        if rows:
            self.counts.add(self.watcher.executions, self.count, update.count)
            self.count = update.count
        if update.analysed is not None and update.analysed.analysis.complete:
            # A quick pass knows no recompile: the rows' why waits for the whole one.
            self.latest = update.analysed
            self.analysed = update.analysed.summary.executions
        return Taken(rows, update.analysed is not None)

    def ready_to_open(self) -> bool:
        """A live run opens on its worst finding when it ends, as view does: once, and
        once the analysis has seen every row (an earlier one may not know it yet)."""
        return not self.opened and self.latest is not None and self.ended and self.analysed >= self.count

    def backend_text(self, graph_id: str) -> str:
        """A graph's backend text, read from the trace when the Diff tab asks for its HLO
        (only where two graphs' IR texts are the same, on PyTorch/XLA)."""
        try:
            with Trace(self.trace_path) as trace:
                graph = trace.graph(graph_id)
        except TraceError:
            return ""
        return graph.backend_text if graph is not None else ""

    def recompile_at(self, index: int) -> Recompile | PendingRecompile | None:
        return self.latest.recompile_at(index) if self.latest else None

    def expected_miss(self, execution: Execution) -> bool:
        """A site's first graph, or a recompile in the warm-up steps (once analysed)."""
        if execution.index >= self.analysed:
            return False
        recompile = self.recompile_at(execution.index)
        return recompile is None or recompile.warmup

    def why(self, execution: Execution) -> str:
        return why_text(execution, self.recompile_at(execution.index), execution.index < self.analysed)

    def elapsed_s(self, last: Execution | None) -> float:
        """Since the traced process started (also in `view` of a live trace); the run's own
        figure once it ended, which the clock had counted up to. last: the last row shown."""
        run = self.run_info
        if run is not None and run.elapsed_s is not None:
            return run.elapsed_s
        if run is not None and (run.ended_by or run.exit_status is not None):
            # Ended without recording its own figure (killed): the clock stops at its
            # last execution, not at today's time.
            return (last.start_ms + last.sync_ms) / 1000 if last is not None else 0.0
        started = self.started
        if run is not None and run.start_time:
            try:
                started = datetime.fromisoformat(run.start_time).timestamp()
            except ValueError:
                pass
        return max(0.0, time.time() - started)
