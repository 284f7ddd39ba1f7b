"""The executions table: one row per execution, appended live, drawn line by line so a
20,000-row trace opens and scrolls without lag."""
from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from lazyviz.present import site_text
from lazyviz.trace.model import Execution
from tui.details import matches

# (title, width or 0 for the flexible column, align)
COLUMNS = [("#", 5, ">"), ("step", 4, ">"), ("cause", 9, "<"), ("site", 0, "<"), ("graph", 8, "<"),
           ("nodes", 5, ">"), ("cache", 5, "<"), ("sync ms", 7, ">"), ("trace ms", 8, ">")]

CAUSE_STYLES = {"mark_step": Style(color="grey70"), "fallback": Style(color="magenta", bold=True)}
OTHER_CAUSE = Style(color="yellow", bold=True)
MISS = Style(color="red", bold=True)
HIT = Style(color="green")


SCROLLBAR = 2  # the table keeps its scrollbar gutter, so rows and header line up


def header_text(width: int) -> str:
    return _join([title for title, _, _ in COLUMNS], width - SCROLLBAR)


def _widths(width: int) -> list[int]:
    fixed = sum(w for _, w, _ in COLUMNS) + len(COLUMNS) - 1
    return [w or max(8, width - fixed) for _, w, _ in COLUMNS]


def _join(cells: list[str], width: int) -> str:
    parts = []
    for (title, _, align), cell_width, cell in zip(COLUMNS, _widths(width), cells):
        if len(cell) > cell_width:
            # A site keeps its end (file name and line); other cells keep their start.
            cell = "…" + cell[-cell_width + 1:] if title == "site" else cell[: cell_width - 1] + "…"
        parts.append(f"{cell:{align}{cell_width}}")
    return " ".join(parts)


class ExecutionList(ScrollView, can_focus=True):
    BINDINGS = [
        Binding("up,k", "move(-1)", "Up", show=False),
        Binding("down,j", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "jump(0)", "First", show=False),
        Binding("end", "jump(-1)", "Last", show=False),
    ]
    DEFAULT_CSS = """
    ExecutionList { background: $surface; scrollbar-gutter: stable; }
    """

    cursor: reactive[int] = reactive(-1, always_update=True)

    class Selected(Message):
        """The cursor moved onto an execution."""

        def __init__(self, execution: Execution) -> None:
            super().__init__()
            self.execution = execution

    class FollowChanged(Message):
        def __init__(self, follow: bool) -> None:
            super().__init__()
            self.follow = follow

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.rows: list[Execution] = []
        self.follow = True
        self.cwd = ""  # the run's folder: sites show relative to it

    # -- data ----------------------------------------------------------------------
    def add_executions(self, executions: list[Execution]) -> None:
        self.rows.extend(executions)
        self.virtual_size = Size(self.size.width, len(self.rows))
        if self.follow:
            self.cursor = len(self.rows) - 1
        self.refresh()

    def set_follow(self, follow: bool) -> None:
        self.follow = follow
        if follow and self.rows:
            self.cursor = len(self.rows) - 1
        self.post_message(self.FollowChanged(follow))

    def watch_cursor(self, cursor: int) -> None:
        """Keep the cursor row on screen and tell the app which execution it is."""
        if not self.rows or cursor < 0:
            return
        # After the refresh, so the scroll range already covers rows just added.
        self.call_after_refresh(self._scroll_to_cursor)
        self.refresh()
        self.post_message(self.Selected(self.rows[cursor]))

    def _scroll_to_cursor(self) -> None:
        height = max(1, self.scrollable_content_region.height)
        if self.cursor < self.scroll_y:
            self.scroll_to(y=self.cursor, animate=False, immediate=True)
        elif self.cursor >= self.scroll_y + height:
            self.scroll_to(y=self.cursor - height + 1, animate=False, immediate=True)

    def select(self, index: int) -> None:
        if 0 <= index < len(self.rows):
            if index != len(self.rows) - 1 and self.follow:
                self.set_follow(False)
            self.cursor = index

    def find(self, term: str, graphs: set[str]) -> bool:
        """Select the next execution after the cursor that the search term names (its
        site, graph, cause, detail, or an op of its IR: graphs), wrapping around."""
        count = len(self.rows)
        for step in range(1, count + 1):
            index = (self.cursor + step) % count
            if matches(self.rows[index], term, graphs):
                self.select(index)
                return True
        return False

    def next_miss(self, direction: int) -> bool:
        index = self.cursor + direction
        while 0 <= index < len(self.rows):
            if self.rows[index].is_miss:
                self.select(index)
                return True
            index += direction
        return False

    # -- keys and mouse --------------------------------------------------------------
    def action_move(self, delta: int) -> None:
        self.select(max(0, min(len(self.rows) - 1, self.cursor + delta)))

    def action_page(self, direction: int) -> None:
        self.action_move(direction * max(1, self.scrollable_content_region.height - 1))

    def action_jump(self, index: int) -> None:
        if index < 0:
            self.set_follow(True)
        else:
            self.select(0)

    def on_click(self, event: events.Click) -> None:
        self.select(int(self.scroll_y) + event.y)

    # -- drawing ---------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        index = int(self.scroll_y) + y
        width = self.scrollable_content_region.width
        base = self.rich_style
        if index >= len(self.rows):
            return Strip.blank(width, base)
        execution = self.rows[index]
        cells = [
            str(execution.index), str(execution.step), execution.cause, site_text(execution.frame, self.cwd),
            execution.graph[:8], str(execution.nodes), execution.cache,
            f"{execution.sync_ms:.2f}", f"{execution.trace_ms:.2f}",
        ]
        line = _join(cells, width)
        segments = []
        offset = 0
        cause_style = CAUSE_STYLES.get(execution.cause, OTHER_CAUSE)
        for (title, _, _), cell_width in zip(COLUMNS, _widths(width)):
            chunk = line[offset:offset + cell_width + 1]
            style = None
            if title == "cause":
                style = cause_style
            elif title == "cache":
                style = MISS if execution.is_miss else HIT
            segments.append(Segment(chunk, style))
            offset += cell_width + 1
        strip = Strip(segments).crop(0, width).extend_cell_length(width)
        selected = index == self.cursor
        style = base + Style(reverse=True, bold=True) if selected and self.has_focus else (
            base + Style(bgcolor="grey27") if selected else base)
        return strip.apply_style(style)

    def on_resize(self) -> None:
        self.virtual_size = Size(self.size.width, len(self.rows))

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()
