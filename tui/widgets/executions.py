"""The executions table: one row per execution, appended live. It draws from the
watcher's ExecutionTable (columns, a few bytes a row) line by line, building only the
rows on screen, so a million-row trace opens, scrolls and sorts without holding a
million objects. Sortable by any column; the `why` column says what the row's cause or
cache miss was."""
from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import chain

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from lazyviz.present import site_text
from lazyviz.trace.model import Execution
from lazyviz.trace.table import ExecutionTable, Kind, Prefix
from lazyviz.tui.details import matches
from lazyviz.tui.theme import palette

SORTED_HEADING = Style(reverse=True)  # the heading of the column the rows are sorted by


@dataclass(frozen=True)
class Column:
    title: str
    width: int  # 0: shares what is left with the other flexible columns
    align: str
    cell: Callable[[Execution], str]
    narrow: bool = True  # shown below WIDE columns too


def _ms(value: float) -> str:
    """A time in the column's 7 characters: ms to two decimals while they fit, whole
    seconds' tenths from 10 s ("10.9 s"), never cut."""
    if value < 1000:
        return f"{value:.2f}"
    if value < 10_000:
        return f"{value:.1f}"
    seconds = value / 1000
    return f"{seconds:.1f} s" if seconds < 1000 else f"{seconds:.0f} s"


WIDE = 100  # below this width the graph id and trace ms make room for site and why
COLUMNS = [
    Column("#", 1, ">", lambda e: str(e.index)),
    Column("step", 4, ">", lambda e: str(e.step)),
    Column("cause", 9, "<", lambda e: e.cause),
    Column("site", 0, "<", lambda e: ""),  # filled with the run's folder in mind
    Column("graph", 8, "<", lambda e: e.graph[:8], narrow=False),
    Column("nodes", 5, ">", lambda e: str(e.nodes)),
    # "load": not compiled, loaded from PyTorch/XLA's persistent compile cache.
    Column("cache", 5, "<", lambda e: "load" if e.persistent == "loaded" else e.cache),
    Column("sync ms", 7, ">", lambda e: _ms(e.sync_ms)),
    Column("trace ms", 8, ">", lambda e: _ms(e.trace_ms), narrow=False),
    Column("why", 0, "<", lambda e: ""),
]
SITE_MAX = 40  # at 200 columns the site stops here and `why` gets the rest
WHY_MIN = 20  # what `why` keeps when the site column widens for a long file name ("shape 16->24 at :28")


def _cut_site(site: str, width: int) -> str:
    """A site too long for its column: the folder went already (site_text); the file
    name loses its middle, never its start, extension or line (train_lo…model.py:30)."""
    name, colon, line = site.rpartition(":")
    if not colon or width < len(line) + 4:
        return "…" + site[-width + 1:]
    keep = width - len(line) - 2  # the colon and the ellipsis
    return f"{name[:keep // 2]}…{name[len(name) - (keep - keep // 2):]}:{line}"


def by_kind(value: Callable[[Kind], object]) -> Callable[[ExecutionTable], Callable[[int], object]]:
    """A sort key over a table's positions from what the row's kind holds."""
    def key(table: ExecutionTable) -> Callable[[int], object]:
        values, kind = [value(k) for k in table.kinds], table.kind
        return lambda position: values[kind[position]]
    return key


# Sort orders the `o` key cycles through: (name, key over a table's positions, largest
# first). Sorts are stable over positions in run order, so ties stay in run order.
SORTS: list[tuple[str, Callable[[ExecutionTable], Callable[[int], object]] | None, bool]] = [
    ("#", None, False),
    ("sync ms", lambda table: table.sync_ms.__getitem__, True),
    ("trace ms", lambda table: table.trace_ms.__getitem__, True),
    ("nodes", by_kind(lambda kind: kind.nodes), True),
    ("cause", by_kind(lambda kind: kind.cause), False),
    ("site", by_kind(lambda kind: kind.site), False),
    ("cache", by_kind(lambda kind: kind.cache != "miss"), False),
]

SCROLLBAR = 2  # the table keeps its scrollbar gutter, so rows and header line up


