"""Unit tests of the pure parts: analysis, budgets, comparison, ranks, the presentation
layer and every renderer, on traces made by the trace factory (no torch)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import lazyviz
from lazyviz.analysis import analyze
from lazyviz.analysis.budget import Budget, baseline_of, baseline_problem, check_baseline, check_budget, site_key
from lazyviz.analysis.compare import compare_runs
from lazyviz.analysis.diff import diff_texts
from lazyviz.analysis.findings import extra_sync_findings, fallback_findings, growth_findings, repeated_block
from lazyviz.analysis.ranks import find_divergence, step_graphs
from lazyviz.analysis.recompiles import explain_recompiles
from lazyviz.analysis.run import Run
from lazyviz.analysis.summary import chart_scale, step_times, summarize
from lazyviz.backends import BackendError, detect_backend
from lazyviz.export import EXPORT_FORMATS, REPORT_FORMATS, RenderOptions, renderer_for
from lazyviz.present import ADDED, CARRIED, ORIGIN, diff_marks, short_path, site_text
from lazyviz.trace.model import Execution, Frame, RunInfo
from lazyviz.trace.schema import GraphRecord
from lazyviz.trace.synthetic import chain_ir, execution, write_trace


def ex(index: int, **fields: object) -> Execution:
    """An Execution as the reader makes it, from the factory's record defaults."""
    record = execution(index, **fields)
    return Execution(index=record.idx, step=record.step, cause=record.cause, detail=record.detail,
                     frame=Frame(record.file, record.line, record.function) if record.file else None,
                     stack_id=record.stack_id, graph=record.graph, nodes=record.nodes, cache=record.cache,
                     sync_ms=record.sync_ms, trace_ms=record.trace_ms, compile_ms=record.compile_ms,
                     execute_ms=record.execute_ms, start_ms=record.start_ms,
                     fallback_ops=record.fallback_ops, counters=record.counters, call=record.call,
                     context=record.context)


def run_info(**fields: object) -> RunInfo:
    base = dict(argv=["train.py"], backend="ts", capture="full", versions={}, start_time="", pid=1, cwd="/repo",
                rank={}, finished=True, exit_status=0, error=None, traceback=None, steps=None, elapsed_s=1.0,
                complete=True)
    return RunInfo(**{**base, **fields})  # type: ignore[arg-type]


def clean(steps: int = 6) -> list[Execution]:
    return [ex(i, step=i, cache="miss" if i == 0 else "hit") for i in range(steps)]


IR16, IR24 = chain_ir(6, rows=16), chain_ir(6, rows=24)


# -- summary ------------------------------------------------------------------------------
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


# -- findings -----------------------------------------------------------------------------
def test_clean_run_has_no_findings() -> None:
    assert analyze(run_info(steps=6), clean(), {"g0": IR16}).findings == []


def test_extra_sync_every_step_is_a_warning_with_its_fix() -> None:
    executions = []
    for step in range(6):
        executions += [ex(2 * step, step=step, cause="item", detail="Tensor.item()", line=31),
                       ex(2 * step + 1, step=step)]
    [finding] = extra_sync_findings(executions, 6)
    assert finding.severity == "warning" and finding.frame.line == 31
    assert "Tensor.item() forces 1 extra execution per step in 6 of 6 steps" in finding.message
    assert "torch._lazy.add_step_closure" in finding.fix


def test_extra_sync_in_one_step_of_many_is_info() -> None:
    executions = clean(10) + [ex(10, step=4, cause="cpu", detail="Tensor.cpu()", line=40)]
    [finding] = extra_sync_findings(executions, 10)
    assert finding.severity == "info"


def test_collective_sync_gets_bucket_advice() -> None:
    executions = [ex(i, step=i, cause="other", detail="distributed.all_reduce()") for i in range(4)]
    [finding] = extra_sync_findings(executions + clean(4), 4)
    assert "one collective per step" in finding.fix


