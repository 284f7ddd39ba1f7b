"""Per-step time over the run as a bar chart, steps with a compile marked in red, and
how the time splits between Python tracing and graph execution."""
from __future__ import annotations

import statistics

from rich.text import Text
from textual.widget import Widget

from lazyviz.analysis.summary import chart_scale, step_times
from lazyviz.trace.model import Execution

BARS = " ▁▂▃▄▅▆▇█"


class StepChart(Widget):
    DEFAULT_CSS = """
    StepChart { padding: 0 1; height: 1fr; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.executions: list[Execution] = []

    def show(self, executions: list[Execution]) -> None:
        self.executions = executions
        self.refresh()

    def render(self) -> Text:
        # Drawn at paint time from the size it is painted at: a chart computed when the
        # data arrived (often while its tab was hidden, size 0) could be shown stale.
        steps = step_times(self.executions)
        if not steps:
            return Text("no steps yet")
        width = max(10, self.size.width - 4)
        height = max(2, min(8, self.size.height - 4))
        # More steps than columns: each column shows the slowest of its steps.
        per_column = max(1, -(-len(steps) // width))
        columns = []
        for start in range(0, len(steps), per_column):
            group = steps[start:start + per_column]
            columns.append((max(step.total_ms for step in group), any(step.compiled for step in group)))
        # Few steps: widen each bar (up to 4 cells) so the chart is readable.
        repeat = max(1, min(4, width // max(1, len(columns))))
        columns = [column for column in columns for _ in range(repeat)]
        top = chart_scale([step.total_ms for step in steps])
        rows = []
        for level in range(height, 0, -1):
            row = Text()
            for total, missed in columns:
                filled = min(total, top) / top * height - (level - 1)
                char = BARS[-1] if filled >= 1 else BARS[max(0, int(filled * 8))] if filled > 0 else " "
                row.append(char, "red" if missed else "cyan")
            rows.append(row)
        totals = [step.total_ms for step in steps]
        slowest = max(steps, key=lambda step: step.total_ms)
        trace_ms = sum(step.trace_ms for step in steps)
        sync_ms = sum(step.sync_ms for step in steps)
        share = sync_ms / (trace_ms + sync_ms) * 100 if trace_ms + sync_ms else 0
        legend = Text.assemble(
            (f"{len(steps)} steps", "bold"),
            f"{f' ({per_column} per column)' if per_column > 1 else ''} · median {statistics.median(totals):.1f} ms"
            f" · max {slowest.total_ms:.1f} ms (step {slowest.step}) · ",
            ("■ compiled", "red"), " ", ("■ cached", "cyan"),
            f"\nsync (lower+compile+run) {sync_ms:.0f} ms = {share:.0f}% · python tracing {trace_ms:.0f} ms",
        )
        return Text("\n").join([*rows, legend])
