"""Unit tests of lazyviz.analysis.findings and failures on IR made here (no torch):
root causes first, one finding per cause, and no finding on code that is right."""
from __future__ import annotations

from test_units import ex, run_info

from lazyviz.analysis import analyze
from lazyviz.analysis.budget import Budget, check_budget
from lazyviz.analysis.failures import headline, promoted_scalars
from lazyviz.analysis.findings import fallback_findings, growth_findings, repeated_block
from lazyviz.analysis.ir import parse_ir
from lazyviz.analysis.recompiles import explain_recompiles
from lazyviz.trace.model import Failure, Frame

BLOCK = ("aten::mul", "aten::addcmul", "aten::sqrt", "aten::div", "aten::add")


def unrolled_ir(iterations: int, chained: bool) -> str:
    """A block of ops `iterations` times in one graph: each iteration reads the previous
    one's result (a loop without mark_step()), or its own input (an optimizer updating
    one parameter after another)."""
    lines = ["IR {"]
    node = 0
    previous = None
    for _ in range(iterations):
        lines.append(f"  %{node} = [Float[8]] lazy_tensors::device_data(), device=CPU0, NodeType=D")
        value = f"%{previous}" if chained and previous is not None else f"%{node}"
        node += 1
        for op in BLOCK:
            lines.append(f"  %{node} = [Float[8]] {op}({value}), NodeType=N")
            value = f"%{node}"
            node += 1
        previous = node - 1
    lines[-1] += ", ROOT=0"
    return "\n".join(lines + ["}"]) + "\n"


def test_a_chained_block_is_a_loop_and_side_by_side_blocks_are_not() -> None:
    for chained in (True, False):
        ir = unrolled_ir(8, chained)
        found = growth_findings([ex(0, cause="item", graph="g", nodes=48)], {"g": ir})
        assert [f.kind for f in found] == (["missing_mark_step"] if chained else []), chained


