"""The lazyviz terminal UI: the run header, the executions table, and tabs with the
selected execution's IR, backend code, diff, stack and counters, plus the run's
findings, step timing and the script's output."""
from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.events import Click
from textual.message import Message
from textual.widgets import Footer, Input, Static, TabbedContent, TabPane
from textual.worker import get_current_worker

from lazyviz.analysis.findings import Finding
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.ranks import find_divergence, rank_list, step_graphs
from lazyviz.analysis.recompiles import PendingRecompile, Recompile
from lazyviz.analysis.run import Run
from lazyviz.analysis.summary import StepTimes
from lazyviz.present import divergence_text, finding_headline, why_text
from lazyviz.trace import Execution, GraphTexts, RunInfo, Trace, TraceError
from lazyviz.trace.files import launch_folder, output_path
from lazyviz.tui.actions import AppActions
from lazyviz.tui.details import graphs_with
from lazyviz.tui.panels import AUTO_TABS, EXECUTION_PANELS, TABS, DetailContext, explaining_tab, tab_key
from lazyviz.tui.screens import QuitScreen
from lazyviz.tui.theme import use as use_palette
from lazyviz.tui.watcher import TraceUpdate, TraceWatcher
from lazyviz.tui.widgets.code_view import CodeView
from lazyviz.tui.widgets.executions import SORTS, ExecutionList
from lazyviz.tui.widgets.findings import FindingsView
from lazyviz.tui.widgets.findings_strip import FindingsStrip
from lazyviz.tui.widgets.fix_line import FixLine
from lazyviz.tui.widgets.header import Counts, RunHeader
from lazyviz.tui.widgets.output import OutputView
from lazyviz.tui.widgets.search_bar import SearchBar
from lazyviz.tui.widgets.step_chart import StepChart

COMPACT_HEIGHT = 30  # rows at or below which the findings strip folds to one line
SORT_NAMES = [name for name, _, _ in SORTS]  # the columns a heading click sorts by


class TraceUpdated(Message):
    def __init__(self, update: TraceUpdate, watcher: TraceWatcher) -> None:
        super().__init__()
        self.update = update
        self.watcher = watcher  # updates from a watcher replaced since (another rank) are dropped