def test_fallback_finding_counts_calls_and_forced_executions() -> None:
    executions = [ex(i, step=i, cause="fallback", detail="aten::mse_loss", fallback_ops={"aten::mse_loss": 1})
                  for i in range(4)]
    [finding] = fallback_findings(executions, 4)
    assert finding.details == {"op": "aten::mse_loss", "calls": 4, "executions_forced": 4, "per_step": 1.0,
                               "call": None}
    assert "((output - target) ** 2).mean()" in finding.fix


def test_fallback_finding_names_the_users_call_and_fits_its_advice() -> None:
    executions = [ex(i, step=i, cause="fallback", detail="aten::linalg_vector_norm", call="clip_grad_norm_",
                     fallback_ops={"aten::linalg_vector_norm": 1}) for i in range(4)]
    [finding] = fallback_findings(executions, 4)
    assert "aten::linalg_vector_norm falls back to the CPU in clip_grad_norm_()" in finding.message
    assert "clip_grad_norm_" in finding.fix and "(p.grad * p.grad).sum()" in finding.fix
    # With no mark_step() there are no steps: no per-step figure.
    [no_steps] = fallback_findings(executions, 0)
    assert "per step" not in no_steps.message


def test_a_value_only_recompile_is_found_among_graphs_of_other_sizes() -> None:
    """In a run without mark_step(), a recompile past warm-up that changed values only is
    compared at once (the rest wait). Only a graph as big as an earlier one can repeat
    its structure (graphs are not parsed otherwise); a node count of 0, not known, is
    compared with every graph."""
    from lazyviz.analysis.recompiles import PendingRecompile

    irs = {"a": chain_ir(10), "b": chain_ir(11), "c": chain_ir(12), "a24": chain_ir(10, rows=24)}
    for known in ("every size", "no size", "all but the first"):
        executions = [ex(i, step=0, graph=g, cache="hit" if i == 3 else "miss",  # no mark_step
                         nodes=0 if known == "no size" or (i == 0 and known != "every size") else
                         len(irs[g].splitlines()) - 2)
                      for i, g in enumerate(["a", "b", "c", "b", "a24"])]
        *_, last = explain_recompiles(executions, irs)
        assert not isinstance(last, PendingRecompile) and last.closest == "a", known
        assert "Float[16,64] -> Float[24,64]" in last.headline()


def test_fallback_without_a_forced_execution_is_info() -> None:
    [finding] = fallback_findings([ex(0, fallback_ops={"aten::sin": 2})], 1)
    assert finding.severity == "info" and "2 calls, forcing 0 executions" in finding.message


def test_repeated_block_finds_the_loop_body() -> None:
    ops = ["a", "b"] + ["mm", "tanh", "mul", "add"] * 6 + ["sum"]
    block, repeats, start = repeated_block(ops)
    assert (block, repeats, start) == (["mm", "tanh", "mul", "add"], 6, 2)
    assert repeated_block(["a", "b", "c"]) is None


def test_growth_finding_for_an_unrolled_loop() -> None:
    ir = chain_ir(41, ops=("aten::mm", "aten::tanh", "aten::mul", "aten::add"))
    [finding] = growth_findings([ex(0, cause="item", graph="big", nodes=41)], {"big": ir})
    assert finding.kind == "missing_mark_step" and finding.details["repeats"] == 10
    assert "torch._lazy.mark_step()" in finding.fix


def test_input_shape_recompile_after_warmup_is_explained() -> None:
    executions = [ex(i, step=i, graph="b16", cache="miss" if i == 0 else "hit") for i in range(4)]
    executions.append(ex(4, step=4, graph="b24", cache="miss"))
    recompiles = explain_recompiles(executions, {"b16": IR16, "b24": IR24})
    assert len(recompiles) == 1 and not recompiles[0].warmup
    assert recompiles[0].closest == "b16" and "Float[16,64] -> Float[24,64]" in recompiles[0].headline()
    [finding] = analyze(run_info(steps=5), executions, {"b16": IR16, "b24": IR24}).findings
    assert finding.kind == "recompile" and "pad or bucket" in finding.fix


def test_aliasing_recompile_gets_its_own_advice() -> None:
    executions = [ex(i, step=i, graph="g0", cache="miss" if i == 0 else "hit") for i in range(3)]
    executions.append(ex(3, step=3, graph="g1", cache="miss"))
    [finding] = analyze(run_info(steps=4), executions, {"g0": IR16, "g1": IR16}).findings
    assert "share buffers" in finding.message and "Python numbers" in finding.fix


