"""The `/` search: op name, site or graph id."""
from __future__ import annotations

from textual.binding import Binding
from textual.widgets import Input


class SearchBar(Input):
    BINDINGS = [Binding("escape", "close", "Close search")]
    DEFAULT_CSS = """
    SearchBar { dock: bottom; display: none; }
    SearchBar.open { display: block; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(placeholder="search: op (aten::mm), site (train.py:31) or graph id; enter finds next",
                         **kwargs)

    def open(self) -> None:
        self.add_class("open")
        self.focus()

    def action_close(self) -> None:
        self.remove_class("open")
        self.screen.focus_next()
