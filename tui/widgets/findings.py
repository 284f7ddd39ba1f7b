"""What the trace so far says to fix: findings from lazyviz.analysis, worst first."""
from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from lazyviz.analysis.findings import Finding
from lazyviz.present import CLEAN_RUN, site_text
from lazyviz.tui.theme import palette


class FindingsView(Static):
    DEFAULT_CSS = """
    FindingsView { padding: 0 1; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__("no findings yet", **kwargs)

    def show(self, findings: list[Finding], cwd: str = "") -> None:
        if not findings:
            self.update(Text(f"no findings: {CLEAN_RUN}", palette().hit))
            return
        text = Text()
        for finding in findings:
            text.append(f"{finding.severity:<8}", palette().severity(finding.severity))
            text.append(f"{finding.kind}  ", "bold")
            if finding.frame:
                text.append(site_text(finding.frame, cwd), palette().info)
            text.append(f"\n  {finding.message}\n")
            if finding.fix:
                text.append(f"  fix: {finding.fix}\n", palette().hit)
        self.update(text)