SCALE_IR = """IR {
  %0 = [Float[4,4]] lazy_tensors::device_data(), device=CPU0, location=<module>@train.py:3, NodeType=D
  %1 = [Double[]] lazy_tensors::device_data(), location=<module>@train.py:7, device=CPU0, NodeType=D
  %2 = [Double[]] lazy_tensors::device_data(), location=<module>@train.py:8, device=CPU0, NodeType=D
  %3 = [Float[4,4]] aten::mul(%0, %1), location=<module>@train.py:9, NodeType=M
  %4 = [Float[4,4]] aten::add(%3, %2), location=<module>@train.py:9, ROOT=0, NodeType=A
}
"""


def test_aliasing_names_both_inputs_and_their_lines() -> None:
    # The hook marks an input that shares its buffer with an earlier one (alias=%j): two
    # Python numbers that became equal. Inputs are paired by type, not by position.
    aliased = SCALE_IR.replace("location=<module>@train.py:8, device=CPU0,",
                               "location=<module>@train.py:8, device=CPU0, alias=%1,")
    reordered = "\n".join([aliased.splitlines()[0], *aliased.splitlines()[2:4], aliased.splitlines()[1],
                           *aliased.splitlines()[4:]])
    executions = [ex(i, step=i, graph="g0", cache="miss" if i == 0 else "hit") for i in range(3)]
    executions.append(ex(3, step=3, graph="g1", cache="miss"))
    for new in (aliased, reordered.replace("%0", "%9").replace("%1", "%0").replace("%9", "%1")):
        [recompile] = explain_recompiles(executions, {"g0": SCALE_IR, "g1": new})
        assert [c.kind for c in recompile.diff.origins] == ["aliasing"], recompile.diff.changes
        headline = recompile.headline()
        assert "now shares one buffer with input" in headline and headline.endswith(": equal Python numbers")
        assert "(built at train.py:7)" in headline and "(built at train.py:8)" in headline
    [finding] = analyze(run_info(steps=4), executions, {"g0": SCALE_IR, "g1": aliased}).findings
    assert "create such values once as tensors" in finding.fix


def slice_ir(start: int) -> str:
    return ("IR {\n  %0 = [Float[600,64]] lazy_tensors::device_data(), device=CPU0, NodeType=D\n"
            f"  %1 = [Float[35,64]] aten::slice(%0), dim=0, start={start}, end={start + 35}, step=1, "
            "location=get_batch@main.py:139, NodeType=S\n"
            "  %2 = [Float[]] aten::sum(%1), ROOT=0, NodeType=U\n}\n")


def test_without_mark_step_a_value_baked_in_at_every_sync_is_one_finding() -> None:
    # A loop with no mark_step() syncing with .item(): every batch slices the data at a
    # new Python offset, baked into the graph, so every sync compiles. Warm-up is the
    # site's first syncs; the pieces of a pass (new graphs) are not findings there.
    irs = {f"s{i}": slice_ir(35 * i) for i in range(8)}
    irs["piece"] = chain_ir(12, ops=("aten::softmax",))
    executions = [ex(0, step=0, cause="fallback", graph="piece", cache="miss", line=142)]
    executions += [ex(i + 1, step=0, cause="item", graph=f"s{i}", cache="miss", line=160) for i in range(8)]
    executions.append(ex(9, step=0, cause="fallback", graph="s0", cache="hit", line=142))
    [finding] = analyze(run_info(steps=0), executions, irs).findings
    assert finding.kind == "recompile" and finding.details["recompiles"] == 6  # syncs 3 to 8 at line 160
    assert finding.message.startswith("recompiled at 6 syncs here, each time the same kind of change; "
                                      "first at execution 3 recompiled: attribute")
    assert "built at main.py:139" in finding.message and "slice or index on the CPU" in finding.fix


