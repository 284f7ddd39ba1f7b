"""The lazyviz terminal UI: an App around one trace screen (tui/trace_screen.py), which
holds the keys. The app owns what is the same on every screen: Ctrl-C, the theme, the
command palette, and closing when the terminal went away."""
from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from lazyviz.trace.files import output_path
from lazyviz.tui.state import TraceState
from lazyviz.tui.theme import use as use_palette
from lazyviz.tui.trace_screen import TraceScreen
from lazyviz.tui.watcher import TraceWatcher


class LazyvizApp(App[str | None]):
    CSS_PATH = "lazyviz.tcss"
    TITLE = "lazyviz"
    BINDINGS = [
        # As untraced: Ctrl-C interrupts the script at once (quitting sends it Ctrl-C).
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
    ]

    def __init__(self, watcher: TraceWatcher, ranks: dict[int, Path] | None = None,
                 close_when: Callable[[], bool] = lambda: False) -> None:
        """watcher: the data source (tests may pass any object with its interface);
        ranks: the traces of a multi-process run, by rank; [ and ] switch;
        close_when: checked by a timer: the terminal went away (SIGHUP), so close."""
        super().__init__()
        self.close_when = close_when
        self._source = watcher, ranks
        self.trace_view: TraceScreen | None = None  # made in the app's own context, when it starts

    def get_default_screen(self) -> Screen:
        self.trace_view = TraceScreen(*self._source)
        return self.trace_view

    def compose(self) -> ComposeResult:
        # The trace screen's widgets, mounted the way Textual mounts a default screen's:
        # from the app's compose, before the app's Mount (on_mount starts the screen).
        assert self.trace_view is not None
        yield from self.trace_view.widgets()

    @property
    def state(self) -> TraceState:
        """What the trace screen has read of the trace it shows."""
        assert self.trace_view is not None, "the app has not started"
        return self.trace_view.state

    def on_mount(self) -> None:
        use_palette(self.current_theme.dark)
        self.theme_changed_signal.subscribe(self, self._recolour)
        self.set_interval(0.25, self._close_if_asked)
        assert self.trace_view is not None
        self.trace_view.start()

    def _recolour(self, theme: object = None) -> None:
        """A theme of the other darkness (ctrl+p -> theme): every lazyviz colour from the
        palette readable on it."""
        if use_palette(self.current_theme.dark) and self.trace_view is not None:
            self.trace_view.recolour()

    def _close_if_asked(self) -> None:
        if self.close_when():
            self.exit()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The command palette (ctrl+p): lazyviz's own actions first."""
        if self.trace_view is not None:
            yield from self.trace_view.commands()
        yield from super().get_system_commands(screen)


def build_app(trace_path: Path, process: subprocess.Popen | None = None, output: Path | None = None,
              poll_s: float = 0.25, ranks: dict[int, Path] | None = None,
              close_when: Callable[[], bool] = lambda: False) -> LazyvizApp:
    """The one factory for the CLI and the tests. output: the script's output (default:
    the one beside the trace, if any). ranks: the traces of a multi-process run, by rank
    (trace_path is the one shown first)."""
    if output is None:
        beside = output_path(Path(trace_path))
        output = beside if beside.exists() else None
    return LazyvizApp(TraceWatcher(Path(trace_path), process, output, poll_s), ranks, close_when)
