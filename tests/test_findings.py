"""Unit tests of lazyviz.analysis.findings and failures on IR made here (no torch):
root causes first, one finding per cause, and no finding on code that is right."""
from __future__ import annotations

from builders import IR16, IR24, clean, ex, run_info

from lazyviz.analysis import analyze
from lazyviz.analysis.blocks import repeated_block
from lazyviz.analysis.budget import Budget, check_budget
from lazyviz.analysis.failures import headline, promoted_scalars
from lazyviz.analysis.findings import find_all
from lazyviz.analysis.findings.extra_sync import extra_sync_findings
from lazyviz.analysis.findings.fallback import fallback_findings
from lazyviz.analysis.findings.missing_mark_step import growth_findings
from lazyviz.analysis.ir import parse_ir
from lazyviz.analysis.recompiles import explain_recompiles
from lazyviz.trace.model import Failure, Frame
from lazyviz.trace.synthetic import chain_ir

BLOCK = ("aten::mul", "aten::addcmul", "aten::sqrt", "aten::div", "aten::add")


def unrolled_ir(iterations: int, chained: bool, built_in: tuple[str, ...] = (), block: tuple[str, ...] = BLOCK) -> str:
    """A block of ops `iterations` times in one graph: each iteration reads the previous
    one's result (a loop without mark_step()), or its own input (an optimizer updating
    one parameter after another). built_in: the functions the block's ops were built in,
    in turn, as the IR's locations record them."""
    lines = ["IR {"]
    node = 0
    previous = None
    for _ in range(iterations):
        lines.append(f"  %{node} = [Float[8]] lazy_tensors::device_data(), device=CPU0, NodeType=D")
        value = f"%{previous}" if chained and previous is not None else f"%{node}"
        node += 1
        for number, op in enumerate(block):
            where = f", location={built_in[number % len(built_in)]}@model.py:{40 + number}" if built_in else ""
            lines.append(f"  %{node} = [Float[8]] {op}({value}){where}, NodeType=N")
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


def test_a_modules_own_loop_in_its_forward_is_not_a_missing_mark_step() -> None:
    # mnist_rnn's LSTM as its cell over 28 rows: one forward's graph holds the 28 cells,
    # as it must. A loop's iterations also build their loss or update outside forward.
    for built_in, found in ((("forward",), []), (("forward", "<genexpr>"), []),
                            (("forward", "train"), ["missing_mark_step"]),
                            ((), ["missing_mark_step"])):
        ir = unrolled_ir(8, True, built_in)
        findings = growth_findings([ex(0, cause="item", graph="g", nodes=48)], {"g": ir})
        assert [f.kind for f in findings] == found, built_in
    # time_sequence_prediction with its split edited: each time step's piece is a narrow
    # that split_lowered made before the loop, and LTC builds a view's node where it is
    # used, so each iteration holds a slice "built in" split_lowered. Still forward's loop.
    sliced = ("aten::slice_copy", *BLOCK[1:])
    for built_in, found in ((("split_lowered", "forward", "forward", "forward", "forward"), []),
                            (("forward", "forward", "train", "forward", "forward"), ["missing_mark_step"])):
        ir = unrolled_ir(8, True, built_in, sliced)
        findings = growth_findings([ex(0, cause="item", graph="g", nodes=48)], {"g": ir})
        assert [f.kind for f in findings] == found, built_in


def _data(node: int, shape: str) -> str:
    return f"  %{node} = [Float[{shape}]] lazy_tensors::device_data(), device=CPU0, NodeType=D"


def stack_ir(repeats: int, layers: bool, uploads: int = 1) -> str:
    """The same chained block `repeats` times: a model's layers, each reading its own two
    weights and biases and handing its activation on, or a loop's iterations, each
    reading what it uploads (a batch, a sampler's noise) and handing the updated weight on."""
    lines = ["IR {", _data(0, "4,8"), _data(1, "8,8"), _data(2, "8"), _data(3, "8,8"), _data(4, "8")]
    x, w1, b1, w2, b2, node = "%0", "%1", "%2", "%3", "%4", 5
    for _ in range(repeats):
        if layers:  # its own weights and biases
            lines += [_data(node, "8,8"), _data(node + 1, "8"), _data(node + 2, "8,8"), _data(node + 3, "8")]
            w1, b1, w2, b2 = (f"%{node + i}" for i in range(4))
            node += 4
        else:  # what it uploads, read by the block's first op
            lines += [_data(node + i, "4,8") for i in range(uploads)]
            x = ", ".join(f"%{node + i}" for i in range(uploads))
            node += uploads
        lines += [f"  %{node} = [Float[4,8]] aten::mm({x}, {w1}), NodeType=N",
                  f"  %{node + 1} = [Float[4,8]] aten::add(%{node}, {b1}), NodeType=N",
                  f"  %{node + 2} = [Float[4,8]] aten::tanh(%{node + 1}), NodeType=N",
                  f"  %{node + 3} = [Float[4,8]] aten::mm(%{node + 2}, {w2}), NodeType=N",
                  f"  %{node + 4} = [Float[4,8]] aten::add(%{node + 3}, {b2}), NodeType=N"]
        if layers:
            lines.append(f"  %{node + 5} = [Float[4,8]] aten::mul(%{node + 4}, {x}), NodeType=N")
            x = f"%{node + 5}"
        else:
            lines.append(f"  %{node + 5} = [Float[8,8]] aten::mul({w1}, %{node + 4}), NodeType=N")
            w1 = f"%{node + 5}"
        node += 6
    lines[-1] += ", ROOT=0"
    return "\n".join(lines + ["}"]) + "\n"


