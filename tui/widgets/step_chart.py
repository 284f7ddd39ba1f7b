"""Per-step time over the run as a bar chart, steps with a compile marked in red, and
how the time splits between Python tracing and graph execution."""
from __future__ import annotations

import statistics

from rich.text import Text
from textual.widgets import Static

from lazyviz.analysis.summary import chart_scale
from lazyviz.trace.model import Execution

BARS = " ▁▂▃▄▅▆▇█"


def step_times(executions: list[Execution]) -> list[tuple[int, float, float, bool]]:
    """Per step: (step, trace ms, sync ms, had a cache miss)."""
    steps: dict[int, list[float | bool]] = {}
    for e in executions:
        entry = steps.setdefault(e.step, [0.0, 0.0, False])
        entry[0] += e.trace_ms
        entry[1] += e.sync_ms
        entry[2] = entry[2] or e.is_miss
    return [(step, t, s, m) for step, (t, s, m) in sorted(steps.items())]


class StepChart(Static):
    DEFAULT_CSS = """
    StepChart { padding: 0 1; height: 1fr; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__("no steps yet", **kwargs)
        self.executions: list[Execution] = []

    def show(self, executions: list[Execution]) -> None:
        self.executions = executions
        self.refresh_chart()

    def on_resize(self) -> None:
        self.refresh_chart()

    def refresh_chart(self) -> None:
        steps = step_times(self.executions)
        if not steps:
            self.update("no steps yet")
            return
        width = max(10, self.size.width - 4)
        height = max(2, min(8, self.size.height - 4))
        # More steps than columns: each column shows the slowest of its steps.
        per_column = max(1, -(-len(steps) // width))
        columns = []
        for start in range(0, len(steps), per_column):
            group = steps[start:start + per_column]
            columns.append((max(t + s for _, t, s, _ in group), any(m for *_, m in group)))
        # Few steps: widen each bar (up to 4 cells) so the chart is readable.
        repeat = max(1, min(4, width // max(1, len(columns))))
        columns = [column for column in columns for _ in range(repeat)]
        top = chart_scale([t + s for _, t, s, _ in steps])
        rows = []
        for level in range(height, 0, -1):
            row = Text()
            for total, missed in columns:
                filled = min(total, top) / top * height - (level - 1)
                char = BARS[-1] if filled >= 1 else BARS[max(0, int(filled * 8))] if filled > 0 else " "
                row.append(char, "red" if missed else "cyan")
            rows.append(row)
        totals = [t + s for _, t, s, _ in steps]
        slowest = max(steps, key=lambda s: s[1] + s[2])
        trace_ms = sum(t for _, t, _, _ in steps)
        sync_ms = sum(s for _, _, s, _ in steps)
        share = sync_ms / (trace_ms + sync_ms) * 100 if trace_ms + sync_ms else 0
        legend = Text.assemble(
            (f"{len(steps)} steps", "bold"), f"{f' ({per_column} per column)' if per_column > 1 else ''} · median {statistics.median(totals):.1f} ms"
            f" · max {slowest[1] + slowest[2]:.1f} ms (step {slowest[0]}) · ", ("■ compiled", "red"), " ", ("■ cached", "cyan"),
            f"\nsync (lower+compile+run) {sync_ms:.0f} ms = {share:.0f}% · python tracing {trace_ms:.0f} ms",
        )
        self.update(Text("\n").join([*rows, legend]))
