"""Unit tests of lazyviz.analysis.compare and ranks: two runs, and the ranks of one job, side by side."""
from __future__ import annotations

from builders import IR16, IR24, clean, ex, run_info

from lazyviz.analysis.compare import compare_runs
from lazyviz.analysis.ranks import find_divergence, step_graphs


def test_compare_same_runs_and_a_changed_graph() -> None:
    run = run_info(steps=6)
    same = compare_runs(run, clean(), {"g0": IR16}, run, clean(), {"g0": IR16})
    assert same.same_graphs and same.a.executions_per_step == same.b.executions_per_step == 1
    other = [e for e in clean()]
    other = [ex(i, step=i, graph="g1", cache="miss" if i == 0 else "hit") for i in range(6)]
    changed = compare_runs(run, clean(), {"g0": IR16}, run, other, {"g1": IR24})
    assert changed.only_a == [("train.py:30 mark_step", "g0")] and "Float[16,64]" in changed.changed[0].headline


def test_ranks_diverge_at_the_first_differing_step() -> None:
    rank0 = clean(4)
    rank1 = clean(2) + [ex(2, step=2, graph="g1", cache="miss"), ex(3, step=3)]
    divergence = find_divergence({0: rank0, 1: rank1}, {0: {"g0": IR16}, 1: {"g0": IR16, "g1": IR24}})
    assert divergence is not None and divergence.step == 2 and divergence.divergent_steps == 1
    assert "rank 1 vs rank 0" in divergence.change
    assert find_divergence({0: rank0, 1: clean(4)}, {0: {}, 1: {}}) is None
    assert step_graphs(rank1)[2] == ("g1",)