def test_a_stack_of_layers_with_their_own_weights_is_not_a_loop() -> None:
    # makemore's 4 transformer blocks in one step's graph read 13 weight tensors each and
    # hand 4 values on: the forward's structure, where a mark_step() has nothing to cut.
    # An unrolled training loop reads its batch and hands every updated parameter on.
    for layers, uploads in ((True, 0), (False, 1), (False, 3)):
        found = growth_findings([ex(0, cause="item", graph="g", nodes=60)], {"g": stack_ir(6, layers, uploads)})
        assert [f.kind for f in found] == ([] if layers else ["missing_mark_step"]), (layers, uploads)


def test_the_repeated_block_of_a_long_step_is_found_quickly() -> None:
    step = [f"aten::op{i % 37}" for i in range(300)]  # a training step of 300 ops
    ops = ["aten::a", "aten::b"] + step * 5 + ["aten::sum"]
    block, repeats, start = repeated_block(ops, max_period=1024, min_covered=len(ops) // 2)
    assert (len(block), repeats, start) == (300, 5, 2)
    assert repeated_block(ops) is None or repeated_block(ops)[0] != block  # 64 ops at most by default


def test_missing_mark_step_ranks_first_and_says_what_it_inflates() -> None:
    # No step at all: a fallback's syncs inside the uncut loop each run everything pending.
    executions = []
    for i in range(5):
        executions.append(ex(2 * i, step=0, cause="fallback", detail="aten::sin", fallback_ops={"aten::sin": 1},
                             sync_ms=500.0, graph=f"g{i}", nodes=40, line=20, cache="miss"))
        executions.append(ex(2 * i + 1, step=0, cause="item", graph=f"h{i}", nodes=20 * (i + 1), line=30,
                             sync_ms=1.0, cache="miss"))
    findings = analyze(run_info(steps=0), executions, {}).findings
    assert findings[0].kind == "missing_mark_step"
    fallback = next(f for f in findings if f.kind == "fallback")
    assert fallback.cost_ms > findings[0].cost_ms  # ranked below it all the same
    assert "fix the missing mark_step() finding first" in fallback.message
    # On PyTorch/XLA the call that cuts the graph is torch_xla.sync(): the note names it.
    xla = find_all(executions, 0, [], {}, {"mark_step": "torch_xla.sync()", "step_closure": "xm.add_step_closure"})
    assert "fix the missing torch_xla.sync() finding first" in next(f for f in xla if f.kind == "fallback").message


def test_a_fallback_before_the_uncut_loop_is_not_blamed_on_it_nor_ranked_below_it() -> None:
    # The training loop's fallbacks, then a sample loop whose graph grows a token a read
    # (its mark_step() goes in that loop, after all the training): the fallbacks cost most
    # and are not the sample loop's to fix.
    executions = [ex(i, step=0, cause="fallback", detail="aten::sin", fallback_ops={"aten::sin": 1},
                     sync_ms=500.0, graph=f"g{i}", nodes=40, line=20, cache="miss") for i in range(4)]
    executions += [ex(4 + i, step=0, cause="item", graph=f"h{i}", nodes=20 * (i + 1), line=30, sync_ms=1.0,
                      cache="miss") for i in range(5)]
    findings = analyze(run_info(steps=0), executions, {}).findings
    fallback = next(f for f in findings if f.kind == "fallback")
    assert "finding first" not in fallback.message
    assert findings[0] is fallback  # it costs the run most; the small uncut graph, less


def test_fallbacks_of_one_call_are_one_finding() -> None:
    call = "scaled_dot_product_attention"
    executions = [ex(i, cause="fallback", detail=op, fallback_ops={op: 1}, call=call)
                  for i, op in enumerate(["aten::all.dim", "aten::isneginf", "aten::all.dim"])]
    executions.append(ex(3, cause="fallback", detail="aten::sin", fallback_ops={"aten::sin": 1}, call="other"))
    findings = fallback_findings(executions, 4)
    assert len(findings) == 2
    merged = next(f for f in findings if f.details.call == call)
    assert merged.details.ops == ("aten::all.dim", "aten::isneginf") and merged.executions == (0, 1, 2)
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
    assert len(finding.details.sites) == 2 and "2 sync sites" in finding.message
    assert len(finding.executions) == sum(not r.warmup for r in recompiles)


def _sequence_graph(rows: int, first_step: bool) -> str:
    """A forward of `rows` rows and their mask, then an optimizer update: its first step
    builds the state from zeros (four ops), later steps read it (one input)."""
    lines = [f"  %0 = [Float[{rows},8]] lazy_tensors::device_data(), location=<module>@t.py:5, NodeType=D",
             f"  %1 = [Float[{rows},8]] lazy_tensors::device_data(), location=<module>@t.py:6, NodeType=D"]
    for at in range(2, 8):
        lines.append(f"  %{at} = [Float[{rows},8]] aten::tanh(%{at - 1}), location=<module>@t.py:7, NodeType=T")
    lines.append(f"  %8 = [Float[{rows},8]] aten::mul(%7, %0), location=<module>@t.py:7, NodeType=M")
    if first_step:
        lines += ["  %9 = [Float[]] prim::Constant(), value=0, location=<module>@t.py:9, NodeType=C",
                  "  %10 = [Float[8]] aten::expand(%9), size=8, location=<module>@t.py:9, NodeType=E",
                  "  %11 = [Float[8]] aten::mul(%10, %10), location=<module>@t.py:9, NodeType=M",
                  "  %12 = [Float[8]] aten::add(%11, %10), location=<module>@t.py:9, NodeType=A"]
    else:
        lines += ["  %9 = [Float[8]] lazy_tensors::device_data(), location=<module>@t.py:9, NodeType=D"]
    last = len(lines) - 1
    lines.append(f"  %{last + 1} = [Float[{rows},8]] aten::mul(%8, %{last}), ROOT=0, location=<module>@t.py:10, "
                 "NodeType=M")
    return "IR {\n" + "\n".join(lines) + "\n}\n"


def test_a_recompile_is_explained_by_its_fewest_causes() -> None:
    """Lengths 16, 24, 16, 24: step 2's graph (16 rows, the optimizer's state read) was
    never compiled. Against step 0's (16 rows, the state built) a few ops differ; against
    step 1's (24 rows, the state read) the inputs' shapes differ, and every node after
    them with them. The fewest causes are the answer: the shapes, with their fix, not
    "another path"."""
    executions, irs = [], {}
    for step, rows in enumerate((16, 24, 16, 24)):
        graph = f"g{rows}-{step == 0}"
        irs[graph] = _sequence_graph(rows, first_step=step == 0)
        executions.append(ex(step, step=step, graph=graph, cache="miss" if step < 3 else "hit", line=10))
    (recompile,) = [r for r in explain_recompiles(executions, irs) if not r.warmup]
    assert recompile.closest == "g24-False"
    assert [(c.kind, c.before, c.after) for c in recompile.diff.origins] == [("input_shape", "Float[24,8]", "Float[16,8]")] * 2
    (finding,) = [f for f in analyze(run_info(steps=4), executions, irs).findings if f.kind == "recompile"]
    assert "another path" not in finding.fix and "pad or bucket" in finding.fix


def test_a_lines_several_syncs_in_a_step_are_each_compared_with_their_own_before() -> None:
    # clip_grad_norm_'s fallback syncs once per parameter at one line; two parameters'
    # graphs can print the same IR. Each step's k-th sync there is compared with the k-th
    # of the steps before (the slice bound changed), not with its neighbour (the same IR:
    # "inputs share buffers differently" was the finding, with a wrong fix).
    executions, irs = [], {}
    for step in range(6):
        for parameter in ("w1", "w2"):
            graph = f"{parameter}-{step}"
            irs[graph] = SLICE_IR.format(start=step * 20, end=step * 20 + 20, line=193)
            executions.append(ex(len(executions), step=step, graph=graph, cache="miss", line=193, cause="fallback",
                                 detail="aten::linalg_vector_norm"))
    recompiles = [r for r in explain_recompiles(executions, irs) if not r.warmup]
    assert [r.closest for r in recompiles] == [f"{p}-{s - 1}" for s in range(2, 6) for p in ("w1", "w2")]
    findings = [f for f in analyze(run_info(steps=6), executions, irs).findings if f.kind == "recompile"]
    assert findings and all("share buffers" not in f.message for f in findings)
    assert "start=" in findings[0].message or "slice" in findings[0].fix


def test_a_loop_that_starts_later_has_its_own_warm_up() -> None:
    # An evaluation loop after 10 training steps: `correct = 0; correct += ...` makes its
    # first graph take a Python number and its second a tensor. That is its warm-up, as
    # steps 0 and 1 are the training loop's; a change at its third step is not.
    executions = [ex(i, step=i, graph="train", cache="miss" if i == 0 else "hit", line=10) for i in range(10)]
    executions += [ex(10, step=10, graph="eval-0", cache="miss", line=20),
                   ex(11, step=11, graph="eval-1", cache="miss", line=20),
                   ex(12, step=12, graph="eval-2", cache="miss", line=20)]
    irs = {"train": IR16, "eval-0": IR16, "eval-1": IR24, "eval-2": chain_ir(6, rows=32)}
    recompiles = explain_recompiles(executions, irs)
    assert [(r.execution, r.warmup) for r in recompiles] == [(11, True), (12, False)]


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
    assert finding.details.node == "%2" and finding.details.reaches == "%5"
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


def test_an_allocation_the_device_refused_names_the_tensor_and_its_line() -> None:
    # TorchScript's IR; CPU's allocator message. 268,435,456 floats are the 1 GiB asked for;
    # the bigger sum's input is not it.
    ir = """IR {
  %0 = [Float[268435456]] lazy_tensors::device_data(), location=step@big.py:11, device=CPU0, NodeType=D
  %1 = [Float[536870912]] aten::repeat(%0), location=step@big.py:12, NodeType=N
  %2 = [Float[]] aten::sum(%1), location=step@big.py:13, NodeType=N, ROOT=0
}"""
    frames = [Frame("/w/big.py", 14, "<module>")]
    error = "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 1073741824 bytes."
    run = run_info(steps=1, argv=["big.py"], exit_status=1, error_frames=frames, error=error)
    [finding] = [f for f in analyze(run, [ex(0, graph="big")], {"big": ir}).findings if f.kind == "crash"]
    assert finding.details.bytes == 2**30 and finding.details.built_at == "big.py:11"
    assert "1.0 GiB (Float[268435456], lazy_tensors::device_data, built at big.py:11)" in finding.message
    assert finding.executions == (0,) and "smaller" in finding.fix
    # Without a size in the message: the largest tensor of the graph.
    run = run_info(steps=1, argv=["big.py"], exit_status=1, error_frames=frames, error="RuntimeError: out of memory")
    [finding] = [f for f in analyze(run, [ex(0, graph="big")], {"big": ir}).findings if f.kind == "crash"]
    assert finding.details.built_at == "big.py:12" and "2.0 GiB" in finding.message


def test_a_failed_graph_names_the_op_the_backends_message_names() -> None:
    # PyTorch/XLA's compile error for a custom call no one registered: "custom call" is
    # the op xla::custom_call; XLA records a library wrapper's line, so its first use
    # gives the user's.
    ir = """IR {
  %0 = f32[4]{0} xla::device_data(), location=<module>@kernel.py:8, xla_shape=f32[4]{0}
  %1 = (f32[4]{0}) xla::custom_call(%0), location=stablehlo_custom_call@stablehlo_custom_call.py:16
  %2 = f32[4]{0} aten::add(%1, %0), location=<module>@kernel.py:11, xla_shape=f32[4]{0}, ROOT=0
}"""
    error = "ValueError: No registered implementation for untyped custom call to my_kernel for Host"
    executions = [ex(0, graph="ok", cache="miss"), ex(1, graph="bad", cache="miss")]
    [finding, *_] = analyze(run_info(steps=1, failures=[Failure(1, error)]), executions, {"bad": ir}).findings
    assert finding.kind == "failed_execution" and finding.details.op == "xla::custom_call"
    assert finding.details.used_at == "kernel.py:11" and "custom call to my_kernel" in finding.message
    # A message that names no op of the graph: no op is blamed.
    [finding, *_] = analyze(run_info(steps=1, failures=[Failure(1, "RuntimeError: the device was lost")]),
                            executions, {"bad": ir}).findings
    assert finding.details.op is None and "IR tab" in finding.fix


# -- from the run's rows and IR: extra syncs, fallbacks, loops and recompiles ----------
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
    executions = [e for i in range(4) for e in (ex(2 * i, step=i, cause="other", detail="distributed.all_reduce()"),
                                                 ex(2 * i + 1, step=i, cache="miss" if i == 0 else "hit"))]
    [finding] = extra_sync_findings(executions, 4)
    assert "one collective per step" in finding.fix


def test_a_sync_before_the_first_step_is_set_up_not_an_extra_sync() -> None:
    # xm.broadcast_master_param() before the loop: its execution is in step 0, before its graph.
    broadcast = ex(0, step=0, cause="other", detail="xm.broadcast_master_param()")
    steps = [ex(i + 1, step=i, cache="miss" if i == 0 else "hit") for i in range(4)]
    assert extra_sync_findings([broadcast, *steps], 4) == []
    late = ex(2, step=1, cause="other", detail="xm.broadcast_master_param()")
    assert len(extra_sync_findings([*steps[:2], late, *steps[2:]], 4)) == 1


def test_fallback_finding_counts_calls_and_forced_executions() -> None:
    executions = [ex(i, step=i, cause="fallback", detail="aten::mse_loss", fallback_ops={"aten::mse_loss": 1})
                  for i in range(4)]
    [finding] = fallback_findings(executions, 4)
    assert finding.details.to_json() == {"op": "aten::mse_loss", "calls": 4, "executions_forced": 4, "per_step": 1.0,
                                         "call": None, "library_line": None, "library_fix": False, "ops": []}
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
    assert finding.kind == "missing_mark_step" and finding.details.repeats == 10
    assert "torch._lazy.mark_step()" in finding.fix


def test_input_shape_recompile_after_warmup_is_explained() -> None:
    executions = [ex(i, step=i, graph="b16", cache="miss" if i == 0 else "hit") for i in range(4)]
    executions.append(ex(4, step=4, graph="b24", cache="miss"))
    recompiles = explain_recompiles(executions, {"b16": IR16, "b24": IR24})
    assert len(recompiles) == 1 and not recompiles[0].warmup
    assert recompiles[0].closest == "b16" and "Float[16,64] -> Float[24,64]" in recompiles[0].headline()
    [finding] = analyze(run_info(steps=5), executions, {"b16": IR16, "b24": IR24}).findings
    assert finding.kind == "recompile" and "pad or bucket" in finding.fix


def _full_batch(iterations: int, late: int | None = None, after: tuple[str, ...] = ("b32",)) -> tuple[list, list]:
    """A full-batch program without mark_step() that steps an optimizer (gat, gcn): each
    iteration a train read, then the evaluation's reads of the train and validation index
    sets (16 and 24 rows, one line); after the loop the test set's reads (`after`).
    late: the iteration where a new 32-row set first comes. (executions, optimizer marks)"""
    executions, marks, seen = [], [], set()

    def read(graph: str, line: int) -> None:
        executions.append(ex(len(executions), step=0, cause="item", line=line, graph=graph,
                             cache="hit" if graph in seen else "miss"))
        seen.add(graph)

    for iteration in range(iterations):
        read("train", 10)
        marks.append(len(executions))
        for graph in ("b16", "b16", "b24", "b24") + (("b32",) if iteration == late else ()):
            read(graph, 20)
    for graph in after:
        read(graph, 20)
    return executions, marks


def test_fixed_index_sets_of_a_full_batch_program_compile_once_in_its_first_iterations_and_after_its_loop() -> None:
    """gcn's train, validation and test index sets go through one line at other sizes:
    each compiles once, in the loop's first iterations or once after it. Neither a
    dynamic-shape finding ("pad or bucket batches ... drop_last") nor a recompile."""
    irs = {"train": chain_ir(6, rows=8), "b16": IR16, "b24": IR24, "b32": chain_ir(6, rows=32)}
    executions, marks = _full_batch(6)
    info = run_info(steps=0, optimizer_steps=len(marks), optimizer_marks=marks)
    assert [r for r in explain_recompiles(executions, irs, optimizer_marks=marks, optimizer_steps=len(marks))
            if not r.warmup] == []
    assert not [f for f in analyze(info, executions, irs).findings if f.kind in ("recompile", "dynamic_shape")]
    # Counted by syncs alone (the marks unknown), the same reads were recompiles.
    assert [r for r in explain_recompiles(executions, irs) if not r.warmup]
    # A set that first comes in a later iteration is still a recompile, said at its step.
    executions, marks = _full_batch(6, late=4, after=())
    info = run_info(steps=0, optimizer_steps=len(marks), optimizer_marks=marks)
    [recompile] = [r for r in explain_recompiles(executions, irs, optimizer_marks=marks, optimizer_steps=len(marks))
                   if not r.warmup]
    assert "-> Float[32,64]" in recompile.headline()
    # After the loop only its first reads at a site are its own warm-up: a sequence that
    # grows token by token (a generation after training) recompiles from its third.
    irs.update({f"g{n}": chain_ir(6, rows=40 + n) for n in range(5)})
    executions, marks = _full_batch(4, after=tuple(f"g{n}" for n in range(5)))
    after_loop = [r for r in explain_recompiles(executions, irs, optimizer_marks=marks, optimizer_steps=len(marks))
                  if not r.warmup]
    assert [r.execution for r in after_loop] == [e.index for e in executions[-3:]]


def test_an_extra_syncs_cost_per_step_leaves_out_the_warm_up_compiles_and_its_rate_is_rounded() -> None:
    """gat on PyTorch/XLA: '4 extra executions per step (3986.25 ms per step)' beside 'sync
    per iteration after warm-up 1,306.8 ms': the first steps compile what the rest reuse."""
    executions = []
    for step in range(6):
        reads = 3 if step % 3 else 2  # 8 reads in 3 steps, 16 in 6: 2.67 a step
        for _ in range(reads):
            executions.append(ex(len(executions), step=step, cause="item", line=12,
                                 sync_ms=2000.0 if step < 2 else 10.0, cache="miss" if step < 2 else "hit"))
        executions.append(ex(len(executions), step=step, sync_ms=5.0))
    [finding] = extra_sync_findings(executions, 6)
    assert finding.message.startswith("item forces 2.67 extra executions per step in 6 of 6 steps "
                                      "(27.50 ms per step)")  # 11 reads at 10 ms over the 4 steps after warm-up
    assert finding.details.ms_per_step == 27.5


def test_a_growing_graph_is_found_where_one_line_syncs_two_kinds_of_graph_in_turn() -> None:
    """generate()'s line: its end-of-sequence check falls back (its graph holds the whole
    decode so far, +470 nodes a token) and its flag's `if` syncs a small graph (+23), in
    turn. Side by side the sizes jump up and down; each kind alone grows steadily."""
    from lazyviz.analysis.findings.missing_mark_step import growing_site_findings

    executions = []
    for token in range(8):
        executions.append(ex(len(executions), step=0, cause="fallback", detail="aten::isin.Tensor_Tensor",
                             graph=f"isin{token}", nodes=4 + 470 * token, cache="miss"))
        executions.append(ex(len(executions), step=0, cause="bool", detail="bool(tensor)", graph=f"flag{token}",
                             nodes=7 + 23 * token, cache="miss"))
    [finding] = growing_site_findings(executions)
    assert finding.message.startswith("the graph aten::isin.Tensor_Tensor runs here grows by about 470 nodes")
    assert len(finding.executions) == 8
    # One kind of graph at a line whose size comes and goes is no loop.
    steady = [ex(i, step=0, cause="item", graph=f"g{i % 2}", nodes=(10, 400)[i % 2]) for i in range(12)]
    assert growing_site_findings(steady) == []
    # Nor two graphs of one kind taking turns beside another kind (transformer_adamw's two
    # attention layers' isneginf, 35 -> 108 -> 34 -> 99, and the step's own syncs).
    turns = []
    for i in range(6):
        turns.append(ex(len(turns), step=i // 2, cause="fallback", detail="aten::isneginf", graph=f"a{i % 2}",
                        nodes=(35, 108)[i % 2] - (i // 2)))
        turns.append(ex(len(turns), step=i // 2, cause="fallback", detail="aten::lerp.Scalar", graph="l", nodes=5))
    assert growing_site_findings(turns) == []


def test_an_op_that_falls_back_in_the_forward_and_in_backward_is_a_finding_for_each() -> None:
    """gat: its forward's torch.where falls back (38 calls at its line), and so does the
    where of that op's backward inside loss.backward(), with indexing's _index_put_impl_.
    Not 'Tensor.backward() falls back through where.self, ...' for all 56 where calls."""
    executions = []
    for step in range(4):
        for _ in range(3):
            executions.append(ex(len(executions), step=step, cause="fallback", detail="aten::where.self", line=120,
                                 function="forward", fallback_ops={"aten::where.self": 1}))
        for op in ("aten::where.self", "aten::_index_put_impl_"):
            executions.append(ex(len(executions), step=step, cause="fallback", detail=op, line=265,
                                 call="Tensor.backward", fallback_ops={op: 1}))
        executions.append(ex(len(executions), step=step))
    forward, backward = fallback_findings(executions, 4)
    assert forward.message.startswith("aten::where.self falls back to the CPU: 12 calls, forcing 12 executions")
    assert forward.frame.line == 120 and "masked_fill" in forward.fix
    assert backward.message.startswith("Tensor.backward() falls back to the CPU through 2 ops (aten::where.self, "
                                       "aten::_index_put_impl_): 8 calls, forcing 8 executions")
    assert "aten::where.self comes from the backward of torch.where" in backward.fix
    assert "look for an option" not in backward.fix


def test_a_final_test_after_the_last_mark_step_compiles_once_and_is_no_recompile() -> None:
    """gat with mark_step(): its evaluation reads the validation set at a line every step,
    and after the loop the test set at the same line: 'step 6: new graph', listed like a
    per-step recompile, though it ran once after the loop."""
    irs = {"step": chain_ir(6, rows=8), "b16": IR16, "b32": chain_ir(6, rows=32)}

    def run(new_at: int) -> list:
        executions, seen = [], set()
        for step in range(7):
            for graph, cause, line in (("b32" if step == new_at else "b16", "item", 20), ("step", "mark_step", 30)):
                if step < 6 or cause == "item":  # step 6: after the loop's last mark_step()
                    executions.append(ex(len(executions), step=step, cause=cause, line=line, graph=graph,
                                         cache="hit" if graph in seen else "miss"))
                seen.add(graph)
        return [r for r in explain_recompiles(executions, irs) if not r.warmup]

    assert run(new_at=6) == []
    # The same new graph inside the loop, past warm-up, is a recompile.
    [recompile] = run(new_at=4)
    assert recompile.step == 4


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
    assert finding.kind == "recompile" and finding.details.recompiles == 6  # syncs 3 to 8 at line 160
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


def _made_on_device(rows: int) -> str:
    """PyTorch/XLA's IR of `torch.randn(rows, 8, device=xla)`: the size is in the graph."""
    return f"""IR {{
  %0 = s64[] xla::device_data(), location=<module>@t.py:7, xla_shape=s64[]
  %1 = f32[] prim::Constant(), location=<module>@t.py:7, xla_shape=f32[]
  %2 = f32[{rows},8]{{1,0}} aten::expand(%1), location=<module>@t.py:7, xla_shape=f32[{rows},8]{{1,0}}
  %3 = f32[] prim::Constant(), location=<module>@t.py:7, xla_shape=f32[]
  %4 = f32[{rows},8]{{1,0}} aten::expand(%3), location=<module>@t.py:7, xla_shape=f32[{rows},8]{{1,0}}
  %5 = f32[{rows},8]{{1,0}} aten::normal(%4, %2, %0), location=<module>@t.py:7, xla_shape=f32[{rows},8]{{1,0}}
  %6 = f32[] aten::sum(%5), location=<module>@t.py:8, xla_shape=f32[], ROOT=0
}}
"""


def test_a_size_made_on_the_device_gets_the_batch_advice() -> None:
    """A batch made on the device at another size (XLA: in the graph, not an input) is a
    shape change, not "the code took another path"."""
    irs = {"b16": _made_on_device(16), "b12": _made_on_device(12)}
    executions = [ex(i, step=i, graph="b16", cache="miss" if i == 0 else "hit") for i in range(3)]
    executions.append(ex(3, step=3, graph="b12", cache="miss"))
    [recompile] = explain_recompiles(executions, irs)
    assert {c.kind for c in recompile.diff.origins} == {"shape"}
    [finding] = analyze(run_info(steps=4), executions, irs).findings
    assert finding.kind == "recompile" and "pad or bucket" in finding.fix and "another path" not in finding.fix
    assert "step 3 recompiled: expand shape f32[16,8] -> f32[12,8], built at t.py:7" in finding.message


def test_one_loop_without_mark_step_is_one_finding_in_every_output() -> None:
    # A word-LM-like loop: unrolled blocks of different lengths synced at several lines of
    # one function (each fallback's and .item()'s graph). One cause: one finding, in the
    # JSON and in fix's list, covering every graph and site.
    executions, texts = [], {}
    bodies = [("aten::mm", "aten::tanh"), ("aten::mm", "aten::relu", "aten::add"), ("aten::mul", "aten::sigmoid"),
              ("aten::mm", "aten::tanh", "aten::mul", "aten::add")]
    for number, (line, body) in enumerate(zip((80, 81, 82, 91), bodies)):
        graph = f"loop{number}"
        texts[graph] = chain_ir(41, ops=body)  # a different unrolled block in each graph
        executions.append(ex(number, cause="item" if line == 91 else "fallback", detail="aten::sin", line=line,
                             function="train", graph=graph, nodes=41, cache="miss"))
    findings = [f for f in analyze(run_info(steps=None), executions, texts).findings if f.kind == "missing_mark_step"]
    assert len(findings) == 1
    [loop] = findings
    assert set(loop.details.graphs) == set(texts) and len(loop.details.sites) == 4
    assert loop.executions == (0, 1, 2, 3) and "one cause: 3 more graphs show the same loop" in loop.message


def test_a_state_read_to_the_host_one_tensor_at_a_time_is_a_finding() -> None:
    """torch.save of a state_dict on PyTorch/XLA: after the loop, one line reads 12 tensors,
    each its own graph, back to back: the run's costliest site, with a finding."""
    executions = [ex(i, step=i, graph="step", cache="miss" if i == 0 else "hit", sync_ms=5.0) for i in range(4)]
    executions += [ex(4 + i, step=4, cause="cpu", detail="Tensor.cpu()", graph=f"p{i}", cache="miss", sync_ms=40.0,
                      line=55) for i in range(12)]
    irs = {"step": chain_ir(20), **{f"p{i}": chain_ir(5 + i) for i in range(12)}}
    [finding] = [f for f in analyze(run_info(steps=4), executions, irs).findings if f.kind == "one_by_one_reads"]
    assert finding.frame.line == 55 and len(finding.executions) == 12
    assert finding.message.startswith("12 reads to the host at this line (Tensor.cpu()), up to 12 in a row")
    assert "12 graphs" in finding.message and "mark_step" in finding.fix
    # The same reads, one an iteration with a step between each: not one at a time.
    spread = []
    for i in range(12):
        spread += [ex(2 * i, step=i, graph="step", sync_ms=5.0), ex(2 * i + 1, step=i, cause="cpu", graph=f"p{i}",
                                                                   sync_ms=40.0, line=55)]
    assert not [f for f in analyze(run_info(steps=12), spread, irs).findings if f.kind == "one_by_one_reads"]


def test_an_evaluation_loops_read_of_each_batch_is_not_one_at_a_time() -> None:
    """minGPT's adder: each batch of the evaluation reads `(pred == gt).cpu()`, 95 reads in a
    row at one line, one graph each time, each built in the 15 ms of Python before it: a
    loop's one sync per iteration, which a mark_step() first would not change."""
    def reads(build_ms: float) -> list:
        executions = [ex(i, step=i, graph="step", sync_ms=5.0) for i in range(4)]
        return executions + [ex(4 + i, step=4, cause="cpu", detail="Tensor.cpu()", graph="batch", sync_ms=20.0,
                                trace_ms=build_ms, line=168) for i in range(12)]
    irs = {"step": chain_ir(20), "batch": chain_ir(30)}
    assert not [f for f in analyze(run_info(steps=4), reads(15.5), irs).findings if f.kind == "one_by_one_reads"]
    # The same graph read back to back with nothing built between: tensors already pending, one at a time.
    [finding] = [f for f in analyze(run_info(steps=4), reads(0.05), irs).findings if f.kind == "one_by_one_reads"]
    assert finding.details.in_a_row == 12 and finding.details.graphs == 1


def test_a_fallback_over_two_host_calls_is_their_work_not_a_finding_of_its_own() -> None:
    """dcgan's two save_image() calls: the copy fallback counted over both is inside them."""
    from lazyviz.analysis.findings import Details, Finding, HostCallDetails, _absorbed

    def at(kind: str, line: int, executions: tuple[int, ...]) -> Finding:
        details = HostCallDetails(call="save_image") if kind == "host_call" else Details()
        return Finding(kind, "warning", kind, Frame("/w/main.py", line, "<module>"), executions, details=details)

    real, fake = at("host_call", 265, (10, 11, 12)), at("host_call", 269, (20, 21, 22))
    copy = at("fallback", 265, (11, 21))
    kept = _absorbed([real, copy, fake, at("fallback", 248, (3, 11))])
    assert [(f.kind, f.frame.line) for f in kept] == [("host_call", 265), ("host_call", 269), ("fallback", 248)]
    assert kept[0].details.absorbed == kept[1].details.absorbed == ("fallback",)


def test_a_loop_with_one_step_among_many_optimizer_steps_still_misses_mark_step() -> None:
    """minGPT's adder after its crashes were fixed: the checkpoint's state_on_cpu ran one
    mark_step() at iteration 0, then the loop stepped its optimizer on with no sync at
    all. One step among five optimizer steps is a loop without mark_step() all the same."""
    executions = [ex(i, step=0 if i < 3 else 1, graph=f"g{i}", nodes=40) for i in range(4)]
    for steps, found in ((0, True), (1, True), (4, False)):
        info = run_info(steps=steps, optimizer_steps=5, optimizer_marks=[1, 4, 4, 4, 4])
        kinds = [f.kind for f in find_all(executions, steps, [], {}, run=info)]
        assert ("missing_mark_step" in kinds) == found, steps


def test_a_torch_module_that_is_the_op_gets_the_ops_equivalent() -> None:
    """time_sequence_prediction's criterion = nn.MSELoss(): mse_loss falls back inside
    MSELoss.forward(), torch's module the user called. The module is the op: its
    equivalent is theirs to write, not "look for an option of that call"."""
    executions = [ex(i, step=i, cause="fallback", detail="aten::mse_loss", fallback_ops={"aten::mse_loss": 1},
                     call="MSELoss.forward") for i in range(4)]
    [finding] = fallback_findings(executions, 4)
    assert "((output - target) ** 2).mean()" in finding.fix and "option" not in finding.fix
    executions = [ex(i, step=i, cause="fallback", detail="aten::where.self", fallback_ops={"aten::where.self": 1},
                     call="MultiheadAttention.forward") for i in range(4)]
    [finding] = fallback_findings(executions, 4)
    assert "masked_fill" not in finding.fix  # torch's where inside MultiheadAttention is not theirs to rewrite


def test_a_fallback_in_a_run_without_steps_is_not_told_to_leave_the_step() -> None:
    from lazyviz.analysis.findings.fallback import _no_lowering_fix

    assert "move it out of the step" in _no_lowering_fix("aten::foo", None, None, 4, 4)
    stepless = _no_lowering_fix("aten::foo", None, None, 4, 0)
    assert "the step" not in stepless and "move it out of the loop that runs it" in stepless