class LazyvizApp(AppActions, App[str | None]):
    CSS_PATH = "lazyviz.tcss"
    TITLE = "lazyviz"
    # The footer shows the first few; check_action hides those that do not apply now.
    BINDINGS = [
        Binding("q", "ask_quit", "Quit"),
        # As untraced: Ctrl-C interrupts the script at once (quitting sends it Ctrl-C).
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("question_mark", "help", "Help"),
        Binding("f1", "help", "Help", show=False),
        Binding("g", "next_finding", "Finding"),
        Binding("n", "next_miss(1)", "Miss"),
        Binding("N", "next_miss(-1)", "Prev miss", show=False),
        Binding("slash", "search", "Search"),
        Binding("o", "sort", "Sort"),
        Binding("O", "sort_reverse", "Reverse", show=False),
        Binding("s", "save_svg", "SVG"),
        Binding("f", "toggle_follow", "Follow", show=False),  # the header says follow on/off
        Binding("r", "toggle_raw", "Raw text", show=False),
        Binding("escape", "focus_table", "Back to the table", show=False),
        Binding("left_square_bracket", "switch_rank(-1)", "Prev rank", show=False),
        Binding("right_square_bracket", "switch_rank(1)", "Next rank", show=False),
        Binding("enter", "focus_details", "Details", show=False),
        *[Binding(tab_key(number), f"show_tab('{tab.id}')", tab.title, show=False)
          for number, tab in enumerate(TABS)],
    ]

    def __init__(self, watcher: TraceWatcher, ranks: dict[int, Path] | None = None,
                 close_when: Callable[[], bool] = lambda: False) -> None:
        """watcher: the data source (tests may pass any object with its interface);
        ranks: the traces of a multi-process run, by rank; [ and ] switch;
        close_when: checked by a timer: the terminal went away (SIGHUP), so close."""
        super().__init__()
        self.close_when = close_when
        self.watcher = watcher
        self.trace_path = Path(watcher.path)
        self.process = watcher.process
        self.poll_s = watcher.poll_s
        self.ranks = ranks or {}
        self._reset()

    def _reset(self) -> None:
        """Forget what was read: on start, and when switching to another rank's trace."""
        self.count = 0  # rows of the watcher's table shown so far
        self.ir_texts = GraphTexts()  # as the watcher reads them: by line ids
        self.ir_graphs = IRGraphs(self.ir_texts)  # the tabs' parsed graphs; with the HLO on XLA (_apply)
        self.run_info: RunInfo | None = None
        self.latest: Run | None = None  # the run as its latest analysis saw it
        self.analysed = 0  # executions the latest analysis covered
        self.counts = Counts()
        self.process_status: int | None = None
        self.started = time.time()  # until the trace says when the run started
        self.search_term = ""
        self.raw = False  # the IR and backend text as recorded, not tidied
        self.finding_cursor = -1
        self._opened = False  # the first analysis came (and may have chosen the row)

    def compose(self) -> ComposeResult:
        yield RunHeader(id="header")
        yield FindingsStrip(id="strip")
        yield FixLine(id="fix")
        with Vertical(id="executions-pane"):
            yield Static(id="columns")
            yield ExecutionList(id="executions")
        with TabbedContent(id="details"):
            for tab in TABS:
                with TabPane(tab.title, id=tab.id):
                    yield tab.make()
        yield SearchBar(id="search")
        yield Footer()

    def on_mount(self) -> None:
        use_palette(self.current_theme.dark)
        self.theme_changed_signal.subscribe(self, self._recolour)
        table = self.query_one(ExecutionList)
        table.why = self._why
        table.expected_miss = self._expected_miss
        table.focus()
        self.refresh_header()
        self.set_interval(1.0, self.refresh_header)  # the elapsed clock; no data polling here
        self.set_interval(0.25, self._close_if_asked)
        self.watch_trace()
        if self.ranks:
            self.load_ranks()
        else:
            self._launch_timer = self.set_interval(1.0, self._follow_launched)

    def _recolour(self, theme: object = None) -> None:
        """A theme of the other darkness (ctrl+p -> theme): every lazyviz colour from the
        palette readable on it."""
        if not use_palette(self.current_theme.dark):
            return
        for view in self.query(CodeView):
            view.recolour()
        strip = self.query_one(FindingsStrip)
        strip.redraw()
        if self.latest is not None:
            self.query_one(FindingsView).show(self.latest.findings, self.run_info.cwd if self.run_info else "")
        self._show_fix(strip.highlighted)
        self.query_one(StepChart).refresh()
        self.query_one(ExecutionList).refresh()
        self.refresh_header()

    # -- ranks of a multi-process run -----------------------------------------------------
    def action_switch_rank(self, direction: int) -> None:
        if len(self.ranks) < 2:
            self.notify("one process: no other rank to show")
            return
        order = sorted(self.ranks)
        current = next((r for r, p in self.ranks.items() if p == self.trace_path), order[0])
        rank = order[(order.index(current) + direction) % len(order)]
        self.workers.cancel_group(self, "watch")
        self.trace_path = self.ranks[rank]
        beside = output_path(self.trace_path)
        self.watcher = TraceWatcher(self.trace_path, None, beside if beside.exists() else None, self.poll_s)
        self.process = None
        self._reset()
        self.query_one(ExecutionList).show_rows(self.watcher.executions, 0)
        self.query_one(OutputView).clear()
        self.notify(f"rank {rank}: {self.trace_path.name}")
        self.watch_trace()

    def _follow_launched(self) -> None:
        """The script (live or saved) ran no graph itself but torch_xla.launch started
        processes that trace their own: show theirs (the first process, [ and ] for the
        others)."""
        if self.count:
            self._launch_timer.stop()
            return
        traces = {int(path.stem[4:]): path for path in launch_folder(self.trace_path).glob("rank*.trace")
                  if path.stem[4:].isdigit()}
        if not traces:
            return
        self._launch_timer.stop()
        self.ranks = traces
        rank = min(traces)
        self.workers.cancel_group(self, "watch")
        self.watcher, self.trace_path = self.watcher.for_trace(traces[rank]), traces[rank]
        self._reset()
        self.notify(f"torch_xla.launch started processes: showing process {rank}'s trace ({traces[rank].name})")
        self.watch_trace()
        if len(traces) > 1:
            self.load_ranks()

    @work(thread=True, group="ranks", exit_on_error=False, description="all ranks")
    def load_ranks(self) -> None:
        executions, ir_texts, stopped = {}, {}, []
        for rank, path in self.ranks.items():
            with Trace(path) as trace:  # columns: a rank's steps and graphs, no Execution made
                executions[rank], ir_texts[rank] = trace.table(), trace.ir_texts()
                if not trace.run.ended_cleanly:
                    stopped.append(rank)
        per_rank = {rank: step_graphs(found) for rank, found in executions.items()}
        divergence = find_divergence(executions, ir_texts, stopped)
        lines = [f"# {len(self.ranks)} ranks; [ and ] show another rank's executions",
                 f"# {divergence_text(divergence) if divergence else 'every rank ran the same graphs at every step'}",
                 ""]
        for step in sorted(set().union(*(steps.keys() for steps in per_rank.values()))):
            # The ranks that ran the same graphs, together: 256 ranks stay one short line.
            groups: dict[tuple[str, ...], list[int]] = {}
            for rank, steps in per_rank.items():
                groups.setdefault(steps.get(step, ()), []).append(rank)
            mark = "!" if len(groups) > 1 else " "
            cells = "  |  ".join(f"{'rank' if len(ranks) == 1 else 'ranks'} {rank_list(ranks)}: "
                                 f"{' '.join(g[:8] for g in seq) or '-'}" for seq, ranks in groups.items())
            lines.append(f"{mark} step {step:4d}  {cells}")
        self.call_from_thread(self._show_texts, {"ranks-view": "\n".join(lines)})

    def on_resize(self) -> None:
        self._update_columns()
        # On a short terminal the findings strip is one line (the highlighted finding, with
        # its count) until it has the focus, so the table keeps its rows.
        try:
            self.query_one(FindingsStrip).set_class(self.size.height <= COMPACT_HEIGHT, "compact")
        except NoMatches:
            pass

    @on(ExecutionList.LayoutChanged)
    def _update_columns(self) -> None:
        try:
            table, columns = self.query_one(ExecutionList), self.query_one("#columns", Static)
        except NoMatches:  # a resize that arrives while the app closes
            return
        columns.update(table.header(self.size.width))

    # -- feeding -------------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="watch", exit_on_error=False, description="watch the trace")
    def watch_trace(self) -> None:
        worker = get_current_worker()
        watcher = self.watcher
        watcher.run(lambda update: self.post_message(TraceUpdated(update, watcher)), lambda: worker.is_cancelled)

    def on_trace_updated(self, message: TraceUpdated) -> None:
        if message.watcher is not self.watcher:
            return
        try:
            self._apply(message.update)
        except NoMatches:  # an update that arrives while the app closes
            pass

    def _backend_text(self, graph_id: str) -> str:
        """A graph's backend text, read from the trace when the Diff tab asks for its HLO
        (only where two graphs' IR texts are the same, on PyTorch/XLA)."""
        try:
            with Trace(self.trace_path) as trace:
                graph = trace.graph(graph_id)
        except TraceError:
            return ""
        return graph.backend_text if graph is not None else ""

    def _apply(self, update: TraceUpdate) -> None:
        if update.run is not None:
            if update.run.backend == "xla" and not self.ir_graphs.has_hlo:
                self.ir_graphs = IRGraphs(self.ir_texts, self._backend_text)
            self.run_info = update.run
            self.query_one(ExecutionList).cwd = update.run.cwd
        self.process_status = update.process_status
        self.ir_texts.update(update.ir_texts)
        if update.output:
            self.query_one(OutputView).write(update.output)
        if update.count > self.count:
            table = self.watcher.executions
            self.counts.add(table, self.count, update.count)
            self.count = update.count
            self.query_one(ExecutionList).show_rows(table, update.count)
        if update.analysed is not None:
            complete = update.analysed.analysis.complete
            if complete:  # a quick pass knows no recompile: the rows' why waits for the whole one
                self.latest = update.analysed
                self.analysed = update.analysed.summary.executions
            cwd = self.run_info.cwd if self.run_info else ""
            finished = bool(self.run_info and self.run_info.finished)
            self.query_one(FindingsView).show(update.analysed.findings, cwd)
            strip = self.query_one(FindingsStrip)
            strip.show(update.analysed.findings, cwd, finished, complete)
            self._show_fix(strip.highlighted)
            self.query_one(StepChart).show(update.steps or StepTimes(), update.collectives)
            self.query_one(ExecutionList).refresh()  # the why column
            self.refresh_bindings()
        if not self._opened and self.latest is not None and self._ended() and self.analysed >= self.count:
            # A live run opens on its worst finding when it ends, as view does (once the
            # analysis has seen every row: an earlier one may not know it yet).
            self._opened = True
            self._open_on_worst(self.latest.findings)
        if self._ended() and isinstance(self.screen, QuitScreen):
            self.screen.dismiss(None)  # the question is moot: the script ended while it was asked
            self.notify("the script has ended: q quits")
        if update.error and not self.count:
            self.query_one("#ir-view", CodeView).set_text(f"cannot read {self.trace_path}: {update.error}")
        elif update.error:
            self.notify(f"stopped reading the trace: {update.error}", severity="error", timeout=30)
        self.refresh_header()

    def _ended(self) -> bool:
        """The run's trace says how it ended (its process may take a moment more to
        exit, and the watcher stops once the trace is whole)."""
        return self.run_info is not None and self.run_info.finished

    def _show_fix(self, highlighted: int | None) -> None:
        # The fix of the finding the strip shows: a quick pass's (a fallback's, a missing
        # mark_step()'s: findings it knows whole) at once, then the whole analysis's.
        findings = self.query_one(FindingsStrip).findings
        at = highlighted if highlighted is not None and 0 <= highlighted < len(findings) else 0
        self.query_one(FixLine).show(findings[at] if findings else None)

    @on(FindingsStrip.OptionHighlighted)
    def _fix_of_highlighted(self, event: FindingsStrip.OptionHighlighted) -> None:
        self._show_fix(event.option_index)

    def _open_on_worst(self, findings: list[Finding]) -> None:
        """A run that ended opens on its worst finding (the first screen shows the
        problem, its fix and what explains it), unless the user moved while it ran."""
        if findings and self.query_one(ExecutionList).follow:
            self.finding_cursor = 0
            self.go_to_finding(findings[0])

    def _close_if_asked(self) -> None:
        if self.close_when():
            self.exit()

    def refresh_header(self) -> None:
        try:
            self._refresh_header()
        except NoMatches:  # a timer or message that arrives while the app closes
            pass

    def _refresh_header(self) -> None:
        run = self.run_info
        table = self.query_one(ExecutionList)
        rank = next((f"rank {r} of {len(self.ranks)} · " for r, p in self.ranks.items() if p == self.trace_path), "")
        sort = SORTS[table.sort][0]
        shown = "" if sort == "#" and not table.reversed else f"{sort} {'▼' if table.descending else '▲'}"
        self.query_one(RunHeader).show(run, self.counts, self.elapsed_s(), table.follow, self.process_status,
                                       str(self.trace_path), rank, shown)

    def elapsed_s(self) -> float:
        """Since the traced process started (also in `view` of a live trace); the run's own
        figure once it ended, which the clock had counted up to."""
        run = self.run_info
        if run is not None and run.elapsed_s is not None:
            return run.elapsed_s
        if run is not None and (run.ended_by or run.exit_status is not None):
            # Ended without recording its own figure (killed): the clock stops at its
            # last execution, not at today's time.
            table = self.query_one(ExecutionList)
            last = table.rows[table.count - 1] if table.count else None
            return (last.start_ms + last.sync_ms) / 1000 if last is not None else 0.0
        started = self.started
        if run is not None and run.start_time:
            try:
                started = datetime.fromisoformat(run.start_time).timestamp()
            except ValueError:
                pass
        return max(0.0, time.time() - started)

    def _recompile_at(self, index: int) -> Recompile | PendingRecompile | None:
        return self.latest.recompile_at(index) if self.latest else None

    def _expected_miss(self, execution: Execution) -> bool:
        """A site's first graph, or a recompile in the warm-up steps (once analysed)."""
        if execution.index >= self.analysed:
            return False
        recompile = self._recompile_at(execution.index)
        return recompile is None or recompile.warmup

    def _why(self, execution: Execution) -> str:
        return why_text(execution, self._recompile_at(execution.index), execution.index < self.analysed)

    # -- the selected execution ---------------------------------------------------------
    @on(ExecutionList.Selected)
    def show_execution(self, message: ExecutionList.Selected) -> None:
        # The tab that explains the row: Diff for a recompile, Stack for a fallback or an
        # extra sync, IR otherwise; a tab chosen outside those three stays.
        found = self.query(TabbedContent)
        if not found:  # a selection still queued while the app closes: its screen is gone
            return
        tabs = found.first()
        if tabs.active in AUTO_TABS:
            tabs.active = explaining_tab(message.execution, self._recompile_at(message.execution.index))
        self.load_details(message.execution)

    @on(FindingsStrip.Chosen)
    def show_finding(self, message: FindingsStrip.Chosen) -> None:
        self.go_to_finding(message.finding)

    def go_to_finding(self, finding: Finding) -> None:
        """Select the finding's first execution and open the tab that explains it."""
        table = self.query_one(ExecutionList)
        if not finding.executions:
            self.query_one(TabbedContent).active = "findings"
            self.notify(finding_headline(finding), timeout=6)
            return
        self.query_one(TabbedContent).active = "ir"  # let the row choose among IR, Diff and Stack
        table.select_execution(finding.executions[0])
        table.focus()

    @on(ExecutionList.FollowChanged)
    def follow_changed(self) -> None:
        self.refresh_header()

    # A description, so Textual does not repr() the arguments of every call.
    @work(thread=True, exclusive=True, group="details", exit_on_error=False, description="load details")
    def load_details(self, execution: Execution) -> None:
        """Read and format the tabs' text off the UI thread; a newer selection cancels this."""
        worker = get_current_worker()
        time.sleep(0.03)  # held keys move the cursor faster than this: load only where it stops
        if worker.is_cancelled:
            return
        try:
            with Trace(self.trace_path) as trace:
                # Snapshots: the watcher goes on adding rows, and the UI graphs.
                context = DetailContext(trace, self.watcher.executions.head(self.count), self.ir_graphs, self.raw)
                texts = {}
                for panel in EXECUTION_PANELS:
                    if worker.is_cancelled:
                        return
                    texts[f"{panel.id}-view"] = panel.text(execution, context)
        except TraceError as error:
            self.call_from_thread(self.notify, str(error), severity="error")
            return
        if not worker.is_cancelled:
            self.call_from_thread(self._show_texts, texts)

    def _show_texts(self, texts: dict[str, str]) -> None:
        try:
            for view_id, text in texts.items():
                self.query_one(f"#{view_id}", CodeView).set_text(text)
        except NoMatches:  # the app is closing while a worker finished
            pass



    @on(Input.Submitted, "#search")
    def search(self, message: Input.Submitted) -> None:
        self.search_term = message.value
        if not self.query_one(ExecutionList).find(self.search_term, graphs_with(self.search_term, self.ir_texts)):
            self.notify(f"no execution matches {self.search_term!r}", severity="warning")







    @on(Click, "#columns")
    def sort_by_heading(self, event: Click) -> None:
        """A click on a column heading sorts by it; on the sorted one, the other way round."""
        table = self.query_one(ExecutionList)
        title = table.layout().column_at(event.x)
        if title is None:
            return
        if title not in SORT_NAMES:
            self.notify(f"the table sorts by {', '.join(SORT_NAMES)}; not by {title}", timeout=3)
        elif title == SORTS[table.sort][0]:
            self.action_sort_reverse()
        else:
            self.action_sort(title)
        self.refresh_header()










def build_app(trace_path: Path, process: subprocess.Popen | None = None, output: Path | None = None,
              poll_s: float = 0.25, ranks: dict[int, Path] | None = None,
              close_when: Callable[[], bool] = lambda: False) -> LazyvizApp:
    """The one factory for the CLI and the tests. output: the script's output (default:
    the one beside the trace, if any). ranks: the traces of a multi-process run, by rank
    (trace_path is the one shown first)."""
    if output is None:
        beside = output_path(Path(trace_path))
        output = beside if beside.exists() else None
    return LazyvizApp(TraceWatcher(Path(trace_path), process, output, poll_s), ranks, close_when)
