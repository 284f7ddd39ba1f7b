"""The run header: what runs, its state, and the run's counts. Two lines that never
wrap: the command is shortened and cut to fit, so the counts always show."""
from __future__ import annotations

import os
import shlex
from collections import Counter
from dataclasses import dataclass, field

from rich.text import Text
from textual.widgets import Static

from lazyviz.analysis.failures import raising_line
from lazyviz.present import short_path
from lazyviz.trace.model import RunInfo
from lazyviz.trace.table import ExecutionTable
from lazyviz.tui.theme import palette


def run_state(run: RunInfo | None, process_status: int | None) -> tuple[str, str]:
    """(state text, style) from the trace and, in a live run, the child's exit status."""
    if run is None:
        return ("starting…", palette().sync) if process_status is None else (f"exited {process_status}", palette().miss)
    if run.finished:
        ok = run.complete and run.exit_status == 0 and not run.error
        return ending(run), palette().hit if ok else f"bold {palette().miss}"
    if process_status is not None:
        return f"killed (status {process_status})", f"bold {palette().miss}"
    return "running", f"bold {palette().sync}"


def ending(run: RunInfo) -> str:
    """How a finished run ended, in the header's few words: the script raised, not
    lazyviz ("train.py raised RuntimeError at train.py:238"); an interrupt is the user's."""
    if run.ended_by or not run.error or not run.complete:
        return run.state
    if run.error.startswith("KeyboardInterrupt"):
        return "stopped by you (Ctrl-C or q)"
    where = raising_line(run.error_frames)
    at = f" at {where.file.rpartition('/')[2]}:{where.line}" if where else ""
    return f"{run.script.rpartition('/')[2]} raised {run.error.partition(':')[0]}{at}"


@dataclass
class Counts:
    """The run's counts, kept as rows arrive, so the header never lags the table."""

    executions: int = 0
    last_step: int = 0
    misses: int = 0
    fallbacks: int = 0  # fallback op calls
    graphs: set[str] = field(default_factory=set)

    def add(self, table: ExecutionTable, start: int, stop: int) -> None:
        """Count the table's rows from position start to stop: once per kind, not per row."""
        if stop <= start:
            return
        self.executions += stop - start
        self.last_step = max(self.last_step, max(table.step[start:stop]))
        for number, count in Counter(table.kind[start:stop]).items():
            kind = table.kinds[number]
            self.misses += count * kind.is_miss
            self.fallbacks += count * sum(kind.fallback_ops.values())
            self.graphs.add(kind.graph)


def command_text(run: RunInfo) -> str:
    """The traced command with paths short (relative to the run's folder, or ~)."""
    if not run.argv:
        return run.command
    cwd = run.cwd or os.getcwd()
    return shlex.join(short_path(arg, cwd) if os.sep in arg else arg for arg in run.argv)


class RunHeader(Static):
    DEFAULT_CSS = """
    RunHeader { height: 2; padding: 0 1; background: $boost; }
    """

    def show(self, run: RunInfo | None, counts: Counts, elapsed_s: float, follow: bool,
             process_status: int | None = None, source: str = "", rank: str = "", sort: str = "") -> None:
        state, state_style = run_state(run, process_status)
        if len(state) > 60:  # a long ending: the summary has it whole
            state = state[:59] + "…"
        # The state and clock first: the command is what gets cut on a narrow terminal.
        first = Text.assemble(("lazyviz ", "bold"), (rank, f"bold {palette().fallback}"), (state, state_style),
                              f" · {elapsed_s:.1f}s · ", no_wrap=True, overflow="ellipsis", end="")
        if run is not None:
            first.append(f"{run.backend} {run.capture} · ", palette().muted)
            first.append(command_text(run), f"bold {palette().info}")
        else:
            first.append(source)
        steps = counts.last_step if run is None or run.steps is None else run.steps
        second = Text(f"steps {steps} · executions {counts.executions} · graphs {len(counts.graphs)} · ",
                      no_wrap=True, overflow="ellipsis", end="")
        second.append(f"misses {counts.misses}", f"bold {palette().miss}" if counts.misses else "")
        second.append(" · ")
        second.append(f"fallbacks {counts.fallbacks}", f"bold {palette().fallback}" if counts.fallbacks else "")
        live = run is None or not run.finished
        second.append((f" · follow {'on' if follow else 'off'}" if live else "") + (f" · sorted by {sort}" if sort else ""),
                      palette().muted)
        width = max(10, self.size.width - 2)
        first.truncate(width, overflow="ellipsis")
        second.truncate(width, overflow="ellipsis")
        self.update(Text("\n").join([first, second]))

    def on_resize(self) -> None:
        self.app.call_later(getattr(self.app, "refresh_header", lambda: None))
