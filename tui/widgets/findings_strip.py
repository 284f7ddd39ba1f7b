"""The findings strip above the table: the run's problems, worst first, one line each,
live. Choosing one tells the app to jump to its execution and explain it."""
from __future__ import annotations

from rich.text import Text
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from lazyviz.analysis.findings import Finding
from lazyviz.present import CLEAN_RUN, KIND_LABELS, finding_headline
from lazyviz.tui.theme import palette

MARKS = {"error": "✖", "warning": "▲", "info": "•"}
STILL_LOOKING = "… still looking for recompiles and loops unrolled into one graph"


class FindingsStrip(OptionList):
    DEFAULT_CSS = """
    FindingsStrip { height: auto; max-height: 4; border: none; padding: 0 1; background: $boost; }
    FindingsStrip:focus { background-tint: $foreground 5%; }
    FindingsStrip.compact { max-height: 1; }
    FindingsStrip.compact:focus { max-height: 6; }
    """

    class Chosen(Message):
        """A finding was chosen (enter or click): show its execution."""

        def __init__(self, finding: Finding) -> None:
            super().__init__()
            self.finding = finding

    def __init__(self, **kwargs: object) -> None:
        super().__init__(Option(Text("looking for problems…", palette().muted), disabled=True), **kwargs)
        self.findings: list[Finding] = []
        self._shown: list[tuple[str, str]] = []
        self._width = 0
        self._args: tuple[list[Finding], str, bool, bool] | None = None

    def on_resize(self) -> None:
        if self._args is not None:
            self.show(*self._args)

    def redraw(self) -> None:
        """The same findings drawn again (in another theme's colours)."""
        if self._args is not None:
            self._shown = []
            self.show(*self._args)

    def show(self, findings: list[Finding], cwd: str = "", finished: bool = False, complete: bool = True) -> None:
        """Replace the lines, keeping the highlighted one where it was. complete: False
        for a quick pass's findings, the rest still to come (said on a last line)."""
        width = (self.scrollable_content_region.width or self.app.size.width) - 4
        lines = [(f.kind, finding_headline(f, cwd)) for f in findings] + ([] if complete else [("", "…")])
        if lines == self._shown and findings and width == self._width:
            self.findings = findings
            return
        highlighted = self.highlighted
        self.findings, self._shown, self._width = findings, lines, width
        self._args = (findings, cwd, finished, complete)
        if not complete and not findings:
            self.set_options([Option(Text(STILL_LOOKING, palette().muted), disabled=True)])
            return
        if not findings:
            clean = f"clean: {CLEAN_RUN}" if finished else "no problems so far"
            line = Text("✓ " + clean, palette().hit, no_wrap=True, end="")
            line.truncate(max(10, width), overflow="ellipsis")
            self.set_options([Option(line, disabled=True)])
            return
        options = []
        for number, (finding, (_, headline)) in enumerate(zip(findings, lines), 1):
            line = Text(no_wrap=True, overflow="ellipsis", end="")
            if len(findings) > 1:
                line.append(f"{number}/{len(findings)} ", palette().muted)
            line.append(f"{MARKS.get(finding.severity, '•')} ", palette().severity(finding.severity))
            line.append(KIND_LABELS.get(finding.kind, finding.kind), palette().kind(finding.kind))
            line.append(f"  {headline}")
            line.truncate(max(10, width), overflow="ellipsis")  # one line each: the option list would wrap
            options.append(Option(line))
        if not complete:
            options.append(Option(Text(STILL_LOOKING, palette().muted, no_wrap=True, overflow="ellipsis"), disabled=True))
        self.set_options(options)
        if highlighted is not None and highlighted < len(options):
            self.highlighted = highlighted

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if 0 <= event.option_index < len(self.findings):
            self.post_message(self.Chosen(self.findings[event.option_index]))