def test_under_pytest_each_test_is_judged_on_its_own() -> None:
    # Two tests compile different graphs at the same line of a shared helper: the second
    # test's first graph is not a recompile of the first test's.
    executions = [ex(i, step=i, graph="b16", context="t.py::test_a", cache="miss" if i == 0 else "hit")
                  for i in range(3)]
    executions += [ex(i, step=i, graph="b24", context="t.py::test_b", cache="miss" if i == 3 else "hit")
                   for i in range(3, 6)]
    assert explain_recompiles(executions, {"b16": IR16, "b24": IR24}) == []
    executions.append(ex(6, step=6, graph="b16", context="t.py::test_b", cache="miss"))
    [recompile] = explain_recompiles(executions, {"b16": IR16, "b24": IR24})
    assert recompile.closest == "b24" and not recompile.warmup  # test_b's warm-up counts from its step 3
    [finding] = analyze(run_info(steps=7), executions, {"b16": IR16, "b24": IR24}).findings
    assert finding.message.startswith("t.py::test_b: step 6 recompiled: input shape Float[24,64] -> Float[16,64]")



def test_a_recompile_is_compared_with_the_structurally_closest_earlier_graph() -> None:
    # Site 30 compiles the model's step (40 nodes), then nine small unrelated graphs,
    # then the step again with a wider batch: the step of step 0 is the one to compare with,
    # however many graphs came between.
    small = chain_ir(3, ops=("aten::sum",))
    irs = {"step16": chain_ir(40, rows=16), "step24": chain_ir(40, rows=24)}
    executions = [ex(0, step=0, graph="step16", cache="miss")]
    for n in range(1, 10):
        irs[f"small{n}"] = small.replace("Float[16,64]", f"Float[{n},64]")
        executions.append(ex(n, step=n, graph=f"small{n}", cache="miss"))
    executions.append(ex(10, step=10, graph="step24", cache="miss"))
    explained = explain_recompiles(executions, irs)[-1]
    assert explained.closest == "step16" and not explained.new_graph
    assert explained.headline().startswith("input shape: lazy_tensors::device_data %0: Float[16,64] -> Float[24,64]")
    assert "compared with execution 0's graph step16: the closest of 10 earlier graphs at this site" in explained.choice


def test_an_unrelated_graph_is_a_new_graph_not_hundreds_of_added_ops() -> None:
    irs = {"tiny": chain_ir(2, ops=("aten::sum",)), "model": chain_ir(300, ops=("aten::mm", "aten::relu"))}
    executions = [ex(i, step=i, graph="tiny", cache="miss" if i == 0 else "hit") for i in range(3)]
    executions.append(ex(3, step=3, graph="model", cache="miss"))
    [explained] = explain_recompiles(executions, irs)
    assert explained.new_graph and explained.diff is None and explained.closest == "tiny"
    assert explained.headline().startswith("new graph (300 nodes): no earlier graph at this site is close")
    [finding] = [f for f in analyze(run_info(steps=4), executions, irs).findings if f.kind == "recompile"]
    assert "pad or bucket" not in finding.fix and "no earlier step ran" in finding.fix


def test_batch_advice_only_when_input_shapes_alone_changed() -> None:
    # The batch changed and an op was added: another code path, not a batch to pad.
    branched = chain_ir(7, rows=24).replace(", ROOT=0", "")
    branched = branched.replace("}\n", "  %7 = [Float[24,64]] aten::tanh(%6), NodeType=N, ROOT=0\n}\n")
    irs = {"b16": chain_ir(7, rows=16), "branch": branched}
    executions = [ex(i, step=i, graph="b16", cache="miss" if i == 0 else "hit") for i in range(3)]
    executions.append(ex(3, step=3, graph="branch", cache="miss"))
    [finding] = analyze(run_info(steps=4), executions, irs).findings
    kinds = {c.kind for c in explain_recompiles(executions, irs)[0].diff.origins}
    assert {"input_shape", "op_added"} <= kinds
    assert "pad or bucket" not in finding.fix and "another path" in finding.fix

