"""The help screen."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = """[b]lazyviz keys[/b]

  up/down, pgup/pgdn, home/end   move in the executions table (mouse works too)
  enter        focus the details of the selected execution (tab/shift+tab move between panes)
  /            search: op name (aten::mm), site (train.py:31) or graph id; enter again finds the next
  n / N        next / previous cache miss
  f            follow the newest execution on/off
  s            save the selected execution's graph as SVG beside the trace
  1..9, 0      show a tab (below)
  [ / ]        a multi-process run (lazyviz view traces/): previous / next rank
  ?            this help
  q            quit (a running script is stopped; the trace is kept)

Rows: [red]miss[/red] = compiled, [green]hit[/green] = cache hit; causes other than mark_step
stand out in [yellow]yellow[/yellow] (fallbacks in [magenta]magenta[/magenta]).
"""


def help_text() -> str:
    from tui.panels import TABS, tab_key

    tabs = "\n".join(f"  {tab_key(n)}  {tab.title:<10} {tab.about}" for n, tab in enumerate(TABS))
    return KEYS + "\n[b]Tabs[/b]\n\n" + tabs + "\n"


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with Vertical(id="help"):
            yield Static(help_text())
