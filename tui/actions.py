"""The app's actions by key and by command palette: help, search, the next miss or
finding, sorting, raw text, tabs, saving a graph as SVG, and quitting (asked first while
the script runs). Handlers decorated with @on stay in app.py: Textual collects them from
the app's own classes only."""
from __future__ import annotations

import textwrap
from collections.abc import Iterable

from textual import work
from textual.app import SystemCommand
from textual.screen import Screen
from textual.widgets import TabbedContent

from lazyviz.export.graphviz import ExportError, execution_dot, render_svg
from lazyviz.present import finding_headline
from lazyviz.trace import Execution
from lazyviz.trace.files import new_file
from lazyviz.tui.panels import TABS
from lazyviz.tui.screens import HelpScreen, QuitScreen
from lazyviz.tui.widgets.executions import SORTS, ExecutionList
from lazyviz.tui.widgets.findings_strip import FindingsStrip
from lazyviz.tui.widgets.search_bar import SearchBar


class AppActions:
    """Part of LazyvizApp (tui/app.py): its state is set up there."""

    # -- actions ------------------------------------------------------------------------
    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_search(self) -> None:
        self.query_one(SearchBar).open()

    def action_next_miss(self, direction: int) -> None:
        if not self.query_one(ExecutionList).next_miss(direction):
            self.notify("no more cache misses that way")

    def action_ask_quit(self) -> None:
        """Quit; while the script still runs, ask first: stop it, let it finish, or stay."""
        running = self.process is not None and self.process.poll() is None and not self._ended()
        if not running:
            self.exit()
            return

        def answered(answer: str | None) -> None:
            if answer == "stop":
                self.exit()
            elif answer == "detach":
                self.exit("detach")

        self.push_screen(QuitScreen(), answered)

    def action_toggle_follow(self) -> None:
        table = self.query_one(ExecutionList)
        if self._ended() and not table.follow:
            # Nothing more will come: go to the last execution, follow nothing.
            table.go_to_newest()
            self.notify("the run has ended: at its last execution (f follows new rows while a script runs)")
            return
        table.set_follow(not table.follow)

    def action_next_finding(self) -> None:
        findings = self.latest.findings if self.latest else []
        if not findings:
            self.notify("no findings" + ("" if self.latest else " yet"))
            return
        self.finding_cursor = (self.finding_cursor + 1) % len(findings)
        strip = self.query_one(FindingsStrip)
        strip.highlighted = self.finding_cursor
        self.go_to_finding(findings[self.finding_cursor])

    def action_sort(self, to: str | None = None) -> None:
        table = self.query_one(ExecutionList)
        name = table.cycle_sort(to)
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

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Keys that do nothing now leave the footer."""
        if action == "next_miss":
            return self.counts.misses > 0
        if action == "next_finding":
            return bool(self.latest and self.latest.findings)
        if action == "switch_rank":
            return len(self.ranks) > 1
        return True

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The command palette (ctrl+p): lazyviz's own actions first."""
        for number, finding in enumerate(self.latest.findings if self.latest else [], 1):
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
        yield from super().get_system_commands(screen)

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

    @work(thread=True, group="svg", exit_on_error=False, description="save SVG")
    def save_svg(self, execution: Execution) -> None:
        ir = self.ir_texts.get(execution.graph, "")
        if not ir:
            self.call_from_thread(self.notify, "no IR recorded for this graph (capture light)", severity="warning")
            return
        try:
            svg = render_svg(execution_dot(self.ir_graphs.parsed(execution.graph), execution))
            path = new_file(self.trace_path.with_name(f"{self.trace_path.name}.execution-{execution.index}"), ".svg")
            with path.open("x", encoding="utf-8") as handle:  # never over an existing file
                handle.write(svg)
        except (ExportError, OSError) as error:
            self.call_from_thread(self.notify, str(error), severity="error", timeout=8)
            return
        self.call_from_thread(self.notify, f"saved {path}")
