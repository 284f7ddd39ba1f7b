"""The help screen (keys, columns and tabs, sized to the terminal and scrollable) and
the question `q` asks while the script still runs."""
from __future__ import annotations

import io

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from lazyviz.tui.panels import TABS, tab_key
from lazyviz.tui.theme import palette

KEYS = [
    ("g", "go to the next finding: select its execution and open what explains it "
          "(or tab to the strip above the table and press enter)"),
    ("↑ ↓ PgUp PgDn Home End", "move in the executions table (mouse works too)"),
    ("enter", "focus the details of the selected execution; escape comes back"),
    ("n / N", "next / previous cache miss"),
    ("o / O", "sort by the next column on screen / the other way round (or click a heading)"),
    ("/", "search: op name (aten::mm), site (train.py:31) or graph id; enter again finds the next"),
    ("s", "save the selected execution's graph as SVG beside the trace"),
    ("r", "IR and backend text as recorded, or tidied"),
    ("f", "follow the newest execution on/off (while the script runs)"),
    ("1..9, 0", "show a tab (below)"),
    ("[ / ]", "a multi-process run (lazyviz view traces/): previous / next rank"),
    ("ctrl+p", "the command palette: every action above, by name"),
    ("? or F1", "this help; escape, q or ? closes it"),
    ("q", "quit; while the script runs, asks: stop it (y), leave it running and traced (d), or stay (n)"),
    ("ctrl+c", "quit at once; a running script gets Ctrl-C, as untraced (the trace is kept)"),
]

COLUMNS = [
    ("#, step", "the execution's number, and the mark_step() steps completed before it"),
    ("cause", "what forced the execution: mark_step, or a sync in your code (item, print, cpu, "
              "bool, fallback...)"),
    ("site", "your line that forced it"),
    ("graph, nodes", "the graph's id (its hash) and size"),
    ("cache", "miss: compiled; hit: the compiled graph was reused"),
    ("sync ms", "lowering + compile + run; trace ms: Python building the graph before it"),
    ("why", "the op that fell back, the call that synced, and for a miss what changed "
            "since the closest earlier graph (shape 16->24, +52 ops, aliasing, new graph)"),
]


def _pairs(rows: list[tuple[str, str]], key_style: str) -> Table:
    # Two columns: a long description wraps under itself, not under the key.
    table = Table.grid(padding=(0, 2))
    table.add_column(style=key_style, no_wrap=True)
    table.add_column()
    for key, about in rows:
        table.add_row(key, about)
    return table


def help_renderable() -> Group:
    colours = Text.assemble(
        "Colours: ", ("miss", f"bold {palette().miss}"), " compiled, ", ("hit", palette().hit), " reused, ",
        ("fallback", f"bold {palette().fallback}"), " an op ran on the CPU, ",
        ("item/print/...", f"bold {palette().sync}"), " a sync outside mark_step.")
    tabs = [(f"{tab_key(n)}  {tab.title}", tab.about) for n, tab in enumerate(TABS)]
    return Group(
        Text("lazyviz keys", style="bold"), _pairs(KEYS, "bold"), Text(""),
        Text("Columns", style="bold"), _pairs(COLUMNS, "bold"), Text(""), colours, Text(""),
        Text("Tabs (the row picks IR, Diff or Stack, whichever explains it; other tabs stay put)",
             style="bold"),
        _pairs(tabs, "bold"), Text(""),
        Text("escape, q or ? closes this help; pgup/pgdn scroll it", style=palette().muted),
    )


def help_text() -> str:
    """The help as plain text (tests, and the width it needs)."""
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(help_renderable())
    return console.export_text()


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static(help_renderable())

    def on_mount(self) -> None:
        self.query_one("#help").focus()  # so pgup/pgdn scroll it


class QuitScreen(ModalScreen[str | None]):
    """`q` while the script runs: stopping a training job is not what a quit key should
    do unasked. Answers "stop", "detach" (leave the UI, trace to the end) or None."""

    BINDINGS = [
        Binding("y", "dismiss('stop')", "Stop it"),
        Binding("d", "dismiss('detach')", "Let it finish"),
        Binding("n,escape,q", "dismiss(None)", "Cancel"),
    ]

    def compose(self) -> ComposeResult:
        text = Text.assemble(
            ("The script is still running.\n\n", "bold"),
            ("  y ", "bold"), "stop it (it gets Ctrl-C; the trace keeps what it recorded)\n",
            ("  d ", "bold"), "leave the UI and let it finish, traced: the summary prints when it ends\n",
            ("  n ", "bold"), "cancel",
        )
        yield Static(text, id="quit-question")