# -- budget and baseline -------------------------------------------------------------------
def test_budget_passes_a_clean_run_and_fails_misses_syncs_and_fallbacks() -> None:
    run = run_info(steps=6)
    assert check_budget(run, clean(), [], Budget()) == []
    late_miss = clean() + [ex(6, step=5, graph="g1", cache="miss")]
    assert any("cache misses after warm-up: 1" in b for b in check_budget(run, late_miss, [], Budget()))
    synced = clean() + [ex(6, step=3, cause="item", detail="Tensor.item()", line=31)]
    assert any("executions per step: up to 2" in b for b in check_budget(run, synced, [], Budget()))
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


# -- comparing runs and ranks -----------------------------------------------------------------
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


# -- the presentation layer ---------------------------------------------------------------------
def test_short_path_rules() -> None:
    home = str(Path.home())
    assert short_path("/repo/src/train.py", "/repo") == "src/train.py"
    assert short_path(os.path.join(home, "x", "t.py"), "/elsewhere").startswith("~" + os.sep)
    assert short_path("/opt/t.py", "/repo") == "/opt/t.py"
    assert site_text(Frame("/repo/t.py", 3, "f"), "/repo") == "t.py:3" and site_text(None) == "?"


def test_diff_marks_keep_the_origin() -> None:
    diff = diff_texts(IR16, IR24)
    marks = diff_marks(diff)
    assert marks["%0"] == ORIGIN and set(marks.values()) <= {ORIGIN, CARRIED, ADDED}
    assert list(marks.values()).count(ORIGIN) == len({c.node for c in diff.origins if c.node})
    assert CARRIED in marks.values()


def test_diff_texts_is_none_for_text_that_is_not_ir() -> None:
    assert diff_texts("not ir", IR16) is None and diff_texts("", "") is None


# -- backends registry --------------------------------------------------------------------------
def test_backend_detection() -> None:
    assert detect_backend({"torch", "torch._lazy", "torch._lazy.ts_backend"}) == "ts"
    assert detect_backend({"torch", "torch_xla.core.xla_model"}) == "xla"
    assert detect_backend({"torch"}) == "ts" and detect_backend(None) == "ts"
    with pytest.raises(BackendError, match="pass --backend ts or --backend xla"):
        detect_backend({"torch._lazy", "torch_xla"})


# -- renderers ---------------------------------------------------------------------------------
@pytest.fixture
def small_trace(tmp_path: Path) -> Path:
    path = tmp_path / "t.trace"
    records = [execution(i, step=i, graph="b16" if i < 4 else "b24", cache="miss" if i in (0, 4) else "hit")
               for i in range(6)]
    write_trace(path, records, [GraphRecord("b16", 6, IR16, "graph()", 0), GraphRecord("b24", 6, IR24, "graph()", 4)])
    return path


@pytest.fixture
def empty_trace(tmp_path: Path) -> Path:
    path = tmp_path / "e.trace"
    write_trace(path, [])
    return path


@pytest.mark.parametrize("fmt", list(REPORT_FORMATS))
def test_report_renderers_on_an_empty_and_a_small_trace(fmt: str, small_trace: Path, empty_trace: Path) -> None:
    renderer = renderer_for(REPORT_FORMATS, fmt, None, "text")
    for path in (empty_trace, small_trace):
        with lazyviz.open(path) as trace:
            text = renderer.render(Run(trace), RenderOptions())
        assert text.endswith("\n") and "train.py" in text
    assert "recompiled" in text and "Float[16,64]" in text


@pytest.mark.parametrize("fmt", [f for f in EXPORT_FORMATS if f != "svg"])
def test_export_renderers(fmt: str, small_trace: Path, empty_trace: Path) -> None:
    renderer = renderer_for(EXPORT_FORMATS, fmt, None, "svg")
    with lazyviz.open(small_trace) as trace:
        text = renderer.render(Run(trace), RenderOptions(execution=4, diff=True))
    assert text
    with lazyviz.open(empty_trace) as trace:
        if renderer.needs_execution:
            with pytest.raises(lazyviz.TraceError, match="no execution 0"):
                renderer.render(Run(trace), RenderOptions(execution=0))
        else:
            assert json.loads(renderer.render(Run(trace), RenderOptions()))["traceEvents"]


