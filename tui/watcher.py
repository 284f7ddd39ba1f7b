"""Reads a (possibly growing) trace off the UI thread and hands the app batches: new
executions, the run's state, new graphs' IR, new script output, and the analysis of
everything so far. Sleep-polls, since select/poll on a regular file always says
ready; bursts of rows go out as one update."""
from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lazyviz.analysis.collectives import collective_rows
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.library import Stacks, no_stacks
from lazyviz.analysis.run import Run, stacks_of, with_hlo
from lazyviz.analysis.summary import StepTimes, step_times
from lazyviz.present import collectives_text
from lazyviz.trace import RunInfo, Trace, TraceError
from lazyviz.trace.model import GraphTexts
from lazyviz.trace.table import ExecutionTable

ANALYZE_EVERY_S = 1.0
FIRST_BATCH = 2000  # rows in the first update: a big trace shows its first rows at once
BATCH = 200_000  # rows per update after that (a fraction of a second to read)
# Above this much IR to parse (GraphTexts.size: each stored line once), the first analysis
# is a quick pass (analysis.analyze(quick=True)), then the whole one: parsing runs at about
# 20 MB/s on this machine, and explaining the recompiles takes about as long again (a BERT
# fine-tune's 7.7 MB of distinct lines: 2.3 s in the UI, its quick pass 0.5 s).
QUICK_FIRST_IR_BYTES = 2 << 20
FINISHED_ROWS_SHOWN_S = 0.02


@dataclass
class TraceUpdate:
    count: int = 0  # rows the watcher's table holds now: the UI shows that many
    added: int = 0  # of which new since the last update
    run: RunInfo | None = None
    ir_texts: GraphTexts = field(default_factory=GraphTexts)  # new graphs
    output: str = ""
    process_status: int | None = None
    analysed: Run | None = None  # the run so far, analysed
    steps: StepTimes | None = None  # time per step, with each analysis
    collectives: str = ""  # SPMD: the bytes collectives move per step, with each analysis (collectives_text)
    error: str | None = None
    done: bool = False  # nothing more will come
    more: bool = False  # a big read in progress: poll again at once

    @property
    def empty(self) -> bool:
        return not (self.added or self.ir_texts or self.output or self.analysed or self.error or self.done)


