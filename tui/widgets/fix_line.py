"""One line under the findings strip: the fix for the finding highlighted there (the
worst, until the user moves), so the first screen says what to change, not only what
is wrong."""
from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from lazyviz.analysis.findings import Finding
from lazyviz.tui.theme import palette


class FixLine(Static):
    DEFAULT_CSS = """
    FixLine { height: 1; padding: 0 1; background: $boost; }
    FixLine.-empty { display: none; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)
        self.finding: Finding | None = None
        self.add_class("-empty")

    def show(self, finding: Finding | None) -> None:
        """Say the fix of this finding, or hide when there is none."""
        self.finding = finding
        self.set_class(finding is None or not finding.fix, "-empty")
        self.refresh()

    def render(self) -> Text:
        line = Text(no_wrap=True, overflow="ellipsis", end="")
        if self.finding is not None and self.finding.fix:
            line.append("fix: ", f"bold {palette().hit}")
            line.append(self.finding.fix)
            if self.size.width:  # zero until the first layout after it is shown
                line.truncate(self.size.width, overflow="ellipsis")
        return line
