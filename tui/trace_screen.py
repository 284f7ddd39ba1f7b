"""The trace screen: the run header, the findings strip and the fix of the one
highlighted, the executions table, and tabs with the selected execution's IR, backend
code, diff, stack and counters, plus the run's findings, step timing and the script's
output. It owns the keys that act on them; what it has read lives in a TraceState."""
from __future__ import annotations

import textwrap
import time
from collections.abc import Iterable
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.events import Click
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Input, Static, TabbedContent, TabPane
from textual.worker import get_current_worker

from lazyviz.analysis.findings import Finding
from lazyviz.analysis.memory import peak_text
from lazyviz.analysis.summary import StepTimes
from lazyviz.export.graphviz import ExportError, execution_dot, render_svg
from lazyviz.present import finding_headline
from lazyviz.trace import Execution, Trace, TraceError
from lazyviz.trace.files import new_file, output_path
from lazyviz.tui.details import graphs_with
from lazyviz.tui.panels import AUTO_TABS, EXECUTION_PANELS, TABS, DetailContext, explaining_tab, tab_key
from lazyviz.tui.ranks import Ranks
from lazyviz.tui.screens import HelpScreen, QuitScreen
from lazyviz.tui.state import TraceState
from lazyviz.tui.watcher import TraceUpdate, TraceWatcher
from lazyviz.tui.widgets.code_view import CodeView
from lazyviz.tui.widgets.executions import SORTS, ExecutionList
from lazyviz.tui.widgets.findings import FindingsView
from lazyviz.tui.widgets.findings_strip import FindingsStrip
from lazyviz.tui.widgets.fix_line import FixLine
from lazyviz.tui.widgets.header import RunHeader
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


