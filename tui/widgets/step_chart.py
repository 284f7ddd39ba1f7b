"""Per-step time over the run as a bar chart with its axes (ms up, step numbers along),
steps with a compile marked, and how the time splits between Python tracing and graph
execution."""
from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from lazyviz.analysis.summary import StepTimes, chart_scale
from lazyviz.tui.theme import palette

BARS = " ▁▂▃▄▅▆▇█"


class StepChart(Widget):
    DEFAULT_CSS = """
    StepChart { padding: 0 1; height: 1fr; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.steps = StepTimes()
        self.collectives = ""
        self.memory = ""

    def show(self, steps: StepTimes, collectives: str = "", memory: str = "") -> None:
        """Time per step, worked out off the UI thread (a million rows take a second);
        collectives: what SPMD's collectives move per step, in a phrase ("" without);
        memory: the process's peak resident memory as it rose (memory.peak_text)."""
        self.steps, self.collectives, self.memory = steps, collectives, memory
        self.refresh()

    def render(self) -> Text:
        # Drawn at paint time from the size it is painted at: a chart computed when the
        # data arrived (often while its tab was hidden, size 0) could be shown stale.
        steps = self.steps
        if not steps:
            return Text("no steps yet")
        axis = 8  # the y axis labels: "  123 ms"
        width = max(10, self.size.width - 4 - axis)
        height = max(2, min(8, self.size.height - 5))
        # More steps than columns: each column shows the slowest of its steps (read from
        # the columns: a million steps are never made objects here).
        per_column = max(1, -(-len(steps) // width))
        totals = steps.total_ms
        columns = [(max(totals[start:start + per_column]), any(steps.compiled[start:start + per_column]),
                    steps.step[start]) for start in range(0, len(steps), per_column)]
        # Few steps: widen each bar (up to 4 cells) so the chart is readable.
        repeat = max(1, min(4, width // max(1, len(columns))))
        top = chart_scale(totals)
        rows = []
        for level in range(height, 0, -1):
            label = f"{top:.0f} ms" if level == height else "0 ms" if level == 1 else ""
            row = Text(f"{label:>{axis - 1}}│", palette().muted)
            for total, missed, _ in columns:
                filled = min(total, top) / top * height - (level - 1)
                char = BARS[-1] if filled >= 1 else BARS[max(0, int(filled * 8))] if filled > 0 else " "
                row.append(char * repeat, palette().miss if missed else palette().chart)
            rows.append(row)
        # The x axis: step numbers under the bars, as many as fit without touching.
        ticks = [" "] * (len(columns) * repeat)
        every = max(1, -(-6 // repeat))  # a label per 6 cells at least
        for number, (_, _, step) in enumerate(columns):
            label = str(step)
            at = number * repeat
            free = all(c == " " for c in ticks[max(0, at - 1):at + len(label)])
            if number % every == 0 and at + len(label) <= len(ticks) and free:
                ticks[at:at + len(label)] = label
        rows.append(Text(f"{'step':>{axis - 1}} " + "".join(ticks), palette().muted))
        slowest = steps[max(range(len(steps)), key=totals.__getitem__)]
        trace_ms = sum(steps.trace_ms)
        sync_ms = sum(steps.sync_ms)
        share = sync_ms / (trace_ms + sync_ms) * 100 if trace_ms + sync_ms else 0
        legend = Text.assemble(
            (f"{len(steps)} steps", "bold"),
            f"{f' ({per_column} per column)' if per_column > 1 else ''} · median {steps.median_ms:.1f} ms"
            f" · max {slowest.total_ms:.1f} ms (step {slowest.step}) · ",
            ("■ compiled", palette().miss), " ", ("■ cached", palette().chart),
            f"\nsync (lower+compile+run) {sync_ms:.0f} ms = {share:.0f}% · python tracing {trace_ms:.0f} ms",
            f"\ncollectives: {self.collectives}" if self.collectives else "",
            f"\nmemory: {self.memory}" if self.memory else "",
        )
        return Text("\n").join([*rows, legend])
