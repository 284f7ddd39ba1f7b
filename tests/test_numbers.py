"""No number in a printed sentence is unrounded: every kind of finding, its message and
its advice, the text report and `lazyviz fix`'s words, from runs whose every time is a
float with many digits (a third of a millisecond, a seventh). No torch: the rows are
made here."""
from __future__ import annotations

from builders import UNROUNDED, chain_ir, ex, run_info

from lazyviz.analysis import analyze
from lazyviz.analysis.kinds import FindingKind
from lazyviz.analysis.library import Stacks
from lazyviz.trace.model import Failure, Frame

ODD = (1 / 3, 2 / 7, 10 / 3, 1000 / 7)  # times of many digits


def odd(i: int) -> float:
    return ODD[i % len(ODD)] * (1 + i / 9)


def rows(count: int, **fields: object) -> list:
    return [ex(i, sync_ms=odd(i), trace_ms=odd(i + 1), compile_ms=odd(i + 2), execute_ms=odd(i + 3),
               **{name: value(i) if callable(value) else value for name, value in fields.items()})
            for i in range(count)]


def extra_syncs_and_fallbacks() -> tuple:
    executions = []
    for step in range(7):
        executions += [ex(len(executions), step=step, graph="step", cache="miss" if step == 0 else "hit",
                          sync_ms=odd(step)),
                       ex(len(executions) + 1, step=step, cause="item", detail="Tensor.item()", graph="loss",
                          line=30, sync_ms=odd(step + 1)),
                       ex(len(executions) + 2, step=step, cause="item", detail="Tensor.item()", graph="loss",
                          line=31, sync_ms=odd(step + 2)) if step % 3 else
                       ex(len(executions) + 2, step=step, cause="fallback", detail="aten::median", graph="med",
                          fallback_ops={"aten::median": 1}, line=40, sync_ms=odd(step + 3))]
    return run_info(steps=7), executions, {"step": chain_ir(12), "loss": chain_ir(3), "med": chain_ir(4)}


def recompiles_and_dynamic_shapes() -> tuple:
    shapes = {f"r{r}": chain_ir(12, rows=r) for r in range(16, 46)}
    executions = rows(30, step=lambda i: i, graph=lambda i: f"r{16 + i}", cache="miss")
    grows = {"a": chain_ir(10), "b": chain_ir(11), "c": chain_ir(10, rows=24)}
    executions += rows(6, step=lambda i: 30 + i, graph=lambda i: "abcabc"[i], cache=lambda i: "miss" if i < 3 else "hit",
                       line=80)
    return run_info(steps=36), executions, {**shapes, **grows}


def eager_ops() -> tuple:
    """PyTorch/XLA's eager mode: set-up's ops, then one made each step before the compiled one."""
    executions = rows(4, step=0, cause="eager", detail="ops run one at a time (eager mode)", graph="e", line=20)
    for step in range(7):
        executions += [ex(len(executions), step=step, cause="eager", graph="e", line=36, sync_ms=odd(step),
                          detail="ops run one at a time (eager mode)"),
                       ex(len(executions) + 1, step=step, graph="step", cache="miss" if step == 0 else "hit",
                          sync_ms=odd(step + 1), line=37)]
    return run_info(steps=7, backend="xla", names={"mark_step": "torch_xla.sync()", "compile": "torch_xla.compile",
                                                   "step_closure": "xm.add_step_closure"}), executions, {}


def missing_mark_step() -> tuple:
    executions = []
    for i in range(5):
        executions.append(ex(2 * i, step=0, cause="fallback", detail="aten::sin", fallback_ops={"aten::sin": 1},
                             sync_ms=odd(i) * 100, graph=f"g{i}", nodes=40, line=20, cache="miss"))
        executions.append(ex(2 * i + 1, step=0, cause="item", graph=f"h{i}", nodes=20 * (i + 1) + 3, line=30,
                             sync_ms=odd(i), cache="miss"))
    return run_info(steps=0), executions, {}


def reads_one_by_one() -> tuple:
    executions = rows(4, step=lambda i: i, graph="step", cache=lambda i: "miss" if i == 0 else "hit")
    executions += [ex(4 + i, step=4, cause="cpu", detail="Tensor.cpu()", graph=f"p{i}", cache="miss",
                      sync_ms=odd(i) * 10, line=55) for i in range(12)]
    return run_info(steps=4), executions, {"step": chain_ir(20), **{f"p{i}": chain_ir(5 + i) for i in range(12)}}


def failures() -> tuple:
    ir = """IR {
  %0 = [Float[268435456]] lazy_tensors::device_data(), location=step@big.py:11, device=CPU0, NodeType=D
  %1 = [Float[536870913]] aten::repeat(%0), location=step@big.py:12, NodeType=N
  %2 = [Float[]] aten::sum(%1), location=step@big.py:13, NodeType=N, ROOT=0
}"""
    error = "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 1073741827 bytes."
    run = run_info(steps=1, argv=["big.py"], exit_status=1, error_frames=[Frame("/w/big.py", 14, "<module>")],
                   error=error, failures=[Failure(1, "RuntimeError: the device was lost")], elapsed_s=10 / 3)
    return run, rows(2, graph=lambda i: ("ok", "big")[i], cache="miss"), {"big": ir}


def host_call() -> tuple:
    user, library = Frame("/w/main.py", 265, "<module>"), Frame("/site-packages/torchvision/utils.py", 150, "save_image")
    executions = rows(6, step=lambda i: i // 3, stack_id=lambda i: 1 if i % 3 else None, line=265,
                      cause=lambda i: "cpu" if i % 3 else "mark_step", graph=lambda i: f"g{i % 3}")
    stacks = Stacks(lambda stack_id: [user, library] if stack_id == 1 else [], ("torch",))
    return run_info(steps=2), executions, {f"g{i}": chain_ir(5 + i) for i in range(3)}, stacks


def sentences(run, executions, irs, stacks=None) -> list[tuple[str, str]]:
    analysis = analyze(run, executions, irs, stacks=stacks) if stacks else analyze(run, executions, irs)
    return [(finding.kind, text) for finding in analysis.findings for text in (finding.message, finding.fix)]


def test_no_finding_of_any_kind_prints_an_unrounded_number() -> None:
    said = []
    for scenario in (extra_syncs_and_fallbacks, eager_ops, recompiles_and_dynamic_shapes, missing_mark_step,
                     reads_one_by_one, failures, host_call):
        said += sentences(*scenario())
    kinds = {kind for kind, _ in said}
    # Every kind made from a run's rows and IR; unasked_collective needs XLA's SPMD HLO
    # (tests/xla/test_spmd.py checks its sentence's figures).
    assert kinds >= set(FindingKind) - {FindingKind.UNASKED_COLLECTIVE}, set(FindingKind) - kinds
    assert any(text.startswith("1 eager execution per step in 6 of 7 steps (") for _, text in said), said
    unrounded = [(kind, text) for kind, text in said if UNROUNDED.search(text)]
    assert not unrounded, unrounded


def test_the_pattern_catches_what_python_prints_for_a_float() -> None:
    assert UNROUNDED.search(f"forces {7 / 3} extra executions")
    assert UNROUNDED.search(f"{1e-7} ms") and UNROUNDED.search(f"{odd(2)} ms per step")
    assert not UNROUNDED.search("2.33 ms, 1,205 nodes, torch 2.13.0, 0.1.2, at train.py:12, 1.0 GiB")
