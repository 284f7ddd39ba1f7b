"""The executions table: one row per execution, appended live, drawn line by line so a
20,000-row trace opens and scrolls without lag. Sortable by any column; the `why`
column says what the row's cause or cache miss was."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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
from tui.theme import FALLBACK, HIT, MISS, MUTED, OTHER_CAUSE


@dataclass(frozen=True)
class Column:
    title: str
    width: int  # 0: shares what is left with the other flexible columns
    align: str
    cell: Callable[[Execution], str]
    narrow: bool = True  # shown below WIDE columns too


WIDE = 100  # below this width the graph id and trace ms make room for site and why
COLUMNS = [
    Column("#", 1, ">", lambda e: str(e.index)),
    Column("step", 4, ">", lambda e: str(e.step)),
    Column("cause", 9, "<", lambda e: e.cause),
    Column("site", 0, "<", lambda e: ""),  # filled with the run's folder in mind
    Column("graph", 8, "<", lambda e: e.graph[:8], narrow=False),
    Column("nodes", 5, ">", lambda e: str(e.nodes)),
    Column("cache", 5, "<", lambda e: e.cache),
    Column("sync ms", 7, ">", lambda e: f"{e.sync_ms:.2f}"),
    Column("trace ms", 8, ">", lambda e: f"{e.trace_ms:.2f}", narrow=False),
    Column("why", 0, "<", lambda e: ""),
]
SITE_MAX = 40  # at 200 columns the site stops here and `why` gets the rest

# Sort orders the `o` key cycles through: (name, key, largest first).
SORTS: list[tuple[str, Callable[[Execution], object], bool]] = [
    ("#", lambda e: e.index, False),
    ("sync ms", lambda e: e.sync_ms, True),
    ("trace ms", lambda e: e.trace_ms, True),
    ("nodes", lambda e: e.nodes, True),
    ("cause", lambda e: (e.cause, e.index), False),
    ("site", lambda e: (e.site, e.index), False),
    ("cache", lambda e: (e.cache != "miss", e.index), False),
]

SCROLLBAR = 2  # the table keeps its scrollbar gutter, so rows and header line up


@dataclass(frozen=True)
class Layout:
    """Which columns show and how wide, for one table width and the largest numbers."""

    columns: tuple[Column, ...]
    widths: tuple[int, ...]

    @classmethod
    def make(cls, width: int, last_index: int = 0, last_step: int = 0, sort: str = "#") -> Layout:
        shown = tuple(c for c in COLUMNS if c.narrow or width >= WIDE)
        # Index and step never truncate: as wide as their largest number; the sorted
        # column has room for its arrow.
        digits = {"#": len(str(last_index)), "step": len(str(last_step))}
        if sort != "#":
            digits[sort] = len(sort) + 1
        widths = [max(c.width, len(c.title), digits.get(c.title, 0)) if c.width else 0 for c in shown]
        free = max(0, width - sum(widths) - (len(shown) - 1))
        site = max(12, min(SITE_MAX, free // 2))
        widths = [w or (site if c.title == "site" else max(8, free - site)) for c, w in zip(shown, widths)]
        return cls(shown, tuple(widths))

    def join(self, cells: list[str]) -> str:
        parts = []
        for column, width, cell in zip(self.columns, self.widths, cells):
            if len(cell) > width:
                # A site keeps its end (file name and line); other cells keep their start.
                cell = "…" + cell[-width + 1:] if column.title == "site" else cell[: width - 1] + "…"
            parts.append(f"{cell:{column.align}{width}}")
        return " ".join(parts)

    def header(self, sort: str = "#", descending: bool = False) -> str:
        arrow = "▼" if descending else "▲"
        return self.join([f"{c.title}{arrow}" if c.title == sort and sort != "#" else c.title
                          for c in self.columns])


def header_text(width: int, last_index: int = 0, last_step: int = 0, sort: str = "#",
                descending: bool = False) -> str:
    return Layout.make(width - SCROLLBAR, last_index, last_step, sort).header(sort, descending)


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

    class LayoutChanged(Message):
        """The columns moved (a wider number, another sort): the header line follows."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.rows: list[Execution] = []  # in the order they ran
        self.order: list[int] | None = None  # positions in rows, in display order; None: as they ran
        self.sort = 0  # index into SORTS
        self.follow = True
        self.cwd = ""  # the run's folder: sites show relative to it
        self.why: Callable[[Execution], str] = lambda execution: ""
        self._layout_key: tuple[int, int, int] = (0, 0, 0)

    # -- data ----------------------------------------------------------------------
    def row(self, position: int) -> Execution:
        """The execution shown at a display position."""
        return self.rows[self.order[position] if self.order is not None else position]

    @property
    def selected(self) -> Execution | None:
        return self.row(self.cursor) if 0 <= self.cursor < len(self.rows) else None

    def position_of(self, index: int) -> int:
        """The display position of execution number `index`."""
        row = index if index < len(self.rows) and self.rows[index].index == index else next(
            (i for i, e in enumerate(self.rows) if e.index == index), -1)
        return self.order.index(row) if self.order is not None and row >= 0 else row

    def add_executions(self, executions: list[Execution]) -> None:
        self.rows.extend(executions)
        if self.order is not None:
            self._sort()
        self.virtual_size = Size(self.size.width, len(self.rows))
        if self.follow:
            self.cursor = self.position_of(len(self.rows) - 1)
        self._check_layout()
        self.refresh()

    def set_follow(self, follow: bool) -> None:
        self.follow = follow
        if follow and self.rows:
            self.cursor = self.position_of(len(self.rows) - 1)
        self.post_message(self.FollowChanged(follow))

    def cycle_sort(self, to: str | None = None) -> str:
        """The next sort order (or the one named): the selected execution stays selected."""
        selected = self.selected
        self.sort = next(i for i, s in enumerate(SORTS) if s[0] == to) if to else (self.sort + 1) % len(SORTS)
        self._sort()
        if selected is not None:
            self.cursor = self.position_of(selected.index)
        if self.order is not None and self.follow:
            self.set_follow(False)  # the newest row is no longer at the end
        self._check_layout(force=True)
        self.refresh()
        return SORTS[self.sort][0]

    def _sort(self) -> None:
        name, key, descending = SORTS[self.sort]
        if name == "#":
            self.order = None
            return
        rows = self.rows
        self.order = sorted(range(len(rows)), key=lambda i: key(rows[i]), reverse=descending)

    def layout(self) -> Layout:
        last = self.rows[-1] if self.rows else None
        return Layout.make(self.scrollable_content_region.width, last.index if last else 0,
                           max((last.step if last else 0), 0), SORTS[self.sort][0])

    def header(self, width: int) -> str:
        last = self.rows[-1] if self.rows else None
        name, _, descending = SORTS[self.sort]
        return header_text(width, last.index if last else 0, last.step if last else 0, name, descending)

    def _check_layout(self, force: bool = False) -> None:
        last = self.rows[-1] if self.rows else None
        key = (len(str(last.index)) if last else 0, len(str(last.step)) if last else 0, self.sort)
        if force or key != self._layout_key:
            self._layout_key = key
            self.post_message(self.LayoutChanged())

    def watch_cursor(self, cursor: int) -> None:
        """Keep the cursor row on screen and tell the app which execution it is."""
        if not self.rows or cursor < 0:
            return
        # After the refresh, so the scroll range already covers rows just added.
        self.call_after_refresh(self._scroll_to_cursor)
        self.refresh()
        self.post_message(self.Selected(self.row(cursor)))

    def _scroll_to_cursor(self) -> None:
        height = max(1, self.scrollable_content_region.height)
        if self.cursor < self.scroll_y:
            self.scroll_to(y=self.cursor, animate=False, immediate=True)
        elif self.cursor >= self.scroll_y + height:
            self.scroll_to(y=self.cursor - height + 1, animate=False, immediate=True)

    def select(self, position: int) -> None:
        if 0 <= position < len(self.rows):
            newest = self.position_of(len(self.rows) - 1)
            if position != newest and self.follow:
                self.set_follow(False)
            self.cursor = position

    def select_execution(self, index: int) -> None:
        """Select execution number `index`, wherever the sort shows it, with two rows of
        context above it: where a jump lands does not depend on where the table was."""
        position = self.position_of(index)
        self.select(position)
        if position >= 0:
            self.call_after_refresh(lambda: self.scroll_to(y=max(0, position - 2), animate=False, immediate=True))

    def find(self, term: str, graphs: set[str]) -> bool:
        """Select the next execution after the cursor that the search term names (its
        site, graph, cause, detail, or an op of its IR: graphs), wrapping around."""
        count = len(self.rows)
        for step in range(1, count + 1):
            position = (self.cursor + step) % count
            if matches(self.row(position), term, graphs):
                self.select(position)
                return True
        return False

    def next_miss(self, direction: int) -> bool:
        position = self.cursor + direction
        while 0 <= position < len(self.rows):
            if self.row(position).is_miss:
                self.select(position)
                return True
            position += direction
        return False

    # -- keys and mouse --------------------------------------------------------------
    def action_move(self, delta: int) -> None:
        self.select(max(0, min(len(self.rows) - 1, self.cursor + delta)))

    def action_page(self, direction: int) -> None:
        self.action_move(direction * max(1, self.scrollable_content_region.height - 1))

    def action_jump(self, index: int) -> None:
        if index < 0 and self.order is None:
            self.set_follow(True)
        else:
            self.select(0 if index == 0 else len(self.rows) - 1)

    def on_click(self, event: events.Click) -> None:
        self.select(int(self.scroll_y) + event.y)

    # -- drawing ---------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        position = int(self.scroll_y) + y
        width = self.scrollable_content_region.width
        base = self.rich_style
        if position >= len(self.rows):
            return Strip.blank(width, base)
        execution = self.row(position)
        layout = self.layout()
        cells = [site_text(execution.frame, self.cwd, width) if c.title == "site" else
                 self.why(execution) if c.title == "why" else c.cell(execution)
                 for c, width in zip(layout.columns, layout.widths)]
        line = layout.join(cells)
        segments = []
        offset = 0
        cause_style = MUTED if execution.cause == "mark_step" else (
            FALLBACK if execution.cause == "fallback" else OTHER_CAUSE)
        for column, cell_width in zip(layout.columns, layout.widths):
            chunk = line[offset:offset + cell_width + 1]
            style = None
            if column.title == "cause":
                style = cause_style
            elif column.title == "cache":
                style = MISS if execution.is_miss else HIT
            elif column.title == "why" and chunk.strip():
                style = FALLBACK if execution.cause == "fallback" else MISS if execution.is_miss else OTHER_CAUSE
            segments.append(Segment(chunk, style))
            offset += cell_width + 1
        strip = Strip(segments).crop(0, width).extend_cell_length(width)
        selected = position == self.cursor
        style = base + Style(reverse=True, bold=True) if selected and self.has_focus else (
            base + Style(bgcolor="grey27") if selected else base)
        return strip.apply_style(style)

    def on_resize(self) -> None:
        self.virtual_size = Size(self.size.width, len(self.rows))
        # The strip above grew or the terminal shrank: the selected row stays on screen.
        self.call_after_refresh(self._scroll_to_cursor)

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()
