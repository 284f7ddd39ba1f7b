"""The run header: what runs, its state, and the run's counts."""
from __future__ import annotations

import shlex

from rich.text import Text
from textual.widgets import Static

from lazyviz.analysis.summary import Summary
from lazyviz.trace.model import RunInfo


def run_state(run: RunInfo | None, process_status: int | None) -> tuple[str, str]:
    """(state text, style) from the trace and, in a live run, the child's exit status."""
    if run is None:
        return ("starting…", "yellow") if process_status is None else (f"exited {process_status}", "red")
    if run.finished:
        ok = run.complete and run.exit_status == 0 and not run.error
        return run.state, "green" if ok else "bold red"
    if process_status is not None:
        return f"killed (status {process_status})", "bold red"
    return "running", "bold yellow"


class RunHeader(Static):
    DEFAULT_CSS = """
    RunHeader { height: 2; padding: 0 1; background: $boost; }
    """

    def show(self, run: RunInfo | None, summary: Summary | None, elapsed_s: float, follow: bool,
             process_status: int | None = None, source: str = "", rank: str = "") -> None:
        state, state_style = run_state(run, process_status)
        first = Text.assemble(("lazyviz ", "bold"), (rank, "bold magenta"))
        if run is not None:
            first.append(shlex.join(run.argv) if run.argv else run.command, "bold cyan")
            first.append(f"  {run.backend} · capture {run.capture} · ")
        else:
            first.append(source + "  ")
        first.append(state, state_style)
        first.append(f" · {elapsed_s:.1f}s")
        second = Text()
        if summary is not None:
            second.append(f"steps {summary.steps} · executions {summary.executions} · "
                          f"graphs {summary.graphs} · ")
            second.append(f"misses {summary.misses}", "bold red" if summary.misses else "")
            fallbacks = sum(summary.fallbacks.values())
            second.append(" · ")
            second.append(f"fallbacks {fallbacks}", "bold magenta" if fallbacks else "")
        second.append(f" · follow {'on' if follow else 'off'}", "dim")
        self.update(Text("\n").join([first, second]))
