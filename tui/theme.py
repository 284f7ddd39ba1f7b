"""The UI's semantic colours, in one place, for dark and light backgrounds: the app picks
the palette of its theme (ctrl+p -> theme) and widgets read `palette()` when they draw.
Hex colours, not ANSI names: under Textual's default theme ANSI red and magenta both
render as rgb(244,0,95), so a miss and a fallback looked the same; and each is an exact
xterm-256 colour, so tmux without truecolor keeps them apart. The light palette's
colours are dark enough to read on white (yellow and bright green are not)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from rich.style import Style

from lazyviz.analysis.findings import KINDS


@dataclass(frozen=True)
class Palette:
    miss: str
    fallback: str
    sync: str  # a cause other than mark_step: item, print, cpu...
    hit: str
    muted: str
    info: str
    chart: str  # a cached step in the step chart
    # The detail views' highlighting: node ids, types, ops, attribute names, the roots, notes.
    code: dict[str, Style] = field(default_factory=dict)

    @cached_property
    def miss_style(self) -> Style:
        return Style(color=self.miss, bold=True)

    @cached_property
    def fallback_style(self) -> Style:
        return Style(color=self.fallback, bold=True)

    @cached_property
    def sync_style(self) -> Style:
        return Style(color=self.sync, bold=True)

    @cached_property
    def hit_style(self) -> Style:
        return Style(color=self.hit)

    @cached_property
    def muted_style(self) -> Style:
        return Style(color=self.muted)

    def severity(self, severity: str) -> str:
        return {"error": f"bold {self.miss}", "warning": f"bold {self.sync}", "info": self.info}.get(severity, "")

    def kind(self, kind: str) -> str:
        """A finding kind's colour, by the role its module declares (analysis.findings.KINDS)."""
        info = KINDS.get(kind)
        return str(getattr(self, info.colour)) if info is not None else ""


DARK = Palette(
    miss="#ff5f5f", fallback="#d787ff", sync="#ffd75f", hit="#5fd787", muted="#8a8a8a", info="#5fafd7", chart="#5fd7d7",
    code={"id": Style(color="cyan"), "type": Style(color="green"), "op": Style(color="bright_white", bold=True),
          "name": Style(color="magenta"), "root": Style(color="yellow", bold=True), "dim": Style(color="grey42"),
          "note": Style(color="grey62", italic=True), "mark": Style(color="yellow", bold=True),
          "context": Style(color="grey62"), "marked": Style(color="bright_white", bold=True),
          "removed": Style(color="red"), "origin": Style(color="red", bold=True), "added": Style(color="green"),
          "carried": Style(color="yellow"), "title": Style(color="bright_white", bold=True)},
)
LIGHT = Palette(
    miss="#d70000", fallback="#8700af", sync="#af5f00", hit="#008700", muted="#6c6c6c", info="#005fd7", chart="#0087af",
    code={"id": Style(color="#005f87"), "type": Style(color="#005f00"), "op": Style(bold=True),
          "name": Style(color="#870087"), "root": Style(color="#875f00", bold=True), "dim": Style(color="#808080"),
          "note": Style(color="#6c6c6c", italic=True), "mark": Style(color="#af5f00", bold=True),
          "context": Style(color="#6c6c6c"), "marked": Style(bold=True), "removed": Style(color="#d70000"),
          "origin": Style(color="#d70000", bold=True), "added": Style(color="#008700"),
          "carried": Style(color="#875f00"), "title": Style(bold=True)},
)

_current = [DARK]


def palette() -> Palette:
    """The palette of the app's theme."""
    return _current[0]


def use(dark: bool) -> bool:
    """Switch to the palette for a dark or light theme; True when it changed."""
    chosen = DARK if dark else LIGHT
    changed = _current[0] is not chosen
    _current[0] = chosen
    return changed
