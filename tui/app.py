"""The lazyviz terminal UI: the run header, the executions table, and tabs with the
selected execution's IR, backend code, diff, stack and counters, plus the run's
findings, step timing and the script's output."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Footer, Input, Static, TabbedContent, TabPane
from textual.css.query import NoMatches
from textual.worker import get_current_worker

from lazyviz.analysis import Analysis
from lazyviz.analysis.recompiles import explain_execution
from lazyviz.trace import Execution, RunInfo, Trace, TraceError
from tui.details import counters_text, diff_text, graphs_with, matches, stack_text
from tui.screens import HelpScreen
from tui.watcher import TraceUpdate, TraceWatcher
from tui.widgets.code_view import CodeView
from tui.widgets.executions import ExecutionList, header_text
from tui.widgets.findings import FindingsView
from tui.widgets.header import RunHeader
from tui.widgets.output import OutputView
from tui.widgets.search_bar import SearchBar
from tui.widgets.step_chart import StepChart

TABS = ["ir", "backend", "diff", "stack", "counters", "findings", "timing", "output", "ranks"]


class TraceUpdated(Message):
    def __init__(self, update: TraceUpdate, watcher: TraceWatcher) -> None:
        super().__init__()
        self.update = update
        self.watcher = watcher  # updates from a watcher replaced since (another rank) are dropped


class LazyvizApp(App[None]):
    CSS_PATH = "lazyviz.tcss"
    TITLE = "lazyviz"
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
        Binding("slash", "search", "Search"),
        Binding("n", "next_miss(1)", "Next miss"),
        Binding("N", "next_miss(-1)", "Prev miss"),
        Binding("f", "toggle_follow", "Follow"),
        Binding("s", "save_svg", "Save SVG"),
        Binding("left_square_bracket", "switch_rank(-1)", "Prev rank", show=False),
        Binding("right_square_bracket", "switch_rank(1)", "Next rank", show=False),
        Binding("enter", "focus_details", "Details", show=False),
        *[Binding(str(number), f"show_tab('{tab}')", tab, show=False) for number, tab in enumerate(TABS, 1)],
    ]

    def __init__(self, trace_path: Path, process: subprocess.Popen | None = None, output_path: Path | None = None,
                 poll_s: float = 0.25, ranks: dict[int, Path] | None = None) -> None:
        super().__init__()
        self.trace_path = Path(trace_path)
        self.process = process
        self.poll_s = poll_s
        self.ranks = ranks or {}  # a multi-process run: rank -> trace; [ and ] switch
        self.watcher = TraceWatcher(self.trace_path, process, output_path, poll_s)
        self._reset()

    def _reset(self) -> None:
        """Forget what was read: on start, and when switching to another rank's trace."""
        self.executions: list[Execution] = []
        self.ir_texts: dict[str, str] = {}
        self.run_info: RunInfo | None = None
        self.analysis: Analysis | None = None
        self.process_status: int | None = None
        self.started = time.monotonic()
        self.search_term = ""

    def compose(self) -> ComposeResult:
        yield RunHeader(id="header")
        with Vertical(id="executions-pane"):
            yield Static(id="columns")
            yield ExecutionList(id="executions")
        with TabbedContent(id="details"):
            with TabPane("IR", id="ir"):
                yield CodeView("ir", "select an execution", id="ir-view")
            with TabPane("Backend", id="backend"):
                yield CodeView("torchscript", id="backend-view")
            with TabPane("Diff", id="diff"):
                yield CodeView("diff", id="diff-view")
            with TabPane("Stack", id="stack"):
                yield CodeView("stack", id="stack-view")
            with TabPane("Counters", id="counters"):
                yield CodeView("plain", id="counters-view")
            with TabPane("Findings", id="findings"):
                with VerticalScroll():
                    yield FindingsView(id="findings-view")
            with TabPane("Timing", id="timing"):
                yield StepChart(id="timing-view")
            with TabPane("Output", id="output"):
                yield OutputView(id="output-view")
            with TabPane("Ranks", id="ranks"):
                yield CodeView("diff", "one process: no other ranks", id="ranks-view")
        yield SearchBar(id="search")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(ExecutionList).focus()
        self.refresh_header()
        self.set_interval(1.0, self.refresh_header)  # the elapsed clock; no data polling here
        self.watch_trace()
        if self.ranks:
            self.load_ranks()

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
        beside = Path(f"{self.trace_path}.out")
        self.watcher = TraceWatcher(self.trace_path, None, beside if beside.exists() else None, self.poll_s)
        self._reset()
        table = self.query_one(ExecutionList)
        table.rows, table.follow = [], True
        table.refresh()
        self.query_one(OutputView).clear()
        self.notify(f"rank {rank}: {self.trace_path.name}")
        self.watch_trace()

    @work(thread=True, group="ranks", exit_on_error=False, description="all ranks")
    def load_ranks(self) -> None:
        from lazyviz.analysis.ranks import find_divergence, step_graphs

        executions, ir_texts = {}, {}
        for rank, path in self.ranks.items():
            with Trace(path) as trace:
                executions[rank], ir_texts[rank] = trace.executions(), trace.ir_texts()
        per_rank = {rank: step_graphs(found) for rank, found in executions.items()}
        divergence = find_divergence(executions, ir_texts)
        lines = [f"# {len(self.ranks)} ranks; [ and ] show another rank's executions",
                 f"# {divergence.message() if divergence else 'every rank ran the same graphs at every step'}", ""]
        for step in sorted(set().union(*(steps.keys() for steps in per_rank.values()))):
            sequences = {rank: steps.get(step, ()) for rank, steps in per_rank.items()}
            mark = "!" if len(set(sequences.values())) > 1 else " "
            cells = "  ".join(f"rank {rank}: {' '.join(g[:8] for g in seq) or '-'}" for rank, seq in sequences.items())
            lines.append(f"{mark} step {step:4d}  {cells}")
        self.call_from_thread(self._show_texts, {"ranks-view": "\n".join(lines)})

    def on_resize(self) -> None:
        self.query_one("#columns", Static).update(header_text(self.size.width))

    # -- feeding -------------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="watch", exit_on_error=False, description="watch the trace")
    def watch_trace(self) -> None:
        worker = get_current_worker()
        watcher = self.watcher
        watcher.run(lambda update: self.post_message(TraceUpdated(update, watcher)), lambda: worker.is_cancelled)

    def on_trace_updated(self, message: TraceUpdated) -> None:
        if message.watcher is not self.watcher:
            return
        update = message.update
        if update.run is not None:
            self.run_info = update.run
        self.process_status = update.process_status
        self.ir_texts.update(update.ir_texts)
        if update.output:
            self.query_one(OutputView).write(update.output)
        if update.executions:
            self.executions += update.executions
            self.query_one(ExecutionList).add_executions(update.executions)
        if update.analysis is not None:
            self.analysis = update.analysis
            self.query_one(FindingsView).show(update.analysis.findings)
            self.query_one(StepChart).show(self.executions)
        if update.error and not self.executions:
            self.query_one("#ir-view", CodeView).set_text(f"cannot read {self.trace_path}: {update.error}")
        elif update.error:
            self.notify(f"stopped reading the trace: {update.error}", severity="error", timeout=30)
        self.refresh_header()

    def refresh_header(self) -> None:
        try:
            self._refresh_header()
        except NoMatches:  # a timer or message that arrives while the app closes
            pass

    def _refresh_header(self) -> None:
        run = self.run_info
        live = self.process is not None and self.process_status is None
        elapsed = time.monotonic() - self.started if live or run is None or run.elapsed_s is None else run.elapsed_s
        rank = next((f"rank {r} of {len(self.ranks)} · " for r, p in self.ranks.items() if p == self.trace_path), "")
        self.query_one(RunHeader).show(run, self.analysis.summary if self.analysis else None, elapsed,
                                       self.query_one(ExecutionList).follow, self.process_status,
                                       str(self.trace_path), rank)

    # -- the selected execution ---------------------------------------------------------
    @on(ExecutionList.Selected)
    def show_execution(self, message: ExecutionList.Selected) -> None:
        self.load_details(message.execution)

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
        # Snapshots: the UI thread only ever appends to these.
        executions, ir_texts = self.executions[:], dict(self.ir_texts)
        try:
            with Trace(self.trace_path) as trace:
                graph = trace.graph(execution.graph)
                stack = trace.stack(execution.stack_id)
        except TraceError as error:
            self.call_from_thread(self.notify, str(error), severity="error")
            return
        ir = graph.ir_text if graph and graph.ir_text else "no IR recorded for this graph (capture light)"
        backend = graph.backend_text if graph else ""
        if worker.is_cancelled:
            return
        recompile = explain_execution(executions, ir_texts, execution.index)
        old_ir = ir_texts.get(recompile.closest, "") if recompile and recompile.closest else ""
        texts = {
            "ir-view": (f"# execution {execution.index}: graph {execution.graph}, {execution.nodes} nodes, "
                        f"{execution.cache}\n{ir}"),
            "backend-view": backend or "no backend text",
            "diff-view": diff_text(execution, recompile, old_ir, ir_texts.get(execution.graph, "")),
            "stack-view": (f"# {execution.detail or execution.cause} at {execution.site}\n"
                           + stack_text(stack, execution.frame)),
            "counters-view": counters_text(execution),
        }
        if not worker.is_cancelled:
            self.call_from_thread(self._show_texts, texts)

    def _show_texts(self, texts: dict[str, str]) -> None:
        try:
            for view_id, text in texts.items():
                self.query_one(f"#{view_id}", CodeView).set_text(text)
        except NoMatches:  # the app is closing while a worker finished
            pass

    # -- actions ------------------------------------------------------------------------
    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_search(self) -> None:
        self.query_one(SearchBar).open()

    @on(Input.Submitted, "#search")
    def search(self, message: Input.Submitted) -> None:
        self.search_term = message.value
        table = self.query_one(ExecutionList)
        graphs = graphs_with(self.search_term, self.ir_texts)
        count = len(table.rows)
        for step in range(1, count + 1):
            index = (table.cursor + step) % count
            if matches(table.rows[index], self.search_term, graphs):
                table.select(index)
                return
        self.notify(f"no execution matches {self.search_term!r}", severity="warning")

    def action_next_miss(self, direction: int) -> None:
        table = self.query_one(ExecutionList)
        index = table.cursor + direction
        while 0 <= index < len(table.rows):
            if table.rows[index].is_miss:
                table.select(index)
                return
            index += direction
        self.notify("no more cache misses that way")

    def action_toggle_follow(self) -> None:
        table = self.query_one(ExecutionList)
        table.set_follow(not table.follow)

    def action_focus_details(self) -> None:
        tabs = self.query_one(TabbedContent)
        pane = tabs.get_pane(tabs.active)
        focusable = [w for w in pane.query("*") if w.can_focus]
        (focusable[0] if focusable else tabs).focus()

    def action_show_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def action_save_svg(self) -> None:
        table = self.query_one(ExecutionList)
        if 0 <= table.cursor < len(table.rows):
            self.save_svg(table.rows[table.cursor])

    @work(thread=True, group="svg", exit_on_error=False, description="save SVG")
    def save_svg(self, execution: Execution) -> None:
        from lazyviz.analysis.ir import IRParseError, parse_ir
        from lazyviz.export.graphviz import ExportError, render_svg, to_dot

        ir = self.ir_texts.get(execution.graph, "")
        if not ir:
            self.call_from_thread(self.notify, "no IR recorded for this graph (capture light)", severity="warning")
            return
        path = self.trace_path.with_name(f"{self.trace_path.name}.execution-{execution.index}.svg")
        try:
            title = f"execution {execution.index}, step {execution.step}: {execution.cause} at {execution.site}"
            path.write_text(render_svg(to_dot(parse_ir(ir), title)), encoding="utf-8")
        except (ExportError, IRParseError, OSError) as error:
            self.call_from_thread(self.notify, str(error), severity="error", timeout=8)
            return
        self.call_from_thread(self.notify, f"saved {path}")


def build_app(trace_path: Path, process: subprocess.Popen | None = None, output_path: Path | None = None,
              poll_s: float = 0.25, ranks: dict[int, Path] | None = None) -> LazyvizApp:
    """The one factory for the CLI and the tests. ranks: the traces of a multi-process
    run, by rank (trace_path is the one shown first)."""
    if output_path is None:
        beside = Path(f"{trace_path}.out")
        output_path = beside if beside.exists() else None
    return LazyvizApp(trace_path, process, output_path, poll_s, ranks)