@dataclass(frozen=True)
class Layout:
    """Which columns show and how wide, for one table width and the largest numbers."""

    columns: tuple[Column, ...]
    widths: tuple[int, ...]

    @classmethod
    def make(cls, width: int, last_index: int = 0, last_step: int = 0, site_need: int = 0) -> Layout:
        """site_need: the longest site as `file.py:line` (no folder): the site column
        takes that much from `why` where it can, so no file name is cut."""
        shown = tuple(c for c in COLUMNS if c.narrow or width >= WIDE)
        # Index and step never truncate: as wide as their largest number.
        digits = {"#": len(str(last_index)), "step": len(str(last_step))}
        widths = [max(c.width, len(c.title), digits.get(c.title, 0)) if c.width else 0 for c in shown]
        free = max(0, width - sum(widths) - (len(shown) - 1))
        site = max(12, min(SITE_MAX, free // 2))
        if site_need > site:
            site = max(site, min(site_need, SITE_MAX, free - WHY_MIN))
        widths = [w or (site if c.title == "site" else max(8, free - site)) for c, w in zip(shown, widths)]
        return cls(shown, tuple(widths))

    def join(self, cells: list[str]) -> str:
        parts = []
        for column, width, cell in zip(self.columns, self.widths, cells):
            if len(cell) > width:
                cell = _cut_site(cell, width) if column.title == "site" else cell[: width - 1] + "…"
            parts.append(f"{cell:{column.align}{width}}")
        return " ".join(parts)

    def header(self, sort: str = "#", descending: bool = False) -> Text:
        """The column titles; the sorted one highlighted, its arrow in the space before
        it (so no width moves when the sort changes)."""
        text = Text(self.join([c.title for c in self.columns]), no_wrap=True, end="")
        if sort == "#" and not descending:
            return text
        start = 0
        for column, width in zip(self.columns, self.widths):
            if column.title == sort:
                text.stylize(SORTED_HEADING, start, start + width)
                if start:
                    text = text[:start - 1] + Text("▼" if descending else "▲", SORTED_HEADING) + text[start:]
                break
            start += width + 1
        return text

    def column_at(self, x: int) -> str | None:
        """The title of the column at x (a click on the heading), None between columns."""
        start = 0
        for column, width in zip(self.columns, self.widths):
            if start <= x < start + width:
                return column.title
            start += width + 1
        return None


def header_text(width: int, last_index: int = 0, last_step: int = 0, sort: str = "#",
                descending: bool = False, site_need: int = 0) -> Text:
    return Layout.make(width - SCROLLBAR, last_index, last_step, site_need).header(sort, descending)


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
    ExecutionList { background: $surface; scrollbar-gutter: stable; overflow-x: hidden; }
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
        self.table = ExecutionTable.empty()  # the watcher's: it grows on the watcher's thread
        self.count = 0  # rows of the table shown: those the last update said were whole
        self.order: list[int] | None = None  # positions in the table, in display order; None: as they ran
        self.sort = 0  # index into SORTS
        self.reversed = False  # the sort the other way round (O)
        self.follow = True
        self.cwd = ""  # the run's folder: sites show relative to it
        self._site_width, self._sites_seen = 0, 0  # the longest file.py:line, over the kinds seen
        self.why: Callable[[Execution], str] = lambda execution: ""
        # A miss that is expected: a site's first graph, or a recompile in the warm-up steps.
        self.expected_miss: Callable[[Execution], bool] = lambda execution: False
        self._layout_key: tuple[int, int, int] = (0, 0, 0)

    # -- data ----------------------------------------------------------------------
    @property
    def rows(self) -> Prefix:
        """The executions shown, in the order they ran."""
        return Prefix(self.table, self.count)

    def row(self, position: int) -> Execution:
        """The execution shown at a display position."""
        return self.table[self.order[position] if self.order is not None else position]

    @property
    def selected(self) -> Execution | None:
        return self.row(self.cursor) if 0 <= self.cursor < self.count else None

    def position_of(self, index: int) -> int:
        """The display position of execution number `index` (-1: not shown)."""
        indices = self.table.index
        row = bisect.bisect_left(indices, index, 0, self.count)
        if row == self.count or indices[row] != index:
            return -1
        return self.order.index(row) if self.order is not None else row

    def _newest(self) -> int:
        """The display position of the newest row."""
        return self.count - 1 if self.order is None else self.order.index(self.count - 1)

    def show_rows(self, table: ExecutionTable, count: int) -> None:
        """Show the first `count` rows of `table` (the same table, grown, or another rank's)."""
        if table is not self.table:
            self.table, self.count, self.order, self.follow = table, 0, None, True
            self._site_width, self._sites_seen = 0, 0
            self.cursor = -1
        start, self.count = self.count, count
        if self.order is not None:
            self._sort(start)
        self.virtual_size = Size(self.size.width, count)
        if self.follow and count:
            self.cursor = self._newest()
        self._check_layout()
        self.refresh()

    def go_to_newest(self) -> None:
        if self.count:
            self.cursor = self._newest()

    def set_follow(self, follow: bool) -> None:
        self.follow = follow
        if follow and self.count:
            self.cursor = self._newest()
        self.post_message(self.FollowChanged(follow))

    def cycle_sort(self, to: str | None = None, reverse: bool = False) -> str:
        """The next sort order among the columns on screen (or the one named; reverse:
        the current one the other way round): the selected execution stays selected."""
        selected = self.selected
        if reverse:
            self.reversed = not self.reversed
        else:
            shown = {c.title for c in self.layout().columns}
            offered = [i for i, s in enumerate(SORTS) if s[0] in shown]
            self.sort = next(i for i, s in enumerate(SORTS) if s[0] == to) if to else \
                next((i for i in offered if i > self.sort), offered[0])
            self.reversed = False
        self._sort()
        if selected is not None:
            self.cursor = self.position_of(selected.index)
        if self.order is not None and self.follow:
            self.set_follow(False)  # the newest row is no longer at the end
        self._check_layout(force=True)
        self.refresh()
        return SORTS[self.sort][0]

    @property
    def descending(self) -> bool:
        return SORTS[self.sort][2] != self.reversed

    def _sort(self, start: int = 0) -> None:
        """Sort the rows shown; from `start` on, rows just added go in among those sorted
        (timsort merges the two sorted runs: a live million-row table stays cheap)."""
        _, make_key, _ = SORTS[self.sort]
        descending = self.descending
        if make_key is None:  # the order they ran in, or newest first
            self.order = list(range(self.count - 1, -1, -1)) if self.reversed else None
            return
        key = make_key(self.table)
        if start and self.order is not None:
            self.order.extend(range(start, self.count))
            self.order.sort(key=key, reverse=descending)
        else:
            self.order = sorted(range(self.count), key=key, reverse=descending)

    def _last(self) -> tuple[int, int]:
        """The newest row's index and step (0, 0 before any): the widest numbers."""
        if not self.count:
            return 0, 0
        return self.table.index[self.count - 1], max(self.table.step[self.count - 1], 0)

    def layout(self) -> Layout:
        return Layout.make(self.scrollable_content_region.width, *self._last(), self._site_need())

    def _site_need(self) -> int:
        """The longest `file.py:line` among the kinds so far (kept up to date as kinds come)."""
        kinds = self.table.kinds
        for kind in kinds[self._sites_seen:]:
            if kind.frame is not None:
                self._site_width = max(self._site_width, len(site_text(kind.frame, self.cwd, 1)))
        self._sites_seen = len(kinds)
        return self._site_width

    def header(self, width: int) -> Text:
        return header_text(width, *self._last(), SORTS[self.sort][0], self.descending, self._site_need())

    def _check_layout(self, force: bool = False) -> None:
        index, step = self._last()
        key = (len(str(index)) if self.count else 0, len(str(step)) if self.count else 0, self.sort,
               self.reversed, self._site_need())
        if force or key != self._layout_key:
            self._layout_key = key
            self.post_message(self.LayoutChanged())

    def watch_cursor(self, cursor: int) -> None:
        """Keep the cursor row on screen and tell the app which execution it is."""
        if not self.count or cursor < 0:
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
        if 0 <= position < self.count:
            if self.follow and position != self._newest():
                self.set_follow(False)
            self.cursor = position

    def select_execution(self, index: int) -> None:
        """Select execution number `index`, wherever the sort shows it, with two rows of
        context above it: where a jump lands does not depend on where the table was."""
        position = self.position_of(index)
        self.select(position)
        if position >= 0:
            self.call_after_refresh(lambda: self.scroll_to(y=max(0, position - 2), animate=False, immediate=True))

    def _first_of(self, kinds: set[int], positions: Iterable[int]) -> bool:
        """Select the first of these display positions whose row is of one of these kinds
        (numbers in the table): a scan of the kind column, no rows built."""
        kind = self.table.kind
        order = self.order
        for position in positions:
            if kind[order[position] if order is not None else position] in kinds:
                self.select(position)
                return True
        return False

    def find(self, term: str, graphs: set[str]) -> bool:
        """Select the next execution after the cursor that the search term names (its
        site, graph, cause, detail, or an op of its IR: graphs), wrapping around."""
        found = {number for number, kind in enumerate(self.table.kinds) if matches(kind, term, graphs)}
        after = self.cursor + 1
        return bool(found) and self._first_of(found, chain(range(after, self.count), range(min(after, self.count))))

    def next_miss(self, direction: int) -> bool:
        misses = {number for number, kind in enumerate(self.table.kinds) if kind.is_miss}
        ahead = range(self.cursor + 1, self.count) if direction > 0 else range(self.cursor - 1, -1, -1)
        return bool(misses) and self._first_of(misses, ahead)

    # -- keys and mouse --------------------------------------------------------------
    def action_move(self, delta: int) -> None:
        self.select(max(0, min(self.count - 1, self.cursor + delta)))

    def action_page(self, direction: int) -> None:
        self.action_move(direction * max(1, self.scrollable_content_region.height - 1))

    def action_jump(self, index: int) -> None:
        if index < 0 and self.order is None:
            self.set_follow(True)
        else:
            self.select(0 if index == 0 else self.count - 1)

    def on_click(self, event: events.Click) -> None:
        self.select(int(self.scroll_y) + event.y)

    # -- drawing ---------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        position = int(self.scroll_y) + y
        width = self.scrollable_content_region.width
        base = self.rich_style
        if position >= self.count:
            return Strip.blank(width, base)
        execution = self.row(position)
        layout = self.layout()
        cells = [site_text(execution.frame, self.cwd, width) if c.title == "site" else
                 self.why(execution) if c.title == "why" else c.cell(execution)
                 for c, width in zip(layout.columns, layout.widths)]
        line = layout.join(cells)
        segments = []
        offset = 0
        colours = palette()
        cause_style = colours.muted_style if execution.cause == "mark_step" else (
            colours.fallback_style if execution.cause == "fallback" else colours.sync_style)
        # Expected misses are dimmed, so the red ones are the recompiles to look at.
        miss_style = ((colours.muted_style if self.expected_miss(execution) else colours.miss_style)
                      if execution.is_miss else colours.hit_style)
        for column, cell_width in zip(layout.columns, layout.widths):
            chunk = line[offset:offset + cell_width + 1]
            style = None
            if column.title == "cause":
                style = cause_style
            elif column.title == "cache":
                style = miss_style
            elif column.title == "why" and chunk.strip():
                style = colours.fallback_style if execution.cause == "fallback" else \
                    miss_style if execution.is_miss else colours.sync_style
            segments.append(Segment(chunk, style))
            offset += cell_width + 1
        strip = Strip(segments).crop(0, width).extend_cell_length(width)
        selected = position == self.cursor
        style = base + Style(reverse=True, bold=True) if selected and self.has_focus else (
            base + Style(bgcolor="grey27") if selected else base)
        return strip.apply_style(style)

    def on_resize(self) -> None:
        self.virtual_size = Size(self.size.width, self.count)
        # The strip above grew or the terminal shrank: the selected row stays on screen.
        self.call_after_refresh(self._scroll_to_cursor)
        # The columns shown depend on the width: the heading is laid out again with the rows.
        self._check_layout(force=True)

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()
