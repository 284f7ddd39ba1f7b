"""Unit tests of lazyviz.analysis.budget: `lazyviz check`'s budgets and baselines."""
from __future__ import annotations

import json

import pytest
from builders import clean, ex, run_info

from lazyviz.analysis.budget import Budget, baseline_of, baseline_problem, check_baseline, check_budget, site_key


def test_budget_passes_a_clean_run_and_fails_misses_syncs_and_fallbacks() -> None:
    run = run_info(steps=6)
    assert check_budget(run, clean(), [], Budget()) == []
    late_miss = clean() + [ex(6, step=5, graph="g1", cache="miss")]
    assert any("cache misses after warm-up: 1" in b for b in check_budget(run, late_miss, [], Budget()))
    synced = clean() + [ex(6 + step, step=step, cause="item", detail="Tensor.item()", line=31) for step in (2, 3, 4)]
    assert any("executions per step: up to 2 in 3 steps" in b for b in check_budget(run, synced, [], Budget()))
    # A read in few steps is a log line every N steps (what the extra-sync fix advises), not a per-step cost.
    logged = clean() + [ex(6, step=3, cause="item", detail="Tensor.item()", line=31)]
    assert check_budget(run, logged, [], Budget()) == []
    fell = clean() + [ex(6, step=3, cause="fallback", detail="aten::sin", fallback_ops={"aten::sin": 1})]
    assert any("--allow-fallback aten::sin" in b for b in check_budget(run, fell, [], Budget()))
    assert check_budget(run, fell, [], Budget(allowed_fallbacks=frozenset({"aten::sin"}),
                                              max_executions_per_step=None)) == []


def test_budget_fails_an_unfinished_trace_unless_allowed() -> None:
    killed = run_info(complete=False, ended_by="killed by SIGKILL", steps=6)
    assert any("unfinished" in b or "stopped early" in b for b in check_budget(killed, clean(), [], Budget()))
    assert check_budget(killed, clean(), [], Budget(allow_unfinished=True)) == []


def test_baseline_round_trip_and_new_graph() -> None:
    run = run_info(steps=6)
    baseline = baseline_of(run, clean(), 2)
    assert baseline_problem(json.loads(json.dumps(baseline))) is None
    assert check_baseline(run, clean(), baseline) == []
    changed = clean()[:-1] + [ex(5, step=5, graph="g9", cache="miss")]
    assert any("graph(s) the baseline does not have: g9" in b for b in check_baseline(run, changed, baseline))


@pytest.mark.parametrize("bad", [[], {"format": "x"}, {"format": "lazyviz-baseline", "sites": []},
                                 {"format": "lazyviz-baseline", "warmup_steps": "2"},
                                 {"format": "lazyviz-baseline", "sites": {"a": {"graphs": []}}}])
def test_baseline_problems_are_named(bad: object) -> None:
    assert baseline_problem(bad)


def test_site_key_is_relative_to_the_run_folder() -> None:
    assert site_key(ex(0), "/repo") == "train.py:30 mark_step"
    assert site_key(ex(0, file=None), "/repo") == "? mark_step"