class TraceWatcher:
    def __init__(self, path: Path, process: subprocess.Popen | None = None, output: Path | None = None,
                 poll_s: float = 0.25) -> None:
        self.path = path
        self.process = process
        self.output = output
        self.poll_s = poll_s
        self.trace: Trace | None = None
        # As columns: the analysis reads them and they stay small. The UI reads the rows
        # below each update's count (see ExecutionTable on threads).
        self.executions = ExecutionTable.empty()
        # Where each kind occurs, kept up to date as rows come (a head() for the details
        # then copies it, rather than walking a million rows again).
        _ = self.executions.positions
        self.ir_texts = GraphTexts()
        self.graphs: IRGraphs | None = None  # over ir_texts: what one analysis parsed, the next keeps
        self.stacks: Stacks = no_stacks  # the trace's, once it is open
        self._output_offset = 0
        self._last_run: RunInfo | None = None
        self._last_status: int | None = None
        self._analyzed_at = time.monotonic()
        self._analyze_every = ANALYZE_EVERY_S  # grows with the analysis' own cost (below)
        self._analyzed_count = -1
        self._analyzed_finished = False
        self._reading_in = False  # the last update was a full batch
        self._quick_sent = False  # the first analysis of a trace with much IR went out quick

    def for_trace(self, path: Path) -> TraceWatcher:
        """A watcher of another trace of the same live run (a process torch_xla.launch
        started): the script's output goes on from where this one read it."""
        watcher = TraceWatcher(path, self.process, self.output, self.poll_s)
        watcher._output_offset = self._output_offset
        return watcher

    def run(self, emit: Callable[[TraceUpdate], None], cancelled: Callable[[], bool]) -> None:
        while not cancelled():
            try:
                update = self.poll()
            except TraceError as error:  # damage met while reading: say so, stop reading
                emit(TraceUpdate(error=str(error), done=True))
                return
            except Exception as error:
                emit(TraceUpdate(error=f"internal error: {type(error).__name__}: {error}", done=True))
                return
            if not update.empty or update.run != self._last_run or update.process_status != self._last_status:
                self._last_run, self._last_status = update.run, update.process_status
                emit(update)
            if update.done:
                return
            # Also after a batch, so the UI gets the GIL to show it; but not while a big
            # trace is still being read in. A finished run's last rows are in: a moment to
            # show them, then the analysis at once (a saved trace's first answer).
            if not update.more:
                finished = update.added and update.run is not None and update.run.finished
                time.sleep(FINISHED_ROWS_SHOWN_S if finished else self.poll_s)

    def _open(self) -> str | None:
        try:
            self.trace = Trace(self.path)
            _ = self.trace.run  # the schema may still be being written
            return None
        except (TraceError, Exception) as error:
            self.trace = None
            return str(error)

    def poll(self) -> TraceUpdate:
        update = TraceUpdate(output=self._read_output())
        update.process_status = self.process.poll() if self.process is not None else None
        if self.trace is None:
            error = self._open()
            if self.trace is None:
                live = self.process is not None and update.process_status is None
                if not live:
                    update.error, update.done = error, True
                return update
        trace = self.trace
        exited = self.process is not None and update.process_status is not None
        table = self.executions
        kinds_before = len(table.kinds)
        # A screenful first, so a big trace shows at once; then big batches of columns.
        limit = BATCH if len(table) else FIRST_BATCH
        update.added = trace.read_more(table, limit)
        update.count, update.run = len(table), trace.run
        new_graphs = {kind.graph for kind in table.kinds[kinds_before:]} - self.ir_texts.keys()
        if new_graphs:
            texts = trace.ir_texts()
            update.ir_texts = texts.only(texts.keys() - self.ir_texts.keys())
            self.ir_texts.update(update.ir_texts)
        now = time.monotonic()
        finished = update.run.finished or exited
        # A big trace's last batch goes out before the analysis too (a second or two on
        # a million rows): the watcher polls again at once and analyses then.
        full = update.added == limit
        update.more = full or (update.added > 0 and self._reading_in)
        self._reading_in = full
        # Rows first: while a big trace is read in, the analysis waits; while rows keep
        # streaming in, it runs about once a second.
        due = not update.added or (not update.more and now - self._analyzed_at > self._analyze_every)
        fresh = len(table) != self._analyzed_count or finished != self._analyzed_finished
        if fresh and due:
            # Opening a trace with much IR (a word LM's 68 MB: 4 s to analyse), the quick
            # pass goes out first, the whole analysis at the next poll, at once.
            quick = not self._quick_sent and self.ir_texts.size() > QUICK_FIRST_IR_BYTES
            self._quick_sent = True
            if self.graphs is None:  # XLA: what its IR text leaves out, from the HLO
                self.graphs = with_hlo(self.ir_texts, trace, update.run)
                self.stacks = stacks_of(trace, update.run.capabilities.packages)
            # Never in the UI's thread.
            update.analysed = Run.of(update.run, table, self.graphs, stacks=self.stacks).analysed(quick)
            update.steps = step_times(table)
            if not quick:  # read here, off the UI's thread: the graphs' HLO comes from the trace
                run = update.analysed
                update.collectives = collectives_text(collective_rows(run.collectives, run.steps), run.steps)
            if quick:
                update.more = True
                return update
            # A long live run (hundreds of thousands of rows) analyses for seconds: wait
            # four times that long before the next, so rows keep following.
            self._analyze_every = max(ANALYZE_EVERY_S, 4 * (time.monotonic() - now))
            self._analyzed_at, self._analyzed_count = now, len(table)
            self._analyzed_finished = finished
        if not update.added and (update.run.finished or exited) and trace.count() == len(table):
            update.output += self._read_output()
            update.done = True
        return update

    def _read_output(self) -> str:
        if self.output is None or not self.output.exists():
            return ""
        with self.output.open("rb") as handle:
            handle.seek(self._output_offset)
            data = handle.read()
        self._output_offset += len(data)
        return data.decode("utf-8", "replace")