def test_renderer_from_suffix() -> None:
    assert renderer_for(REPORT_FORMATS, None, "r.md", "text").name == "markdown"
    assert renderer_for(REPORT_FORMATS, None, "r.html", "text").name == "html"
    assert renderer_for(REPORT_FORMATS, None, "r.json", "text").name == "json"
    assert renderer_for(EXPORT_FORMATS, None, "t.json", "svg").name == "chrome"
    assert renderer_for(EXPORT_FORMATS, None, None, "svg").name == "svg"


def test_markdown_table_survives_pipes(tmp_path: Path) -> None:
    path = tmp_path / "p.trace"
    write_trace(path, [execution(0, file="/repo/a|b.py")], argv=["a|b.py"])
    with lazyviz.open(path) as trace:
        text = renderer_for(REPORT_FORMATS, "markdown", None, "text").render(Run(trace), RenderOptions())
    assert "a\\|b.py" in text


def test_a_site_recompiling_every_step_is_counted_whole_but_compared_a_few_times() -> None:
    """Structure changes past the first EXPLAINED_PER_SITE at a site wait (a diff of large
    graphs costs seconds); value-only changes are always compared: they are the headline."""
    from lazyviz.analysis.recompiles import EXPLAINED_PER_SITE, PendingRecompile
    from lazyviz.export.report import recompile_json

    grows = {f"n{n}": chain_ir(n) for n in range(10, 40)}  # a new op each step: another path
    executions = [ex(i, step=i, graph=f"n{10 + i}", cache="miss") for i in range(30)]
    recompiles = explain_recompiles(executions, grows)
    waiting = [r for r in recompiles if isinstance(r, PendingRecompile)]
    assert len(recompiles) == 29 and len(waiting) == 29 - 1 - EXPLAINED_PER_SITE  # step 1 is warm-up
    assert not waiting[0].is_explained and recompile_json(waiting[0])["explained"] is False
    assert waiting[0].brief() == "+1 ops" and waiting[0].is_explained  # compared when asked
    found = [f for f in analyze(run_info(steps=30), executions, grows).findings if f.kind == "recompile"]
    assert sum(f.details["recompiles"] for f in found) == sum(len(f.executions) for f in found) == 28
    assert sum(f.details["compared"] for f in found) == EXPLAINED_PER_SITE
    [counted] = [f for f in found if f.details["recompiles"] > f.details["compared"]]  # the site's largest group
    assert f"the first {counted.details['compared']} compared each the same kind of change" in counted.message

    shapes = {f"r{r}": chain_ir(12, rows=r) for r in range(16, 46)}  # the same ops, a new batch size
    executions = [ex(i, step=i, graph=f"r{16 + i}", cache="miss") for i in range(30)]
    assert not any(isinstance(r, PendingRecompile) for r in explain_recompiles(executions, shapes))
    [finding] = analyze(run_info(steps=30), executions, shapes).findings
    assert finding.kind == "dynamic_shape" and len(finding.details["history"]) == 28


def test_json_report_lists_a_graph_pairs_changes_once(tmp_path: Path) -> None:
    # A cache thrashing between two known graphs: every execution a miss. 100,000 such
    # misses made a 988 MB report when each repeated its changes.
    graphs = [GraphRecord("g0", 40, chain_ir(40, 16), "", 0), GraphRecord("g1", 40, chain_ir(40, 24), "", 1)]
    path = tmp_path / "thrash.trace"
    misses = 2000
    write_trace(path, (execution(i, step=i, graph=f"g{i % 2}", cache="miss", nodes=40) for i in range(misses)), graphs)
    result = subprocess.run([sys.executable, "-m", "lazyviz", "report", str(path), "--format", "json"],
                            capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout) / misses < 1200  # bytes per miss
    report = json.loads(result.stdout)
    assert report["version"] == 2
    listed = [r for r in report["recompiles"] if r["changes"]]
    assert {(r["closest_graph"], r["graph"]) for r in listed} == {("g0", "g1"), ("g1", "g0")} and len(listed) == 2
    first = {(r["closest_graph"], r["graph"]): r["execution"] for r in listed}
    assert all(r["changes_same_as"] == first[(r["closest_graph"], r["graph"])]
               for r in report["recompiles"] if not r["changes"] and r["explained"] and not r["warmup"])
