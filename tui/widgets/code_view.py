"""A read-only, highlighted text view that renders only the lines on screen, so a
5,000-node IR scrolls as fast as a 5-line one."""
from __future__ import annotations

import re
import textwrap
from functools import lru_cache

from rich.segment import Segment
from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from lazyviz.tui.theme import palette

# (pattern, role): the role's style comes from the theme's palette when a line is drawn.
_IR_RULES = [
    (re.compile(r"%\d+(\.\d+)?"), "id"),
    (re.compile(r"\[[A-Za-z]+\[[^\]]*\](, [A-Za-z]+\[[^\]]*\])*\]"), "type"),
    (re.compile(r"\b[a-z_]+::[\w.]+"), "op"),
    (re.compile(r"\b[A-Za-z_]\w*(?==)"), "name"),
    (re.compile(r"ROOT=\d+"), "root"),
    (re.compile(r"NodeType=\S+"), "dim"),
    (re.compile(r"  # \S+$"), "note"),  # the line that built the node
]
_TORCHSCRIPT_RULES = [
    (re.compile(r"%[\w.]+"), "id"),
    (re.compile(r"\b(aten|prim)::\w+"), "op"),
    (re.compile(r"\b(Float|Double|Long|Int|Bool|Tensor)\([^)]*\)|\b(Tensor|int|float|bool)\b"), "type"),
    (re.compile(r"#.*$"), "note"),
]
_STACK_RULES = [
    (re.compile(r"^> .*"), "mark"),
    (re.compile(r"^ *\d+ \|.*"), "context"),
    (re.compile(r"^ *\d+ >.*"), "marked"),
]
_DIFF_RULES = [
    (re.compile(r"^! .*"), "origin"),
    (re.compile(r"^\+ .*"), "added"),
    (re.compile(r"^- .*"), "removed"),
    (re.compile(r"^~ .*"), "carried"),
    (re.compile(r"^#.*"), "title"),
]
# The line a view opens centred on: the stack's marked source line (the user's line that
# synced), which a long stack would otherwise push below the pane.
FOCUS = {"stack": re.compile(r"^ *\d+ > ")}
PROSE = frozenset({"diff", "stack"})  # languages whose `# ...` lines are sentences: wrapped
RULES = {"ir": _IR_RULES, "torchscript": _TORCHSCRIPT_RULES, "stack": _STACK_RULES, "diff": _DIFF_RULES,
         "plain": []}


class CodeView(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    CodeView { background: $surface; }
    """

    def __init__(self, language: str = "plain", placeholder: str = "", **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.language = language
        self.placeholder = placeholder
        self.lines: list[str] = [placeholder] if placeholder else []  # as shown: prose wrapped
        self._text = placeholder  # as given
        self._wrapped_at = 0
        self._width = max((len(line) for line in self.lines), default=0)
        self._highlight = lru_cache(maxsize=2048)(self._highlight_line)
        self.focus_line: int | None = None  # the line kept centred (FOCUS), if any

    def set_text(self, text: str, language: str | None = None) -> None:
        if language is not None:
            self.language = language
        self._text = text
        self._lay_out()
        self._centre()

    def _lay_out(self) -> None:
        """Split the text into the lines shown: prose (a `# ...` line of a diff or stack)
        wrapped at the pane's width with a hanging indent; code never (it scrolls)."""
        width = self.size.width - 2  # the vertical scrollbar
        self._wrapped_at = width
        lines = []
        for line in self._text.splitlines() or [""]:
            if width > 20 and len(line) > width and self.language in PROSE and line.startswith("#"):
                lines += textwrap.wrap(line, width, subsequent_indent="#   ", break_on_hyphens=False) or [line]
            else:
                lines.append(line)
        self.lines = lines
        self._width = max(len(line) for line in self.lines)
        self._highlight.cache_clear()
        self.virtual_size = Size(self._width + 1, len(self.lines))
        pattern = FOCUS.get(self.language)
        self.focus_line = next((i for i, line in enumerate(self.lines) if pattern.match(line)), None) if pattern else None
        self.refresh()

    def _centre(self) -> None:
        """The focus line in the middle of the pane (the top, when there is no focus line)."""
        if self.focus_line is None:
            self.scroll_home(animate=False)
        else:
            self.scroll_to(0, max(0, self.focus_line - self.size.height // 2), animate=False, immediate=True)

    def on_resize(self) -> None:
        if self.size.width - 2 != self._wrapped_at and self.language in PROSE:
            self._lay_out()
        if self.focus_line is not None:  # shown at last (a hidden tab has no height), or resized
            self._centre()

    def recolour(self) -> None:
        """Draw again in the theme's palette."""
        self._highlight.cache_clear()
        self.refresh()

    @property
    def text(self) -> str:
        """The text as given (not as wrapped on screen)."""
        return self._text

    def on_mount(self) -> None:
        self.virtual_size = Size(self._width + 1, len(self.lines))

    def _highlight_line(self, index: int) -> list[Segment]:
        text = Text(self.lines[index].expandtabs(4), no_wrap=True)
        styles = palette().code
        for pattern, role in RULES.get(self.language, []):
            for match in pattern.finditer(text.plain):
                text.stylize(styles[role], match.start(), match.end())
        return list(text.render(self.app.console))

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        base = self.rich_style
        if index >= len(self.lines):
            return Strip.blank(width, base)
        strip = Strip(self._highlight(index)).crop(scroll_x, scroll_x + width)
        return strip.extend_cell_length(width, base).apply_style(base)
