"""Unit tests of lazyviz.analysis.summary: counts, steps and time per step."""
from __future__ import annotations

from builders import clean, ex

from lazyviz.analysis.summary import chart_scale, step_times, summarize


def test_summary_counts_causes_sites_and_misses() -> None:
    executions = clean(4) + [ex(4, step=3, cause="item", line=31, detail="Tensor.item()")]
    summary = summarize(executions, 4)
    assert (summary.executions, summary.steps, summary.misses, summary.graphs) == (5, 4, 1, 1)
    assert summary.causes == {"mark_step": 4, "item": 1}
    assert [s.site for s in summary.sites] == ["/repo/train.py:30", "/repo/train.py:31"]


def test_steps_default_to_the_last_step_seen() -> None:
    assert summarize([ex(0, step=0), ex(1, step=5)]).steps == 5


def test_step_times_add_tracing_and_sync_per_step() -> None:
    steps = step_times([ex(0, step=0, cache="miss"), ex(1, step=0, cause="item"), ex(2, step=1)])
    assert [(s.step, s.total_ms, s.executions, s.compiled) for s in steps] == [(0, 6.0, 2, True), (1, 3.0, 1, False)]
    assert len(step_times([])) == 0
    # Rows from threads can come with steps out of order: still one entry per step, in order.
    mixed = step_times([ex(0, step=1), ex(1, step=0, cache="miss"), ex(2, step=1)])
    assert [(s.step, s.executions, s.compiled) for s in mixed] == [(0, 1, True), (1, 2, False)]


def test_chart_scale_ignores_a_slow_first_step_when_there_are_enough() -> None:
    assert chart_scale([1000, 5, 6, 7, 8]) == 8
    assert chart_scale([1000, 5]) == 1000
    assert chart_scale([]) == 1.0