class TraceScreen(Screen[None]):
    # The footer shows the first few; check_action hides those that do not apply now.
    BINDINGS = [
        Binding("q", "ask_quit", "Quit"),
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

    def __init__(self, watcher: TraceWatcher, ranks: dict[int, Path] | None = None) -> None:
        """watcher: the data source (tests may pass any object with its interface);
        ranks: the traces of a multi-process run, by rank; [ and ] switch."""
        super().__init__()
        self.state = TraceState(watcher)
        self.poll_s = watcher.poll_s
        self.ranks = Ranks(ranks)
        self.search_term = ""
        self.raw = False  # the IR and backend text as recorded, not tidied
        self.finding_cursor = -1

    @property
    def running(self) -> bool:
        """The traced script still runs (quitting asks first)."""
        process = self.state.watcher.process
        return process is not None and process.poll() is None and not self.state.ended

    def widgets(self) -> ComposeResult:
        """What the screen shows; the app's compose mounts them (tui/app.py)."""
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

    def start(self) -> None:
        """Once its widgets are mounted: read the trace, start the clock."""
        table = self.query_one(ExecutionList)
        table.why = lambda execution: self.state.why(execution)
        table.expected_miss = lambda execution: self.state.expected_miss(execution)
        table.focus()
        self.refresh_header()
        self.set_interval(1.0, self.refresh_header)  # the elapsed clock; no data polling here
        self.watch_trace()
        if len(self.ranks) > 1:
            self.load_ranks()
        else:
            self._launch_timer = self.set_interval(1.0, self._follow_launched)

    def recolour(self) -> None:
        """Every lazyviz colour again, from the palette now in use (the theme changed)."""
        for view in self.query(CodeView):
            view.recolour()
        strip = self.query_one(FindingsStrip)
        strip.redraw()
        state = self.state
        if state.latest is not None:
            self.query_one(FindingsView).show(state.latest.findings, state.run_info.cwd if state.run_info else "")
        self._show_fix(strip.highlighted)
        self.query_one(StepChart).refresh()
        self.query_one(ExecutionList).refresh()
        self.refresh_header()

    # -- another trace: a rank of a multi-process run --------------------------------------
    def _read(self, watcher: TraceWatcher) -> None:
        """Show another trace from its start."""
        self.workers.cancel_group(self, "watch")
        self.state = TraceState(watcher)
        self.finding_cursor = -1
        self.watch_trace()

    def action_switch_rank(self, direction: int) -> None:
        if len(self.ranks) < 2:
            self.notify("one process: no other rank to show")
            return
        rank = self.ranks.after(self.state.trace_path, direction)
        path = self.ranks.paths[rank]
        beside = output_path(path)
        self._read(TraceWatcher(path, None, beside if beside.exists() else None, self.poll_s))
        self.query_one(ExecutionList).show_rows(self.state.watcher.executions, 0)
        self.query_one(OutputView).clear()
        self.notify(f"rank {rank}: {path.name}")

    def _follow_launched(self) -> None:
        """The script (live or saved) ran no graph itself but torch_xla.launch started
        processes that trace their own: show theirs (the first process, [ and ] for the
        others)."""
        if self.state.count:
            self._launch_timer.stop()
            return
        launched = Ranks.launched_by(self.state.trace_path)
        if not launched:
            return
        self._launch_timer.stop()
        self.ranks = launched
        rank = launched.first()
        path = launched.paths[rank]
        self._read(self.state.watcher.for_trace(path))
        self.notify(f"torch_xla.launch started processes: showing process {rank}'s trace ({path.name})")
        if len(launched) > 1:
            self.load_ranks()

    @work(thread=True, group="ranks", exit_on_error=False, description="all ranks")
    def load_ranks(self) -> None:
        self.app.call_from_thread(self._show_texts, {"ranks-view": self.ranks.overview()})

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
        watcher = self.state.watcher
        watcher.run(lambda update: self.post_message(TraceUpdated(update, watcher)), lambda: worker.is_cancelled)

    def on_trace_updated(self, message: TraceUpdated) -> None:
        if message.watcher is not self.state.watcher:
            return
        try:
            self._apply(message.update)
        except NoMatches:  # an update that arrives while the app closes
            pass

    def _apply(self, update: TraceUpdate) -> None:
        state = self.state
        taken = state.take(update)
        if update.run is not None:
            self.query_one(ExecutionList).cwd = update.run.cwd
        if update.output:
            self.query_one(OutputView).write(update.output)
        if taken.rows:
            self.query_one(ExecutionList).show_rows(state.watcher.executions, state.count)
        if update.analysed is not None:
            cwd = state.run_info.cwd if state.run_info else ""
            self.query_one(FindingsView).show(update.analysed.findings, cwd)
            strip = self.query_one(FindingsStrip)
            strip.show(update.analysed.findings, cwd, state.ended, update.analysed.analysis.complete)
            self._show_fix(strip.highlighted)
            memory = peak_text(state.run_info.peak_rss, bool(update.steps)) if state.run_info else ""
            self.query_one(StepChart).show(update.steps or StepTimes(), update.collectives, memory)
            self.query_one(ExecutionList).refresh()  # the why column
            self.refresh_bindings()
        if state.ready_to_open():
            state.opened = True
            self._open_on_worst(state.latest.findings if state.latest else [])
        if state.ended and isinstance(self.app.screen, QuitScreen):
            self.app.screen.dismiss(None)  # the question is moot: the script ended while it was asked
            self.notify("the script has ended: q quits")
        if update.error and not state.count:
            self.query_one("#ir-view", CodeView).set_text(f"cannot read {state.trace_path}: {update.error}")
        elif update.error:
            self.notify(f"stopped reading the trace: {update.error}", severity="error", timeout=30)
        self.refresh_header()

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

    def refresh_header(self) -> None:
        try:
            table = self.query_one(ExecutionList)
            header = self.query_one(RunHeader)
        except NoMatches:  # a timer or message that arrives while the app closes
            return
        state = self.state
        sort = SORTS[table.sort][0]
        shown = "" if sort == "#" and not table.reversed else f"{sort} {'▼' if table.descending else '▲'}"
        last = table.rows[table.count - 1] if table.count else None
        header.show(state.run_info, state.counts, state.elapsed_s(last), table.follow, state.process_status,
                    str(state.trace_path), self.ranks.label(state.trace_path), shown)

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
            tabs.active = explaining_tab(message.execution, self.state.recompile_at(message.execution.index))
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
        state = self.state
        try:
            with Trace(state.trace_path) as trace:
                # Snapshots: the watcher goes on adding rows, and the UI graphs.
                context = DetailContext(trace, state.watcher.executions.head(state.count), state.ir_graphs, self.raw)
                texts = {}
                for panel in EXECUTION_PANELS:
                    if worker.is_cancelled:
                        return
                    texts[f"{panel.id}-view"] = panel.text(execution, context)
        except TraceError as error:
            self.app.call_from_thread(self.notify, str(error), severity="error")
            return
        if not worker.is_cancelled:
            self.app.call_from_thread(self._show_texts, texts)

    def _show_texts(self, texts: dict[str, str]) -> None:
        try:
            for view_id, text in texts.items():
                self.query_one(f"#{view_id}", CodeView).set_text(text)
        except NoMatches:  # the app is closing while a worker finished
            pass

    @on(Input.Submitted, "#search")
    def search(self, message: Input.Submitted) -> None:
        self.search_term = message.value
        if not self.query_one(ExecutionList).find(self.search_term, graphs_with(self.search_term, self.state.ir_texts)):
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

    # -- keys ----------------------------------------------------------------------------
    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())

    def action_ask_quit(self) -> None:
        """Quit; while the script still runs, ask first: stop it, let it finish, or stay."""
        if not self.running:
            self.app.exit()
            return

        def answered(answer: str | None) -> None:
            if answer == "stop":
                self.app.exit()
            elif answer == "detach":
                self.app.exit("detach")

        self.app.push_screen(QuitScreen(), answered)

    def action_search(self) -> None:
        self.query_one(SearchBar).open()

    def action_next_miss(self, direction: int) -> None:
        if not self.query_one(ExecutionList).next_miss(direction):
            self.notify("no more cache misses that way")

    def action_toggle_follow(self) -> None:
        table = self.query_one(ExecutionList)
        if self.state.ended and not table.follow:
            # Nothing more will come: go to the last execution, follow nothing.
            table.go_to_newest()
            self.notify("the run has ended: at its last execution (f follows new rows while a script runs)")
            return
        table.set_follow(not table.follow)

    def action_next_finding(self) -> None:
        latest = self.state.latest
        findings = latest.findings if latest else []
        if not findings:
            self.notify("no findings" + ("" if latest else " yet"))
            return
        self.finding_cursor = (self.finding_cursor + 1) % len(findings)
        self.query_one(FindingsStrip).highlighted = self.finding_cursor
        self.go_to_finding(findings[self.finding_cursor])

    def action_sort(self, to: str | None = None) -> None:
        name = self.query_one(ExecutionList).cycle_sort(to)
        self.notify(f"sorted by {name}" if name != "#" else "in the order they ran", timeout=2)

    def action_sort_reverse(self) -> None:
        table = self.query_one(ExecutionList)
        name = table.cycle_sort(reverse=True)
        order = "largest first" if table.descending else "smallest first"
        self.notify(f"sorted by {name}, {order}" if name != "#" else
                    f"in the order they ran, {'newest' if table.reversed else 'oldest'} first", timeout=2)

    def action_toggle_raw(self) -> None:
        self.raw = not self.raw
        table = self.query_one(ExecutionList)
        if table.selected is not None:
            self.load_details(table.selected)
        self.notify("IR and backend text as recorded" if self.raw else "IR and backend text tidied", timeout=2)

    def action_focus_table(self) -> None:
        self.query_one(ExecutionList).focus()

    def action_focus_details(self) -> None:
        tabs = self.query_one(TabbedContent)
        pane = tabs.get_pane(tabs.active)
        focusable = [w for w in pane.query("*") if w.can_focus]
        (focusable[0] if focusable else tabs).focus()

    def action_show_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def action_save_svg(self) -> None:
        selected = self.query_one(ExecutionList).selected
        if selected is not None:
            self.save_svg(selected)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Keys that do nothing now leave the footer."""
        if action == "next_miss":
            return self.state.counts.misses > 0
        if action == "next_finding":
            return bool(self.state.latest and self.state.latest.findings)
        if action == "switch_rank":
            return len(self.ranks) > 1
        return True

    def commands(self) -> Iterable[SystemCommand]:
        """This screen's entries in the command palette (ctrl+p)."""
        latest = self.state.latest
        for number, finding in enumerate(latest.findings if latest else [], 1):
            yield SystemCommand(f"Go to finding {number}: {textwrap.shorten(finding_headline(finding), 70, placeholder=' …')}",
                                finding.message, lambda f=finding: self.go_to_finding(f))
        yield SystemCommand("Export the selected graph as SVG", "saved beside the trace, never over a file",
                            self.action_save_svg)
        for tab in TABS:
            yield SystemCommand(f"Show tab: {tab.title}", tab.about, lambda t=tab.id: self.action_show_tab(t))
        for name, _, descending in SORTS:
            yield SystemCommand(f"Sort by {name}", "largest first" if descending else "ascending",
                                lambda n=name: self.action_sort(n))
        yield SystemCommand("Reverse the sort", "O", self.action_sort_reverse)
        yield SystemCommand("Toggle raw IR and backend text", "as recorded, or tidied", self.action_toggle_raw)
        yield SystemCommand("Next cache miss", "n", lambda: self.action_next_miss(1))

    @work(thread=True, group="svg", exit_on_error=False, description="save SVG")
    def save_svg(self, execution: Execution) -> None:
        state = self.state
        notify = self.app.call_from_thread
        if not state.ir_texts.get(execution.graph, ""):
            notify(self.notify, "no IR recorded for this graph (capture light)", severity="warning")
            return
        try:
            svg = render_svg(execution_dot(state.ir_graphs.parsed(execution.graph), execution))
            path = new_file(state.trace_path.with_name(f"{state.trace_path.name}.execution-{execution.index}"), ".svg")
            with path.open("x", encoding="utf-8") as handle:  # never over an existing file
                handle.write(svg)
        except (ExportError, OSError) as error:
            notify(self.notify, str(error), severity="error", timeout=8)
            return
        notify(self.notify, f"saved {path}")