def test_the_repeated_block_of_a_long_step_is_found_quickly() -> None:
    step = [f"aten::op{i % 37}" for i in range(300)]  # a training step of 300 ops
    ops = ["aten::a", "aten::b"] + step * 5 + ["aten::sum"]
    block, repeats, start = repeated_block(ops, max_period=1024, min_covered=len(ops) // 2)
    assert (len(block), repeats, start) == (300, 5, 2)
    assert repeated_block(ops) is None or repeated_block(ops)[0] != block  # 64 ops at most by default


def test_missing_mark_step_ranks_first_and_says_what_it_inflates() -> None:
    # No step at all: a fallback's syncs each run everything pending.
    executions = [ex(i, step=0, cause="fallback", detail="aten::sin", fallback_ops={"aten::sin": 1},
                     sync_ms=500.0, graph=f"g{i}", nodes=40, line=20, cache="miss") for i in range(4)]
    executions += [ex(4 + i, step=0, cause="item", graph=f"h{i}", nodes=20 * (i + 1), line=30, sync_ms=1.0,
                      cache="miss") for i in range(5)]
    findings = analyze(run_info(steps=0), executions, {}).findings
    assert findings[0].kind == "missing_mark_step"
    fallback = next(f for f in findings if f.kind == "fallback")
    assert fallback.cost_ms > findings[0].cost_ms  # ranked below it all the same
    assert "fix the missing mark_step() finding first" in fallback.message


def test_fallbacks_of_one_call_are_one_finding() -> None:
    call = "scaled_dot_product_attention"
    executions = [ex(i, cause="fallback", detail=op, fallback_ops={op: 1}, call=call)
                  for i, op in enumerate(["aten::all.dim", "aten::isneginf", "aten::all.dim"])]
    executions.append(ex(3, cause="fallback", detail="aten::sin", fallback_ops={"aten::sin": 1}, call="other"))
    findings = fallback_findings(executions, 4)
    assert len(findings) == 2
    merged = next(f for f in findings if f.details["call"] == call)
    assert merged.details["ops"] == ["aten::all.dim", "aten::isneginf"] and merged.executions == (0, 1, 2)
    assert f"{call}() falls back to the CPU through 2 ops" in merged.message


SLICE_IR = """IR {{
  %0 = [Long[100,4]] lazy_tensors::device_data(), device=CPU0, location=<module>@main.py:90, NodeType=D
  %1 = [Long[20,4]] aten::slice(%0), dim=0, start={start}, end={end}, step=1, location=get_batch@main.py:139, NodeType=S
  %2 = [Float[20,4]] aten::mul(%1, %1), location=train@main.py:{line}, ROOT=0, NodeType=M
}}
"""


def test_recompiles_from_one_line_at_several_sites_are_one_finding() -> None:
    # The same Python slice bound, baked in as a constant, recompiles the graph of two sync sites.
    executions, irs = [], {}
    for step in range(6):
        for site, line in ((0, 150), (1, 160)):
            graph = f"s{site}-{step}"
            irs[graph] = SLICE_IR.format(start=step * 20, end=step * 20 + 20, line=line)
            executions.append(ex(len(executions), step=step, graph=graph, cache="miss", line=line))
    recompiles = explain_recompiles(executions, irs)
    findings = [f for f in analyze(run_info(steps=6), executions, irs).findings if f.kind == "recompile"]
    assert len(findings) == 1, [f.message for f in findings]
    [finding] = findings
    assert len(finding.details["sites"]) == 2 and "2 sync sites" in finding.message
    assert len(finding.executions) == sum(not r.warmup for r in recompiles)


def test_check_fails_a_run_without_steps_that_misses_the_cache() -> None:
    executions = [ex(i, step=0, cause="item", graph=f"g{i}", cache="miss", nodes=5) for i in range(12)]
    breaches = check_budget(run_info(steps=0, complete=True), executions, [], Budget(allowed_fallbacks=None))
    assert any("cache miss rate after warm-up: 10 of 10" in b for b in breaches)
    hits = [ex(i, step=0, cause="item", graph="g0", cache="miss" if i == 0 else "hit") for i in range(12)]
    assert check_budget(run_info(steps=0, complete=True), hits, [], Budget(allowed_fallbacks=None)) == []


DOUBLE_IR = """IR {
  %0 = [Float[]] lazy_tensors::device_data(), device=CPU0, NodeType=D
  %1 = [Double[]] lazy_tensors::device_data(), location=train@vae.py:92, device=CPU0, NodeType=D
  %2 = [Float[]] aten::mul(%0, %1), location=train@vae.py:92, NodeType=M
  %3 = [Float[32,20]] aten::expand_copy(%2), size=32 20, location=train@vae.py:92, NodeType=E
  %4 = [Float[20,400]] lazy_tensors::device_data(), device=CPU0, NodeType=D
  %5 = [Float[32,400]] aten::mm(%3, %4), location=train@vae.py:92, ROOT=0, NodeType=MM
}
"""


def test_a_dtype_failure_names_the_zero_dim_multiply_and_the_matmul_it_reaches() -> None:
    error = ("The following operation failed in the TorchScript interpreter.\nTraceback of TorchScript (most "
             "recent call last):\nRuntimeError: expected m1 and m2 to have the same dtype, but got: double != float\n")
    assert headline(error) == "expected m1 and m2 to have the same dtype, but got: double != float"
    assert [n.id for n in promoted_scalars(parse_ir(DOUBLE_IR))] == ["%2"]
    executions = [ex(0, step=0, graph="ok", cache="miss"), ex(1, step=0, cause="item", graph="bad", cache="miss")]
    [finding, *_] = analyze(run_info(steps=0, failures=[Failure(1, error)]), executions, {"bad": DOUBLE_IR}).findings
    assert finding.kind == "failed_execution" and finding.severity == "error" and finding.executions == (1,)
    assert finding.details["node"] == "%2" and finding.details["reaches"] == "%5"
    assert "vae.py:92" in finding.message and "0-dim" in finding.message


def test_saving_a_lazy_model_is_explained() -> None:
    # pytorch/examples' word_language_model ends in torch.save(model) on the lazy device.
    frames = [Frame("/w/main.py", 238, "<module>"), Frame("/site-packages/torch/serialization.py", 1224, "persistent_id")]
    run = run_info(steps=0, argv=["main.py"], exit_status=1, error_frames=frames,
                   error="RuntimeError: Attempted to access the data pointer on an invalid python storage.")
    [finding] = [f for f in analyze(run, [ex(0, step=0)], {}).findings if f.kind == "crash"]
    assert finding.severity == "error" and finding.frame == frames[0]
    assert "at serialization.py:1224 in persistent_id(), called from main.py:238" in finding.message
    assert "no storage on the host" in finding.message and "state_dict" in finding.fix
