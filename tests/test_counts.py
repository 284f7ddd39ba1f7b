"""Every count a finding states agrees with the run it describes: no more steps than the
run had, no more executions, recompiles or calls than happened. Checked over synthetic
runs of many shapes (steps with several syncs, fallbacks recompiling at every sync of a
step, batch lengths that change), since a count is read and acted on."""
from __future__ import annotations

import re

from builders import ex, run_info
from hypothesis import given, settings
from hypothesis import strategies as st

from lazyviz.analysis import analyze
from lazyviz.trace.synthetic import chain_ir

# "at 10 of 12 steps", "in 3 of 12 steps": the first never more than the second, the
# second the run's own.
OF_STEPS = re.compile(r"(\d+) of (\d+) steps")
AT_STEPS = re.compile(r"at (\d+) steps")


@st.composite
def runs(draw: st.DrawFn) -> tuple[list, dict[str, str], int]:
    """A training loop: each step a forward graph synced by a fallback several times
    (one recompile per sync when the batch length changes), maybe an .item(), then the
    step's mark_step; batch lengths drawn per step."""
    steps = draw(st.integers(1, 8))
    syncs = draw(st.integers(0, 4))
    item = draw(st.booleans())
    lengths = draw(st.lists(st.sampled_from([16, 20, 24, 32]), min_size=steps, max_size=steps))
    executions, texts, seen = [], {}, set()
    for step, length in enumerate(lengths):
        # One line syncing several graphs a step (clip_grad_norm_'s fallback, once per parameter).
        parts = [(f"fallback{k}", "fallback", "aten::median", 10) for k in range(syncs)]
        parts += [("item", "item", "Tensor.item()", 20)] if item else []
        parts += [("step", "mark_step", "mark_step()", 30)]
        for number, (name, cause, detail, line) in enumerate(parts):
            graph = f"{name}-{length}"
            texts[graph] = chain_ir(6 + number, rows=length)
            executions.append(ex(len(executions), step=step, cause=cause, detail=detail, line=line, graph=graph,
                                 nodes=6 + number, cache="hit" if graph in seen else "miss",
                                 fallback_ops={"aten::median": 1} if cause == "fallback" else {}))
            seen.add(graph)
    return executions, texts, steps


@settings(max_examples=150, deadline=None, derandomize=True)
@given(runs())
def test_no_finding_counts_more_than_the_run_has(run: tuple[list, dict[str, str], int]) -> None:
    executions, texts, steps = run
    analysis = analyze(run_info(steps=steps), executions, texts)
    misses = sum(e.cache == "miss" for e in executions)
    for finding in analysis.findings:
        text = f"{finding.message} {finding.short}"
        for part, whole in OF_STEPS.findall(text):
            assert int(part) <= int(whole) == steps, finding.message
        for count in AT_STEPS.findall(text):
            assert int(count) <= steps, finding.message
        details = finding.details.to_json()  # the counts of every kind that has them
        if details.get("steps") is not None:
            assert details["steps"] <= steps, finding.message
        assert details.get("recompiles", 0) <= misses, finding.message
        assert len(finding.executions) <= len(executions)
        assert details.get("executions_forced", 0) <= len(executions)
        assert details.get("calls", 0) <= sum(sum(e.fallback_ops.values()) for e in executions)


def test_a_length_that_changes_every_step_with_syncs_in_between_is_counted_in_steps() -> None:
    # As a Hugging Face classifier with per-batch padding and clip_grad_norm_ runs: 4 syncs
    # a step, each a recompile for the new length; 12 steps are 12 steps, not 40.
    executions, texts = [], {}
    for step in range(12):
        length = 16 + step
        for k, (cause, line) in enumerate([("fallback", 10), ("fallback", 10), ("fallback", 12), ("mark_step", 30)]):
            graph = f"{k}-{length}"
            texts[graph] = chain_ir(8 + k, rows=length)
            executions.append(ex(len(executions), step=step, cause=cause, line=line, graph=graph, nodes=8 + k,
                                 cache="miss", detail="aten::median" if cause == "fallback" else "mark_step()",
                                 fallback_ops={"aten::median": 1} if cause == "fallback" else {}))
    findings = analyze(run_info(steps=12), executions, texts).findings
    [shapes] = [f for f in findings if f.kind == "dynamic_shape"]
    assert "input shapes change at 10 of 12 steps" in shapes.message  # 2 are warm-up
    assert "(one cause: 40 recompiles at 3 sync sites" in shapes.message
    assert shapes.details.steps == 10 and shapes.details.recompiles == 40
