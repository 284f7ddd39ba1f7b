"""The script's own stdout and stderr, as it writes them."""
from __future__ import annotations

from textual.widgets import Log


class OutputView(Log):
    DEFAULT_CSS = """
    OutputView { background: $surface; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(highlight=False, max_lines=50_000, **kwargs)
