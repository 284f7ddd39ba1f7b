"""lazyviz on PyTorch/XLA: the XLA samples run for real on PJRT_DEVICE=CPU.

Runs in .venv-xla (scripts/xla-venv), where torch is torch_xla's own 2.9.0.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLES, assert_diff_applies, cli, line_of, python, row

from lazyviz.analysis.run import Run
from lazyviz.analysis.summary import split_hlo
from lazyviz.trace import open as open_trace
from lazyviz.trace.model import COMPILED_CALL
from lazyviz.tui.app import build_app
from lazyviz.tui.widgets.code_view import CodeView
from lazyviz.tui.widgets.executions import ExecutionList

pytest.importorskip("torch_xla")
os.environ.setdefault("PJRT_DEVICE", "CPU")  # as a user without an accelerator runs them

XLA_SAMPLES = SAMPLES / "xla"


@pytest.fixture(scope="module")
def xla_trace(tmp_path_factory: pytest.TempPathFactory):
    """xla_trace(name, *args, capture="full") -> the trace of one run, made once."""
    made: dict[tuple, Path] = {}
    folder = tmp_path_factory.mktemp("xla-traces")

    def make(name: str, *args: str, capture: str = "full") -> Path:
        key = (name, args, capture)
        if key not in made:
            path = folder / f"{name}-{len(made)}.trace"
            # No --backend: the script imports torch_xla, so lazyviz picks xla itself.
            result = cli("run", "--no-tui", "--capture", capture, "-o", path, XLA_SAMPLES / f"{name}.py", *args)
            assert result.status == 0, result.stderr
            made[key] = path
        return made[key]

    return make


def report(path: Path) -> dict:
    result = cli("report", "--format", "json", path)
    assert result.status == 0, result.stderr
    return json.loads(result.stdout)


def crashed_as_untraced(script: Path, trace: Path, *run_args: str) -> str:
    """Run a script that raises, untraced then traced: both exit 1 and the traced
    stderr, up to lazyviz's summary, is the untraced one. Returns that stderr."""
    untraced = python(script)
    assert untraced.status == 1, untraced.stderr
    traced = cli("run", "--no-tui", *run_args, "-o", trace, script)
    assert traced.status == 1
    assert traced.stderr[:traced.stderr.index("lazyviz: ")] == untraced.stderr
    return untraced.stderr


PROGRAMS = Path(__file__).resolve().parents[1] / "programs"


def traced_with_truth(program: Path, tmp_path: Path, *args: str, capture: str = "full") -> tuple[dict, dict, str]:
    """(the JSON report, torch_xla's own counts the program wrote, its stdout) of one
    traced run of a program that writes its counts to $COUNTERS_FILE."""
    trace, counts = tmp_path / f"{program.stem}.trace", tmp_path / "counts.json"
    result = subprocess.run([sys.executable, "-m", "lazyviz", "run", "--no-tui", "--capture", capture, "-o", str(trace),
                             str(program), *args], capture_output=True, text=True,
                            env={**os.environ, "COUNTERS_FILE": str(counts)}, timeout=600)
    assert result.returncode == 0, result.stderr
    return report(trace), json.loads(counts.read_text()), result.stdout


def test_recompile_is_explained_at_the_lines_that_built_the_changed_inputs(xla_trace) -> None:
    script = XLA_SAMPLES / "batch_size_change.py"
    path = xla_trace("batch_size_change", "--steps", "6", "--change-at", "3")
    data = report(path)
    assert data["run"]["backend"] == "xla" and "torch_xla" in data["run"]["versions"]
    executions = data["executions"]
    assert [e["cache"] for e in executions] == ["miss", "hit", "hit", "miss", "hit", "hit"]
    assert {e["cause"] for e in executions} == {"mark_step"}
    assert {e["frame"]["line"] for e in executions} == {line_of(script, "torch_xla.sync()")}
    # XLA's CompileTime and ExecuteTime samples: compile time on misses only.
    assert all(e["compile_ms"] > 0 for e in executions if e["cache"] == "miss")
    assert all(e["compile_ms"] == 0 and e["execute_ms"] > 0 for e in executions if e["cache"] == "hit")

    (recompile,) = [r for r in data["recompiles"] if not r["warmup"]]
    assert recompile["step"] == 3 and recompile["closest_execution"] == 0
    shapes = {c["before"] + " -> " + c["after"]: c.get("location", "") for c in recompile["changes"]
              if c["kind"] == "input_shape"}
    name = script.name
    assert shapes["f32[16,32] -> f32[24,32]"].endswith(f"{name}:{line_of(script, 'inputs = torch.randn')}")
    assert shapes["f32[16,1] -> f32[24,1]"].endswith(f"{name}:{line_of(script, 'targets = torch.randn')}")

    with open_trace(path) as trace:
        graph = trace.graph(executions[3]["graph"])
    assert "xla::device_data" in graph.ir_text and "location=" in graph.ir_text
    # Each node at the user's line that built it, not torch.nn's (lazyviz's frame getter).
    assert set(re.findall(r"location=(?:[\w<>]+@)?([^:,]+):\d+", graph.ir_text)) == {script.name}
    assert "Compilation Cause" in graph.backend_text  # what XLA said when it compiled it


def test_item_in_the_loop_is_an_extra_sync_with_the_xla_fix(xla_trace) -> None:
    script = XLA_SAMPLES / "item_in_loop.py"
    path = xla_trace("item_in_loop", "--steps", "4")
    data = report(path)
    executions = data["executions"]
    assert [(e["step"], e["cause"]) for e in executions] == [
        (step, cause) for step in range(4) for cause in ("item", "mark_step")]
    item_line, sync_line = line_of(script, "loss.item()"), line_of(script, "xm.mark_step()")
    assert {e["frame"]["line"] for e in executions if e["cause"] == "item"} == {item_line}
    assert {e["frame"]["line"] for e in executions if e["cause"] == "mark_step"} == {sync_line}
    assert {e["detail"] for e in executions if e["cause"] == "mark_step"} == {"xm.mark_step()"}
    assert [e["cache"] for e in executions][2:] == ["hit"] * 6
    (finding,) = [f for f in data["findings"] if f["kind"] == "extra_sync"]
    assert finding["site"]["line"] == item_line and "xm.add_step_closure" in finding["fix"]


def test_traced_script_prints_and_exits_as_untraced(tmp_path: Path) -> None:
    script = XLA_SAMPLES / "item_in_loop.py"
    untraced = python(script, "--steps", "3")
    traced = cli("run", "--no-tui", "-o", tmp_path / "t.trace", script, "--steps", "3")
    assert traced.status == untraced.status == 0
    assert traced.stdout == untraced.stdout and "step 2 loss" in traced.stdout


def test_clean_loop_with_torch_xla_step_has_one_execution_per_step(xla_trace) -> None:
    script = XLA_SAMPLES / "clean_mlp.py"
    path = xla_trace("clean_mlp", "--steps", "5")
    data = report(path)
    executions = data["executions"]
    # torch_xla.step() also syncs on entry, with nothing to run: that ends no step.
    assert data["steps"] == 5 and [e["step"] for e in executions] == [0, 1, 2, 3, 4]
    assert {e["frame"]["line"] for e in executions} == {line_of(script, "with torch_xla.step()")}
    assert [e["cache"] for e in executions] == ["miss"] + ["hit"] * 4
    assert data["findings"] == []
    assert cli("check", path).status == 0


def test_light_capture_keeps_sites_and_cache_without_ir(xla_trace) -> None:
    path = xla_trace("item_in_loop", "--steps", "3", capture="light")
    executions = report(path)["executions"]
    assert [e["cause"] for e in executions] == ["item", "mark_step"] * 3
    assert [e["cache"] for e in executions] == ["miss", "miss"] + ["hit"] * 4
    with open_trace(path) as trace:
        assert all(text == "" for text in trace.ir_texts().values())


def test_check_and_exports_work_on_xla_traces(xla_trace, tmp_path: Path) -> None:
    path = xla_trace("batch_size_change", "--steps", "6", "--change-at", "3")
    check = cli("check", path)
    script = XLA_SAMPLES / "batch_size_change.py"
    assert check.status == 1 and "cache misses after warm-up: 1" in check.stdout
    # The first input whose shape changed, at the line that made it.
    assert f"built at {script.name}:{line_of(script, 'inputs = torch.randn')}" in check.stdout
    svg = tmp_path / "recompile.svg"
    export = cli("export", path, "--execution", "3", "--diff", "-o", svg)
    assert export.status == 0, export.stderr
    assert svg.read_text().lstrip().startswith(("<?xml", "<svg")) and "device_data" in svg.read_text()
    baseline = tmp_path / "baseline.json"
    assert cli("check", xla_trace("clean_mlp", "--steps", "5"), "--write-baseline", baseline).status == 0
    assert "mark_step" in baseline.read_text()


async def test_ui_shows_xla_executions(xla_trace) -> None:
    app = build_app(xla_trace("item_in_loop", "--steps", "4"))
    async with app.run_test(size=(100, 32)) as pilot:
        table = app.query_one(ExecutionList)
        for _ in range(600):
            if len(table.rows) == 8 and app.state.latest is not None:
                break
            await pilot.pause(0.05)
        assert [e.cause for e in table.rows[:2]] == ["item", "mark_step"]
        assert "item_in_loop.py" in table.render_line(0).text


def test_the_python_api_traces_xla_once_per_process(tmp_path: Path) -> None:
    script = XLA_SAMPLES / "batch_size_change.py"
    user = tmp_path / "user.py"
    user.write_text(f"""
import runpy, sys
import lazyviz

sys.argv = ["batch_size_change.py", "--steps", "6", "--change-at", "3"]
with lazyviz.trace("api.trace", backend="xla") as run:  # before torch_xla is imported, as the README says
    runpy.run_path({str(script)!r}, run_name="__main__")
print([f.kind for f in run.findings])
try:
    lazyviz.trace("again.trace").start()
except lazyviz.LazyvizError as error:
    print("second:", error)
""")
    result = python(user, cwd=tmp_path)
    assert result.status == 0, result.stderr
    assert "'recompile'" in result.stdout and "second: the xla backend" in result.stdout
    assert not (tmp_path / "again.trace").exists()
    data = report(tmp_path / "api.trace")
    assert data["run"]["backend"] == "xla" and data["run"]["source"] == "api"
    assert [e["cache"] for e in data["executions"]] == ["miss", "hit", "hit", "miss", "hit", "hit"]
    (recompile,) = [r for r in data["recompiles"] if not r["warmup"]]
    locations = [c.get("location") or "" for c in recompile["changes"] if c["kind"] == "input_shape"]
    assert any(loc.endswith(f"{script.name}:{line_of(script, 'inputs = torch.randn')}") for loc in locations)


def test_a_clean_adamw_loop_has_no_finding_and_passes_check(tmp_path: Path) -> None:
    # AdamW's per-parameter updates repeat one block of ops in the graph, side by side:
    # not a loop without mark_step() (it was the first finding, and check failed).
    program = PROGRAMS / "xla_adamw.py"
    data, truth, _ = traced_with_truth(program, tmp_path)
    assert data["findings"] == [], data["findings"]
    caches = [e["cache"] for e in data["executions"]]
    assert (caches.count("miss"), len(caches)) == (truth["CompileTime"], truth["ExecuteTime"]), (caches, truth)
    check = cli("check", tmp_path / f"{program.stem}.trace")
    assert check.status == 0, check.stdout
    light = tmp_path / "light.trace"  # sizes from the HLO: the same graph each step, no growth
    assert cli("run", "--no-tui", "--capture", "light", "-o", light, program).status == 0
    assert report(light)["findings"] == []


def test_light_capture_sees_a_loop_without_sync_by_the_hlos_size(tmp_path: Path) -> None:
    """No torch_xla.sync() in the loop: each .item() runs (and compiles, XLA's counter
    says) the work of every iteration so far. Light capture has no IR, but each graph's
    HLO: its size grows at every sync, and that is the finding, with the edit."""
    program = PROGRAMS / "xla_no_sync.py"
    data, truth, _ = traced_with_truth(program, tmp_path, capture="light")
    assert data["run"]["capture"] == "light"
    sizes = [e["nodes"] for e in data["executions"]]
    assert len(sizes) == truth["UncachedCompile"] + truth["CachedCompile"] == 8 and truth["UncachedCompile"] == 8
    assert sizes == sorted(set(sizes)), sizes  # larger at every sync
    (finding,) = data["findings"]
    assert finding["kind"] == "missing_mark_step" and "grows by about" in finding["message"]
    assert "torch_xla.sync()" in finding["fix"]


def test_steps_are_the_step_ending_calls_not_every_library_sync(tmp_path: Path) -> None:
    """pytorch/xla's example style: a compiled step, the parallel loader's sync per batch,
    a step closure that runs a new op every 5 steps, the parameters broadcast first.
    Every execution torch_xla counts is in the trace; the steps are the batches; the
    closure's read is its own (item, in a closure), the broadcast is set-up, and the
    optimizer's second-step recompile is warm-up: check passes."""
    program = PROGRAMS / "xla_compiled_steps.py"
    data, truth, stdout = traced_with_truth(program, tmp_path, "8")
    assert "step 5 loss" in stdout
    executions = data["executions"]
    caches = [e["cache"] for e in executions]
    assert (caches.count("miss"), len(caches)) == (truth["CompileTime"], truth["ExecuteTime"]), (caches, truth)
    assert data["steps"] == 8
    closure = [e for e in executions if e["cause"] == "item"]
    assert [e["detail"] for e in closure] == ["Tensor.item() in a step closure"] * 2
    assert {e["frame"]["line"] for e in closure} == {line_of(program, "torch.isnan(loss).item()")}
    assert [e["detail"] for e in executions if e["cause"] == "other"] == ["xm.broadcast_master_param()"]
    # The compiled step's graph goes by the name torch_xla.compile gave it.
    compiled = [e for e in executions if e["detail"] == "torch_xla.compile(step_fn)"]
    assert len(compiled) == 8 and {e["cause"] for e in compiled} == {"mark_step"}
    assert [r["step"] for r in data["recompiles"] if not r["warmup"]] == []
    assert {f["severity"] for f in data["findings"]} <= {"info"}, data["findings"]
    check = cli("check", tmp_path / f"{program.stem}.trace")
    assert check.status == 0, check.stdout


def test_executions_without_a_python_frame_are_in_the_trace_with_their_own_timing(tmp_path: Path) -> None:
    """grid_sample's backward falls back on autograd's thread, where XLA writes no
    analysis: every execution torch_xla counts is in the trace all the same, each
    fallback op with its own executions, the backward one at the user's backward() line,
    and each compile with its own CompileTime sample."""
    program = PROGRAMS / "xla_fallbacks.py"
    data, truth, _ = traced_with_truth(program, tmp_path)
    executions = data["executions"]
    caches = [e["cache"] for e in executions]
    assert (caches.count("miss"), len(caches)) == (truth["CompileTime"], truth["ExecuteTime"]), (caches, truth)
    assert data["steps"] == 5
    assert all(e["frame"] is not None for e in executions)
    forced = {(e["detail"], e["frame"]["line"]) for e in executions if e["cause"] == "fallback"}
    assert forced == {("aten::grid_sampler_2d", line_of(program, "F.grid_sample(")),
                      ("aten::grid_sampler_2d_backward", line_of(program, "loss.backward()"))}
    calls = {op: 0 for op in ("aten::grid_sampler_2d", "aten::grid_sampler_2d_backward", "aten::median")}
    for execution in executions:
        for op, count in execution["fallback_ops"].items():
            calls[op] = calls.get(op, 0) + count
    assert calls == {op: truth[op] for op in calls} == {op: 5 for op in calls}
    compile_ms = sum(e["compile_ms"] for e in executions)
    assert abs(compile_ms - truth["compile_ms"]) < 0.01 * truth["compile_ms"] + 1
    assert all(e["compile_ms"] > 0 for e in executions if e["cache"] == "miss")
    # Each compile's HLO, backward's (no analysis) too: as XLA dumps the program untraced.
    dumped = tmp_path / "untraced-hlo"
    flags = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={dumped} --xla_dump_hlo_as_text"}
    assert python(program, env=flags).status == 0
    with open_trace(tmp_path / f"{program.stem}.trace") as recorded:
        graphs = sorted(recorded.graphs(), key=lambda graph: graph.first_execution)
    assert [_entry(split_hlo(graph.backend_text)[1]) for graph in graphs] == [
        _entry(path.read_text()) for path in sorted(dumped.glob("module_*after_optimizations.txt"))]
    # Light capture has no tensors dump to name a frameless graph: a hit from the same
    # stack is the graph compiled there, so the graphs are still XLA's compiles.
    light = tmp_path / "light.trace"
    assert cli("run", "--no-tui", "--capture", "light", "-o", light, program).status == 0
    assert report(light)["summary"]["graphs"] == truth["CompileTime"]


def _analyses(stderr: str) -> list[str]:
    """XLA's analysis lines on stderr, cause lines and Python frames included: XLA words
    those from the frames it sees, and lazyviz's sync sites (the hook's) add none."""
    return [line for line in stderr.splitlines() if " Analysis: " in line]


def test_the_users_own_xla_debug_output_is_kept(tmp_path: Path) -> None:
    """A user's PT_XLA_DEBUG_LEVEL=1 prints compilation analyses on stderr, and their
    PT_XLA_DEBUG_FILE and XLA_SAVE_TENSORS_FILE get written: traced, the same happens,
    and lazyviz records the run all the same."""
    script = XLA_SAMPLES / "clean_mlp.py"
    on_stderr = {**os.environ, "PT_XLA_DEBUG_LEVEL": "1"}
    untraced = python(script, "--steps", "4", env=on_stderr)
    traced = cli("run", "--no-tui", "--capture", "light", "-o", tmp_path / "a.trace", script, "--steps", "4",
                 env=on_stderr)
    assert traced.status == 0, traced.stderr
    assert "Compilation Analysis: " in untraced.stderr and "Execution Analysis: " not in untraced.stderr
    assert _analyses(traced.stderr) == _analyses(untraced.stderr)
    assert len(report(tmp_path / "a.trace")["executions"]) == 4

    files = {"PT_XLA_DEBUG_FILE": tmp_path / "analysis.txt", "XLA_SAVE_TENSORS_FILE": tmp_path / "dump.txt"}
    to_files = {**os.environ, "PT_XLA_DEBUG_LEVEL": "2", **{name: str(path) for name, path in files.items()}}
    traced = cli("run", "--no-tui", "-o", tmp_path / "b.trace", script, "--steps", "4", env=to_files)
    assert traced.status == 0, traced.stderr
    assert files["PT_XLA_DEBUG_FILE"].read_text().count("Execution Analysis: Execution Cause") == 4
    assert "## BEGIN_GRAPH" in next(tmp_path.glob("dump.txt*")).read_text()  # XLA adds the device's ordinal
    data = report(tmp_path / "b.trace")
    assert len(data["executions"]) == 4 and data["findings"] == []
    with open_trace(tmp_path / "b.trace") as trace:
        assert all("xla::device_data" in text for text in trace.ir_texts().values())
        assert any("XLA_SAVE_TENSORS_FILE" in note for note in trace.run.notes)


def test_a_users_execution_analyses_on_stderr_are_each_written_in_a_steady_loop(tmp_path: Path) -> None:
    # A steady sync is handed on without Python's poll, and its analysis may be left out
    # (hook/xla_quiet.h), only where the analyses are lazyviz's own: with a user's
    # PT_XLA_DEBUG_LEVEL=2 on stderr, every execution's analysis is there, as untraced.
    script = tmp_path / "steady.py"
    script.write_text("import torch, torch_xla\n"
                      "x = torch.zeros(8, device=torch_xla.device())\n"
                      "for step in range(40):\n"
                      "    x = x * 2 if step % 3 == 0 else x + 1  # two graphs from one line\n"
                      "    torch_xla.sync()\n")
    on_stderr = {**os.environ, "PT_XLA_DEBUG_LEVEL": "2"}
    untraced = python(script, env=on_stderr)
    traced = cli("run", "--no-tui", "--capture", "light", "-o", tmp_path / "s.trace", script, env=on_stderr)
    assert traced.status == 0, traced.stderr
    assert untraced.stderr.count("Execution Analysis: Execution Cause") == 40
    assert _analyses(traced.stderr) == _analyses(untraced.stderr)
    assert len(report(tmp_path / "s.trace")["executions"]) == 40


def test_a_sync_deep_in_a_library_is_at_the_users_line(tmp_path: Path) -> None:
    # transformers' causal-mask code reads a tensor with bool() about 15 frames below the
    # user's `model(ids)`; XLA's analysis names 8 frames unless told more, and all 8 were
    # the library's: the sync had no line of the user's ("? in ?").
    script = Path(__file__).resolve().parents[2] / "bench" / "_decode_loop.py"
    result = cli("run", "--no-tui", "--capture", "light", "-o", tmp_path / "d.trace", script, "2", "3")
    assert result.status == 0, result.stderr
    data = report(tmp_path / "d.trace")
    reads = [e for e in data["executions"] if e["cause"] == "bool"]
    assert len(reads) == 5
    assert {(Path(e["frame"]["file"]).name, e["frame"]["line"]) for e in reads} \
        == {(script.name, line_of(script, "logits = model(ids).logits"))}
    (finding,) = [f for f in data["findings"] if f["kind"] == "extra_sync"]
    assert finding["site"]["line"] == line_of(script, "logits = model(ids).logits")
    # The read is transformers', not in the user's line: light capture keeps that stack,
    # and the advice is what the user can change from their file, not an `if` to rewrite.
    assert finding["details"]["library_line"].startswith("transformers/masking_utils.py:")
    assert "4D additive mask" in finding["fix"] and "if tensor" not in finding["fix"]


def test_a_sync_inside_a_full_graph_compiled_function_is_explained(tmp_path: Path) -> None:
    """XLA refuses a sync inside torch_xla.compile(full_graph=True): its Unexpected
    Execution Analysis reaches stderr as untraced, the refused sync is a failed
    execution at the user's line, and the first finding says what to do instead."""
    script = Path(__file__).parent / "scripts" / "sync_in_compiled.py"
    trace = tmp_path / "compiled.trace"
    assert "Unexpected Execution Analysis: " in crashed_as_untraced(script, trace, "--capture", "light")
    data = report(trace)
    [first, *_] = data["findings"]
    assert first["kind"] == "failed_execution" and first["site"]["line"] == line_of(script, "loss.item()")
    assert "full_graph" in first["fix"]
    assert [e["cause"] for e in data["executions"] if e["index"] in {f["execution"] for f in data["run"]["failures"]}] \
        == ["item"]


def test_a_device_out_of_memory_is_traced_as_untraced_and_explained_at_the_line_that_built_it(tmp_path: Path) -> None:
    """PyTorch/XLA's execution error: the script's traceback is the one it prints
    untraced (no lazyviz frame in it); the execution XLA failed to run is in the trace,
    marked failed, and the first finding names the tensor too big for the device and
    the line that built it, found in the graph's IR."""
    script = Path(__file__).parent / "scripts" / "device_oom.py"
    trace = tmp_path / "oom.trace"
    traceback_text = crashed_as_untraced(script, trace)
    assert "Out of memory allocating 549755813888 bytes" in traceback_text and "lazyviz" not in traceback_text
    data = report(trace)
    assert [f["execution"] for f in data["run"]["failures"]] == [0]
    assert "Out of memory" in data["run"]["failures"][0]["error"]
    [first, *_] = data["findings"]
    assert first["kind"] == "failed_execution" and first["site"]["line"] == line_of(script, "torch_xla.sync()")
    assert first["details"]["built_at"] == f"device_oom.py:{line_of(script, 'scratch = torch.zeros')}"
    assert first["details"]["bytes"] == 2**39 and "512.0 GiB" in first["message"]
    check = cli("check", trace)
    assert check.status == 1 and "512.0 GiB" in check.stdout


def test_a_graph_xla_cannot_compile_is_in_the_trace_with_the_op_the_error_names(tmp_path: Path) -> None:
    """A compile error leaves XLA's Compilation Analysis and no execution: lazyviz
    records the execution that never ran, as failed, and names the op in the error
    (custom call -> xla::custom_call) with the user's line that used it."""
    script = Path(__file__).parent / "scripts" / "missing_kernel.py"
    trace = tmp_path / "compile.trace"
    assert "my_missing_kernel" in crashed_as_untraced(script, trace)
    data = report(trace)
    syncs = [n for n, line in enumerate(script.read_text().splitlines(), start=1) if line == "torch_xla.sync()"]
    assert [e["frame"]["line"] for e in data["executions"]] == syncs
    assert [f["execution"] for f in data["run"]["failures"]] == [1]
    failed = data["executions"][1]
    assert failed["cache"] == "miss" and failed["execute_ms"] == 0
    [first, *_] = data["findings"]
    assert first["kind"] == "failed_execution" and first["details"]["op"] == "xla::custom_call"
    assert first["details"]["used_at"] == f"missing_kernel.py:{line_of(script, 'total = scaled + 1')}"
    assert cli("check", trace).status == 1


def test_fix_moves_the_read_into_xm_step_closure_and_proves_it(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "item_in_loop.py").write_bytes((XLA_SAMPLES / "item_in_loop.py").read_bytes())
    trace = tmp_path / "item.trace"
    assert cli("run", "--no-tui", "-o", trace, "item_in_loop.py", cwd=folder).status == 0
    result = cli("fix", trace, "--try", cwd=folder)
    assert result.status == 0, result.stderr
    assert_diff_applies(result.stdout, folder)
    assert ('+        xm.add_step_closure(lambda step, loss: print(f"step {step} loss {loss.item():.4f}"), '
            "args=(step, loss))") in result.stdout
    assert row(result.stderr, "executions per step") == ["2.0", "1.0"]
    assert "output: the same (6 lines" in result.stderr


def test_fix_is_proved_on_the_processes_torch_xla_launch_starts(tmp_path: Path) -> None:
    # The read is in the launched function: the finding is in rank0.trace, and the trial
    # measures both sides' launched processes, each bounded by --steps.
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "spawned.py").write_text(LAUNCHED.replace(
        "        xm.mark_step()\n",
        "        print(f'step {step} loss {loss.item():.4f}')\n        xm.mark_step()\n"))
    assert cli("run", "--no-tui", "-o", tmp_path / "spawned.trace", "spawned.py", cwd=folder).status == 0
    result = cli("fix", tmp_path / "spawned.ranks" / "rank0.trace", "--try", cwd=folder)
    assert result.status == 0, result.stderr
    assert "xm.add_step_closure(lambda step, loss: print(" in result.stdout
    assert row(result.stderr, "executions per step") == ["2.0", "1.0"]
    assert "output: the same" in result.stderr


def test_fix_puts_torch_xla_sync_in_the_loop_after_its_update_before_its_read(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "grows.py").write_text(
        "import torch\nimport torch_xla\n\n"
        "device = torch_xla.device()\n"
        "torch.manual_seed(0)\n"
        "model = torch.nn.Linear(16, 16).to(device)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "for step in range(8):\n"
        "    loss = model(torch.ones(4, 16, device=device)).pow(2).mean()\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
        "    optimizer.zero_grad()\n"
        "    print(f'step {step} loss {loss.item():.4f}')\n")
    trace = tmp_path / "grows.trace"
    assert cli("run", "--no-tui", "-o", trace, "grows.py", cwd=folder).status == 0
    assert report(trace)["findings"][0]["kind"] == "missing_mark_step"
    result = cli("fix", trace, "--try", cwd=folder)
    assert result.status == 0, result.stderr
    assert_diff_applies(result.stdout, folder)
    # After the update, before the log line's read (which then reads the step's loss);
    # with no condition: the script's device is torch_xla.device() alone.
    assert "     optimizer.step()\n+    torch_xla.sync()\n     optimizer.zero_grad()\n" in result.stdout
    gone = result.stderr.split("findings gone:")[1]
    assert "grows by about" in gone
    # The graph grows from the first iterations on: the trial needs only those, not all 8.
    assert "5 iterations (optimizer steps) each side" in result.stderr
    assert "output: the same (4 lines" in result.stderr  # stopped in the 5th step, before its print


def _ms(cells: list[str]) -> tuple[float, float]:
    """A --try row's before and after times: ["1,028.0", "ms", "1.0", "ms"] -> (1028.0, 1.0)."""
    return float(cells[0].replace(",", "")), float(cells[2].replace(",", ""))


def _counted(folder: Path, script: str, last: int, *args: str) -> str:
    """The script run untraced with torch_xla's own counts on stderr (scripts/xla_counts.py)."""
    result = python(Path(__file__).parent / "scripts" / "xla_counts.py", str(last), script, *args, cwd=folder)
    assert result.status == 0, result.stderr
    return result.stderr


def _compiles_by_step(folder: Path, script: str, last: int, *args: str) -> list[int]:
    """torch_xla's own CompileTime count at the end of each optimizer step, untraced."""
    counted = _counted(folder, script, last, *args)
    return [int(n) for n in re.findall(r"^compiles after step \d+: (\d+)$", counted, re.M)]


def _executions_at_exit(folder: Path, script: str) -> int:
    """torch_xla's own ExecuteTime count over the whole untraced run."""
    return int(re.search(r"^at exit: (\d+) executions", _counted(folder, script, 0), re.M).group(1))


def test_a_gpt_loop_without_sync_goes_to_one_graph_an_iteration_proved_per_iteration(tmp_path: Path) -> None:
    # nanoGPT's loop moved to XLA as users move it: no torch_xla.sync(), a loss read
    # every other iteration, the step time printed beside it.
    folder = tmp_path / "project"
    folder.mkdir()
    for name in ("train.py", "model.py", "xla_train.py"):
        (folder / name).write_text((PROGRAMS / "gpt_char" / name).read_text())
    trace = tmp_path / "gpt.trace"
    # Bounded: the whole run ends in a checkpoint read one tensor at a time, each a graph
    # of the uncut iterations (minutes); the loop's finding shows in its first iterations.
    assert cli("run", "--no-tui", "--iterations", "5", "-o", trace, "xla_train.py", "8", cwd=folder).status == 0
    assert report(trace)["findings"][0]["kind"] == "missing_mark_step"
    result = cli("fix", trace, "--try", "--until-clean", cwd=folder)
    assert result.status == 0, result.stderr
    assert_diff_applies(result.stdout, folder)
    # Under the script's own device (GPT_DEVICE names lazy or xla), torch_xla imported there.
    assert ('+    if torch.device(device).type == "xla":\n+        import torch_xla\n+        torch_xla.sync()\n'
            in result.stdout), result.stdout
    rounds, whole = result.stderr.split("the whole way")
    assert "round 1 (kept: " in rounds and "not kept" not in rounds
    assert "output: the same" in whole and "2 numbers measure time or rate (time): left out" in whole
    assert "no sync" in whole.split("findings gone:")[1]
    # Like with like: the same optimizer steps on both sides, per iteration after warm-up.
    # Without the sync each read compiles a larger graph (it never warms up); with it the
    # loop's graphs come from the cache.
    before, after = _ms(row(whole, "after warm-up"))
    assert before > 3 * after, whole
    # The truth, from torch_xla's own counter on the untraced scripts: the original
    # compiles again after warm-up (the read at iteration 4), the synced copy never does.
    edited = tmp_path / "edited"
    shutil.copytree(folder, edited)
    subprocess.run(["git", "apply", "-"], input=result.stdout, text=True, cwd=edited, check=True)
    original = _compiles_by_step(folder, "xla_train.py", 6, "8")
    synced = _compiles_by_step(edited, "xla_train.py", 6, "8")
    assert original[-1] > original[2] and synced[-1] == synced[2], (original, synced)


def test_a_checkpoint_read_one_tensor_at_a_time_is_saved_after_one_sync(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(PROGRAMS / "xla_checkpoint.py", folder)
    trace = tmp_path / "ckpt.trace"
    assert cli("run", "--no-tui", "-o", trace, "xla_checkpoint.py", cwd=folder).status == 0
    save = line_of(folder / "xla_checkpoint.py", "torch.save(")
    kinds = {f["kind"]: f for f in report(trace)["findings"]}
    assert kinds["one_by_one_reads"]["site"]["line"] == save
    result = cli("fix", trace, "--try", "--until-clean", cwd=folder)
    assert result.status == 0, result.stderr
    assert_diff_applies(result.stdout, folder)
    assert "+torch.save(state_on_cpu({\"model\": model.state_dict()" in result.stdout
    assert "+    torch_xla.sync()\n" in result.stdout  # the loop's own
    # state_on_cpu's, before the first tensor on the device moves
    assert ("+        if pending and isinstance(value, torch.Tensor) and value.device.type == \"xla\":\n"
            "+            pending.clear()\n+            torch_xla.sync()\n") in result.stdout
    gone = result.stderr.split("findings gone:")[1].split("output:")[0]
    assert "reads to the host one at a time" in gone and "no step ended" in gone
    assert "output: the same (1 line" in result.stderr
    # The truth, untraced: torch_xla's executions, and the saved checkpoints load to the
    # same values (the copy's was written by the edit's function, from the CPU).
    edited = tmp_path / "edited"
    shutil.copytree(folder, edited)
    subprocess.run(["git", "apply", "-"], input=result.stdout, text=True, cwd=edited, check=True)
    executions = _executions_at_exit(folder, "xla_checkpoint.py"), _executions_at_exit(edited, "xla_checkpoint.py")
    assert executions[0] >= 12 and executions[1] <= 4, executions  # a graph a tensor; one a step and the save's
    # The original's file holds XLA tensors (it loads only where torch_xla is imported;
    # AdamW keeps its step counts on the CPU); the copy's holds CPU tensors only.
    loaded = python("-c", "import sys, torch, torch_xla\n"
                    "a, b = (torch.load(f, weights_only=True) for f in sys.argv[1:])\n"
                    "flat = lambda s: [s['model'][k] for k in sorted(s['model'])] + "
                    "[t for st in s['optimizer']['state'].values() for t in st.values()]\n"
                    "assert a['iterations'] == b['iterations'] == 3\n"
                    "print(len(flat(a)), 'xla' in {x.device.type for x in flat(a)}, {y.device.type for y in flat(b)}, "
                    "all(torch.allclose(x.cpu(), y, rtol=1e-5, atol=1e-6) for x, y in zip(flat(a), flat(b))))",
                    folder / "ckpt.pt", edited / "ckpt.pt")
    assert loaded.status == 0, loaded.stderr
    # 4 weights and AdamW's 3 states for each (step, exp_avg, exp_avg_sq): the same values.
    assert loaded.stdout.split() == ["16", "True", "{'cpu'}", "True"]


def test_a_last_short_batch_is_a_shape_change_with_its_fix_proved(tmp_path: Path) -> None:
    # XLA adds a permute for the batch of 4 (100 = 6 x 16 + 4): a consequence of the
    # shape, not "another code path".
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "short_batch.py").write_text(
        "import torch\nimport torch_xla\nimport torch_xla.core.xla_model as xm\n\n"
        "device = torch_xla.device()\ntorch.manual_seed(0)\n"
        "data = torch.utils.data.TensorDataset(torch.randn(100, 32), torch.randn(100, 1))\n"
        "loader = torch.utils.data.DataLoader(data, batch_size=16)\n"
        "model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "for epoch in range(2):\n"
        "    for inputs, targets in loader:\n"
        "        inputs, targets = inputs.to(device), targets.to(device)\n"
        "        optimizer.zero_grad()\n"
        "        loss = ((model(inputs) - targets) ** 2).mean()\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
        "        xm.mark_step()\n")
    trace = tmp_path / "short.trace"
    assert cli("run", "--no-tui", "-o", trace, "short_batch.py", cwd=folder).status == 0
    [finding] = report(trace)["findings"]
    assert ("input shape f32[16,32] -> f32[4,32], built at short_batch.py:13" in finding["message"]
            or "input shape f32[16,1] -> f32[4,1], built at short_batch.py:13" in finding["message"])
    assert "drop_last=True" in finding["fix"] and "another path" not in finding["fix"]
    result = cli("fix", trace, "--try", cwd=folder)
    assert result.status == 0, result.stderr
    assert_diff_applies(result.stdout, folder)
    assert "+loader = torch.utils.data.DataLoader(data, batch_size=16, drop_last=True)" in result.stdout
    cells = next(line for line in result.stderr.splitlines() if "recompiles after warm-up" in line).split()[-2:]
    assert cells == ["1", "0"]


def test_a_library_calls_own_syncs_are_not_compared_as_recompiles(tmp_path: Path) -> None:
    # xm.mesh_reduce syncs twice, two different graphs (a size, then the payload): not
    # one graph recompiled as the other ("dtype s32[1] -> u8[1261]: cast it once").
    script = tmp_path / "mesh.py"
    script.write_text(
        "import torch\nimport torch_xla\nimport torch_xla.core.xla_model as xm\n\n"
        "device = torch_xla.device()\nmodel = torch.nn.Linear(8, 1).to(device)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(6):\n"
        "    loss = model(torch.ones(4, 8, device=device)).pow(2).mean()\n"
        "    loss.backward()\n    optimizer.step()\n    optimizer.zero_grad()\n    xm.mark_step()\n"
        "    if step % 2 == 1:\n        total = xm.mesh_reduce('loss', loss.item(), sum)\n")
    trace = tmp_path / "mesh.trace"
    assert cli("run", "--no-tui", "-o", trace, script).status == 0
    findings = report(trace)["findings"]
    assert [f["kind"] for f in findings] == ["extra_sync"]
    assert findings[0]["message"].startswith("xm.mesh_reduce() forces 2 extra executions per step")
    with open_trace(trace) as opened:
        reduces = [e for e in opened.executions() if e.detail == "xm.mesh_reduce()"]
    assert len({e.graph for e in reduces}) == 2 and len({e.stack_id for e in reduces}) == 2


LAUNCHED = (
    "import sys\nimport torch\nimport torch_xla\nimport torch_xla.core.xla_model as xm\nimport torch_xla.debug.metrics as met\n"
    "import torch_xla.runtime\n\n\n"
    "def train(index):\n    device = torch_xla.device()\n"
    "    model = torch.nn.Linear(8, 1).to(device)\n"
    "    torch.nn.init.constant_(model.weight, 0.1)\n    torch.nn.init.zeros_(model.bias)\n"
    "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "    for step in range(4):\n"
    "        loss = model(torch.ones(4, 8, device=device)).pow(2).mean()\n"
    "        loss.backward()\n        optimizer.step()\n        optimizer.zero_grad()\n        xm.mark_step()\n"
    # One write a line: print() writes its pieces apart, and two device threads' lines crossed.
    "    sys.stdout.write(f'rank {torch_xla.runtime.global_ordinal()} loss {loss.item():.4f}\\n')\n"
    "    sys.stdout.flush()\n"
    "    sys.stderr.write(f\"XLA {met.counter_value('CachedCompile') or 0} {met.counter_value('UncachedCompile') or 0}\\n\")\n"
    "    sys.stderr.flush()\n\n\n"
    "if __name__ == '__main__':\n    torch_xla.launch(train, args=())\n")


def xla_counts(stderr: str) -> tuple[int, int]:
    """(executions, compiles) as torch_xla's counters in the launched process say, at the
    end of its last thread."""
    counts = [tuple(map(int, line.split()[1:])) for line in stderr.splitlines() if line.startswith("XLA ")]
    cached, uncached = max(counts)
    return cached + uncached, uncached


@pytest.mark.parametrize("env", [{}, {"PJRT_LOCAL_PROCESS_RANK": "1"}, {"CPU_NUM_DEVICES": "2"}],
                         ids=["rank0", "counters-only", "thread-per-device"])
def test_each_process_a_launcher_starts_records_its_own_trace(tmp_path: Path, env: dict[str, str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # torch_xla.launch's processes inherited lazyviz's report file: the launching process
    # read their analyses as its own ("4 executions, no steps, cause other, 0 ms"). Now
    # each writes rank<R>.trace beside the launching process's trace, as under torchrun.
    # XLA writes its analyses only where PJRT_LOCAL_PROCESS_RANK is 0: elsewhere the trace
    # comes from its counters alone. PJRT on CPU starts one process, with a thread per
    # device (CPU_NUM_DEVICES).
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    script = tmp_path / "spawned.py"
    script.write_text(LAUNCHED)
    untraced = python(script)
    assert untraced.status == 0, untraced.stderr
    executed, untraced_compiled = xla_counts(untraced.stderr)
    trace = tmp_path / "spawned.trace"
    traced = cli("run", "--no-tui", "-o", trace, script)
    # Device threads print in either order.
    assert traced.status == 0 and sorted(traced.stdout.splitlines()) == sorted(untraced.stdout.splitlines())
    # The compiles as XLA counted them in this run: with a thread per device, 1 traced run
    # in 12 compiled a fifth graph on one thread at its last step (XLA's own counter said
    # 5, and so did the trace), where 12 untraced runs compiled 4.
    traced_executed, compiled = xla_counts(traced.stderr)
    assert traced_executed == executed
    folder = tmp_path / "spawned.ranks"
    assert sorted(path.name for path in folder.iterdir()) == ["rank0.trace"]
    devices = int(env.get("CPU_NUM_DEVICES", "1"))
    assert f"torch_xla.launch's processes: 1 trace(s) in {folder}" in traced.stderr
    assert f"{executed} graph executions in 4 steps" in traced.stderr and "ran no lazy-tensor graph" not in traced.stderr
    with open_trace(folder / "rank0.trace") as opened:
        executions = opened.executions()
        assert opened.run.rank == {"rank": "0", "local_rank": env.get("PJRT_LOCAL_PROCESS_RANK", "0"),
                                   "world_size": "1"}
        assert opened.run.exit_status == 0 and opened.run.finished
    assert len(executions) == executed == 4 * devices
    assert sum(e.cache == "miss" for e in executions) == compiled
    assert {(e.cause, e.frame.line) for e in executions} == {("mark_step", line_of(script, "xm.mark_step()"))}
    with open_trace(trace) as opened:
        assert opened.executions() == []
        assert any(f"each traced in {folder}" in note for note in opened.run.notes)
    rank_report = json.loads(cli("report", "--format", "json", folder).stdout)
    assert [r["rank"] for r in rank_report["ranks"]] == [0]
    findings = report(folder / "rank0.trace")["findings"]
    if compiled == untraced_compiled:
        assert findings == []
        assert cli("check", folder).status == 0
    else:  # XLA's own extra compile (above): a recompile at the sync, and nothing else
        assert compiled > untraced_compiled and {f["kind"] for f in findings} == {"recompile"}
        assert {f["site"]["line"] for f in findings} == {line_of(script, "xm.mark_step()")}


def test_debug_single_process_is_traced_in_the_launching_process(tmp_path: Path) -> None:
    script = tmp_path / "single.py"
    script.write_text(LAUNCHED.replace("args=())", "args=(), debug_single_process=True)"))
    single = cli("run", "--no-tui", "-o", tmp_path / "single.trace", script)
    assert single.status == 0 and "4 graph executions in 4 steps" in single.stderr
    assert "torch_xla.launch" not in single.stderr and not (tmp_path / "single.ranks").exists()
    # Traced as any graph here: XLA read lazyviz's settings inside the launcher's call
    # (before, the user's: every execution was one "without a Python frame", no IR).
    _, compiled = xla_counts(single.stderr)
    with open_trace(tmp_path / "single.trace") as opened:
        executions, graphs = opened.executions(), opened.graphs()
    assert {(e.cause, e.frame.line) for e in executions} == {("mark_step", line_of(script, "xm.mark_step()"))}
    assert sum(e.cache == "miss" for e in executions) == compiled == len(graphs)
    assert all("location=single.py:" in g.ir_text for g in graphs)
    assert all(e.compile_ms > 0 for e in executions if e.cache == "miss")


async def test_the_ui_shows_the_launched_process_live_and_saved(tmp_path: Path) -> None:
    # The launching script runs no graph itself: the UI goes to the trace of the process
    # torch_xla.launch started, once it is there.
    script = tmp_path / "spawned.py"
    script.write_text(LAUNCHED)
    assert cli("run", "--no-tui", "-o", tmp_path / "spawned.trace", script).status == 0
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    app = build_app(tmp_path / "spawned.trace", ended)
    async with app.run_test(size=(100, 32)) as pilot:
        table = app.query_one(ExecutionList)
        for _ in range(200):
            if len(table.rows) == 4 and app.state.latest is not None:
                break
            await pilot.pause(0.05)
        assert app.state.trace_path == tmp_path / "spawned.ranks" / "rank0.trace"
        assert [e.cause for e in table.rows] == ["mark_step"] * 4
        assert "spawned.py" in table.render_line(0).text
    # lazyviz view on the launching script's saved trace goes there too.
    app = build_app(tmp_path / "spawned.trace")
    async with app.run_test(size=(100, 32)) as pilot:
        for _ in range(200):
            if len(app.query_one(ExecutionList).rows) == 4:
                break
            await pilot.pause(0.05)
        assert app.state.trace_path == tmp_path / "spawned.ranks" / "rank0.trace"


def test_reads_on_the_host_are_named_by_what_read(tmp_path: Path) -> None:
    # `.to("cpu")` is not wrapped on XLA (XLA_IR_DEBUG would give every .to(device) input
    # our wrapper as its location): it was cause `other`. XLA says it read values.
    script = tmp_path / "reads.py"
    script.write_text(
        "import torch\nimport torch_xla\n\ndevice = torch_xla.device()\nx = torch.randn(4, 4, device=device)\n"
        "torch_xla.sync()\nmoved = (x * 2).to('cpu')\ncopied = (x * 3).cpu()\nsame = torch.equal(x * 4, x)\n"
        "if (x * 5).sum() > 0:\n    pass\n")
    trace = tmp_path / "reads.trace"
    assert cli("run", "--no-tui", "-o", trace, script).status == 0
    with open_trace(trace) as opened:
        found = [(e.frame.line, e.cause, e.detail) for e in opened.executions()]
    assert found == [
        (line_of(script, "torch_xla.sync()"), "mark_step", "torch_xla.sync()"),
        (line_of(script, ".to('cpu')"), "cpu", "Tensor.to()"),
        (line_of(script, ".cpu()"), "cpu", "Tensor.cpu()"),
        (line_of(script, "torch.equal"), "fallback", "aten::equal"),
        (line_of(script, "if (x * 5)"), "bool", "bool(tensor)"),
    ]


def copies_run(tmp_path: Path) -> tuple[Path, str]:
    """A loop that copies to the device and back every step: (its trace, lazyviz run's stderr)."""
    script = tmp_path / "copies.py"
    script.write_text(
        "import sys\nimport torch\nimport torch_xla\nimport torch_xla.debug.metrics as met\n\n"
        "device = torch_xla.device()\nw = torch.randn(256, 256, device=device)\ntorch_xla.sync()\nlast = None\n"
        "for step in range(4):\n    if last is not None:\n        print(last.cpu().item() > 0)\n"
        "    x = torch.randn(64, 256).to(device)\n    last = (x @ w).relu().sum()\n    torch_xla.sync()\n"
        "print('XLA', *(met.metric_data(name)[i] for name, i in (('TransferToDeviceTime', 0), ('OutboundData', 1), "
        "('TransferFromDeviceTime', 0), ('InboundData', 1))), file=sys.stderr)\n")
    trace = tmp_path / "copies.trace"
    result = cli("run", "--no-tui", "-o", trace, script)
    assert result.status == 0, result.stderr
    return trace, result.stderr


def test_a_failure_of_lazyviz_in_a_poll_never_reaches_the_script(tmp_path: Path) -> None:
    """A sync site polls before and after its call, in C or in Python: lazyviz's own
    failure there is kept for the end of the run; the script's syncs go on (before, the
    script's torch_xla.sync() raised lazyviz's TypeError)."""
    script = tmp_path / "broken_poll.py"
    script.write_text(
        "import torch, torch_xla\nfrom lazyviz.backends.xla_polls import XlaPolls\n\n"
        "def broken(self, final):\n    raise RuntimeError('a poll of lazyviz broke')\n\n"
        "x = torch.ones(4, device=torch_xla.device())\nfor step in range(4):\n"
        "    if step == 2:\n        XlaPolls._poll_here = broken\n"
        "    x = x * 2\n    torch_xla.sync()\nprint('sum', x.sum().item())\n")
    result = cli("run", "--no-tui", "-o", tmp_path / "t.trace", script)
    assert result.status == 0 and "sum 64.0" in result.stdout, result.stderr
    assert "tracing failed" in result.stderr and "RuntimeError: a poll of lazyviz broke" in result.stderr


def test_host_device_copies_and_graph_memory_as_xla_counts_them(tmp_path: Path) -> None:
    trace, stderr = copies_run(tmp_path)
    to_count, to_bytes, from_count, from_bytes = (int(float(word)) for word in
                                                  next(line for line in stderr.splitlines()
                                                       if line.startswith("XLA ")).split()[1:])
    assert (to_count, to_bytes, from_count, from_bytes) == (5, 8 + 4 * 64 * 256 * 4, 3, 3 * 4)  # the seed, x, reads
    summary = report(trace)["summary"]
    assert summary["transfers"] == {"TransferToDevice": to_count, "TransferToDeviceBytes": to_bytes,
                                    "TransferFromDevice": from_count, "TransferFromDeviceBytes": from_bytes}
    assert "host<->device copies: to the device 1.0 (51.2 KB), from it 0.6 (2 B) per step" in stderr
    graphs = report(trace)["graphs"]
    # w's graph: 256x256 f32 out, as XLA said after compiling it (in GB to six places: 1 KB).
    assert any(abs(g.get("memory", {}).get("outputs", 0) - 256 * 256 * 4) < 1024 for g in graphs)
    assert "largest graph in memory: graph" in stderr


async def test_the_backend_tab_heads_with_the_graphs_memory(tmp_path: Path) -> None:
    trace, _ = copies_run(tmp_path)
    app = build_app(trace)
    async with app.run_test(size=(80, 30)) as pilot:
        table = app.query_one(ExecutionList)
        for _ in range(200):
            if len(table.rows) == 5:
                break
            await pilot.pause(0.05)
        await pilot.press("home")
        for _ in range(100):
            if "graph" in app.query_one("#backend-view", CodeView).text:
                break
            await pilot.pause(0.05)
        text = app.query_one("#backend-view", CodeView).text
        # w's graph: 256x256 f32 out (XLA says it in GB to six places: 255.9 KB).
        # The figures XLA measured; PJRT's CPU client gives 0 for the inputs here, left out.
        assert text.startswith("# memory after compiling:\n#   outputs 255.9 KB\n") and "#   inputs 0 B" not in text
        # Then what XLA compiled it to, its metadata cut to the op and the line.
        assert "\n# the HLO XLA compiled, after its optimizations\nHloModule " in text
        assert "metadata=" not in text and "  /* aten::" in text


def test_steps_bound_each_launched_process(tmp_path: Path) -> None:
    # lazyviz run --steps N (and fix --try's bounded re-runs) on a script whose steps run
    # in torch_xla.launch's processes: each ends after N steps, and the script exits 0.
    script = tmp_path / "spawned.py"
    script.write_text(LAUNCHED)
    result = cli("run", "--no-tui", "--steps", "2", "-o", tmp_path / "spawned.trace", script)
    assert result.status == 0, result.stderr
    assert "loss" not in result.stdout  # the function ended before its last line
    with open_trace(tmp_path / "spawned.ranks" / "rank0.trace") as opened:
        assert (opened.run.stopped_after_steps, opened.run.exit_status) == (2, 0)
        assert len(opened.executions()) == 2


def _entry(hlo: str) -> str:
    """An HLO module's entry line (its parameters and results) without instruction ids."""
    return re.sub(r"\.\d+", "", next(line for line in hlo.splitlines() if line.startswith("ENTRY ")))


def test_each_compiled_graph_has_the_hlo_xla_compiled(tmp_path: Path) -> None:
    """Full capture keeps the HLO XLA compiled each graph to: module for module what XLA's
    own compiler dump holds untraced (the truth), in the Backend tab's text and from
    `export --format hlo`; a user's own --xla_dump_to is theirs, as untraced."""
    script, args = XLA_SAMPLES / "batch_size_change.py", ("--steps", "6", "--change-at", "3")
    dumped = tmp_path / "untraced"
    flags = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={dumped} --xla_dump_hlo_as_text"}
    assert python(script, *args, env=flags).status == 0
    truth = [path.read_text() for path in sorted(dumped.glob("module_*after_optimizations.txt"))]
    assert len(truth) == 2  # batch 16, batch 24

    trace = tmp_path / "full.trace"
    assert cli("run", "--no-tui", "-o", trace, script, *args).status == 0
    with open_trace(trace) as recorded:
        graphs = sorted(recorded.graphs(), key=lambda graph: graph.first_execution)
    assert [_entry(split_hlo(graph.backend_text)[1]) for graph in graphs] == [_entry(text) for text in truth]
    assert "f32[24,32]" in _entry(truth[1]) and "f32[24,32]" not in _entry(truth[0])
    assert split_hlo(graphs[0].backend_text)[0].startswith("Compilation Cause")  # XLA's analysis first
    exported = tmp_path / "step3.hlo"
    assert cli("export", trace, "--execution", "3", "-o", exported).status == 0
    assert exported.read_text().startswith("HloModule ") and _entry(exported.read_text()) == _entry(truth[1])

    # Light capture keeps the HLO too (per compile: no cost a step), and without the IR
    # its recompiles are explained from it: the inputs whose shapes changed, the batch fix.
    light = tmp_path / "light.trace"
    assert cli("run", "--no-tui", "--capture", "light", "-o", light, script, *args).status == 0
    assert _entry(cli("export", light, "--execution", "3", "--format", "hlo").stdout) == _entry(truth[1])
    data = report(light)
    (recompile,) = [r for r in data["recompiles"] if not r["warmup"]]
    assert sorted((c["kind"], c["before"], c["after"]) for c in recompile["changes"]) == [
        ("input_shape", "f32[16,1]", "f32[24,1]"), ("input_shape", "f32[16,32]", "f32[24,32]")]
    assert "pad or bucket" in next(f["fix"] for f in data["findings"] if f["kind"] == "recompile")

    theirs = tmp_path / "theirs"
    kept = cli("run", "--no-tui", "-o", tmp_path / "theirs.trace", script, *args,
               env={**os.environ, "XLA_FLAGS": f"--xla_dump_to={theirs} --xla_dump_hlo_as_text"})
    assert kept.status == 0, kept.stderr
    assert sorted(path.name for path in theirs.glob("module_*_optimizations.txt")) == sorted(
        path.name for path in dumped.glob("module_*_optimizations.txt"))
    # Their dump names the user's lines, not the references lazyviz's own texts decode.
    texts = [path.read_text() for path in theirs.glob("module_*before_optimizations.txt")]
    assert texts and not any(re.search(r"source_line=1\d{9}\b", text) for text in texts)
    with open_trace(tmp_path / "theirs.trace") as recorded:
        assert not any(split_hlo(graph.backend_text)[1] for graph in recorded.graphs())
        assert any("--xla_dump_to" in note for note in recorded.run.notes)


def test_a_value_xlas_ir_text_leaves_out_is_read_from_the_hlo(tmp_path: Path) -> None:
    """`data[:, step:step + 16]`: XLA's IR text prints the xla::select without its
    bounds, so each step's graph reads the same; XLA compiles each anew (its counter is
    the truth). The recompile names the bounds that changed, from the HLO, at the user's
    line, with the fix for a baked-in value (before: "inputs share buffers differently")."""
    program = PROGRAMS / "xla_slice_bound.py"
    data, truth, _ = traced_with_truth(program, tmp_path)
    assert sum(e["cache"] == "miss" for e in data["executions"]) == truth["UncachedCompile"] == 6
    after_warmup = [r for r in data["recompiles"] if not r["warmup"]]
    assert [r["step"] for r in after_warmup] == [2, 3, 4, 5]
    changes = after_warmup[0]["changes"]
    assert [(c["kind"], c["op"], c["before"], c["after"]) for c in changes] == [
        ("attribute", "xla::select.slice", "{[0:64], [1:17]}", "{[0:64], [2:18]}")]
    where = f"{program.name}:{line_of(program, 'data[:, step:step + 16]')}"
    assert changes[0]["location"] == where
    with open_trace(tmp_path / f"{program.stem}.trace") as recorded:  # the UI's why column
        assert Run(recorded).recompile_at(after_warmup[0]["execution"]).brief() == (
            f"constant [1:17]->[2:18], built at {where}")
    (finding,) = [f for f in data["findings"] if f["kind"] == "recompile"]
    assert "a Python number used as a slice bound" in finding["fix"] and "share buffers" not in finding["message"]
    # The edit, proved: the bounds as data (an index_select), one graph for every step.
    fixed = cli("fix", tmp_path / f"{program.stem}.trace", "--try")
    assert fixed.status == 0, fixed.stderr
    assert "+    window = data.index_select(1, torch.arange(step, step + 16).to(data.device))" in fixed.stdout
    assert row(fixed.stderr, "recompiles after warm-up") == ["4", "0"]
    assert "output: the same" in fixed.stderr
    # Light capture, no IR: the same bounds from the HLO alone (no line: no node locations).
    light = tmp_path / "light.trace"
    assert cli("run", "--no-tui", "--capture", "light", "-o", light, program).status == 0
    (first, *_) = [r for r in report(light)["recompiles"] if not r["warmup"]]
    assert [(c["kind"], c["before"], c["after"]) for c in first["changes"]] == [
        ("attribute", "slice={[0:64], [1:17]}", "slice={[0:64], [2:18]}")]


def test_a_fallbacks_own_execution_is_the_fallbacks_and_its_equivalent_lowers(tmp_path: Path) -> None:
    # torch.median in the loss: the execution XLA runs to feed it belongs to the median, at
    # its line, never to a read of values; XLA's ExecuteTime and aten::median counts are the truth.
    program = PROGRAMS / "xla_median_loss.py"
    data, truth, _ = traced_with_truth(program, tmp_path)
    assert truth["aten::median"] == 5 and len(data["executions"]) == truth["ExecuteTime"] == 10
    forced = [e for e in data["executions"] if e["cause"] == "fallback"]
    assert len(forced) == 5 and {e["detail"] for e in forced} == {"aten::median"}
    assert {e["frame"]["line"] for e in forced} == {line_of(program, "else torch.median(err)")}
    kinds = [f["kind"] for f in data["findings"]]
    assert "extra_sync" not in kinds
    [median] = [f for f in data["findings"] if f["kind"] == "fallback"]
    assert median["details"]["executions_forced"] == 5 and "forcing 5 executions" in median["message"]
    assert "torch.sort(x.flatten())" in median["fix"] and "PyTorch/XLA" in median["fix"]
    # The advice, applied: no fallback, one execution a step.
    (tmp_path / "sorted").mkdir()
    data, truth, _ = traced_with_truth(program, tmp_path / "sorted", "--sorted")
    assert "aten::median" not in truth and len(data["executions"]) == truth["ExecuteTime"] == 5
    assert not data["findings"]


def test_a_fallback_counted_before_the_read_of_its_inputs_is_that_reads_cause(tmp_path: Path) -> None:
    # XLA counts aten::median when it is called, before the read of its inputs runs: in
    # the window of the grid_sample fallback before it. The read is median's.
    program = PROGRAMS / "xla_stn_median.py"
    data, truth, _ = traced_with_truth(program, tmp_path)
    assert truth["aten::median"] == 5 and len(data["executions"]) == truth["ExecuteTime"] == 20
    line = line_of(program, "0.1 * torch.median(err)")
    at_line = [e for e in data["executions"] if e["frame"] and e["frame"]["line"] == line]
    assert len(at_line) == 5 and {(e["cause"], e["detail"]) for e in at_line} == {("fallback", "aten::median")}
    assert all("aten::median" not in e["fallback_ops"] for e in data["executions"] if e not in at_line)
    kinds = {(f["kind"], f["details"].get("op")) for f in data["findings"]}
    assert ("fallback", "aten::median") in kinds and not any(kind == "extra_sync" for kind, _ in kinds)
    [median] = [f for f in data["findings"] if f["details"].get("op") == "aten::median"]
    assert "forcing 5 executions" in median["message"] and median["site"]["line"] == line
    # Its fix, applied: median's 5 executions gone (XLA's own count: 20 -> 15).
    (tmp_path / "sorted").mkdir()
    data, truth, _ = traced_with_truth(program, tmp_path / "sorted", "--sorted")
    assert "aten::median" not in truth and len(data["executions"]) == truth["ExecuteTime"] == 15


STEADY_LOOP = """\
import json, os, time
import torch
import torch_xla
import torch_xla.debug.metrics as met

device = torch_xla.device()
x = torch.zeros(8, device=device)
torch_xla.sync()
for step in range(240):
    x = x * 2 if step % 3 == 0 else x + 1
    torch_xla.sync()
    if step % 4 == 0:
        x.cpu()
    time.sleep(0.006)
lookups = [met.counter_value(name) or 0 for name in ("CachedCompile", "UncachedCompile")]
inbound = met.metric_data("InboundData")
json.dump({"executions": sum(lookups), "compiles": lookups[1], "from_device": [inbound[0], int(inbound[1])]},
          open(os.environ["COUNTERS_FILE"], "w"))
"""


@pytest.mark.parametrize("capture", ["light", "full"])
def test_a_steady_loops_repeated_rows_are_each_execution_as_xla_ran_it(tmp_path: Path, capture: str) -> None:
    # Two graphs from one line in a fixed order, a copy back every 4th step, 1.4 s in all:
    # after its first hit of each graph the loop's rows are repeated without the tracer
    # (one execution a sync), XLA's counters and copies' metrics are read in batches.
    # Every row must still be the execution XLA ran: its graph, its step, its time.
    script = tmp_path / "steady.py"
    script.write_text(STEADY_LOOP)
    summary_json, truth, _ = traced_with_truth(script, tmp_path, capture=capture)
    summary = summary_json["summary"]
    assert (summary["executions"], summary["misses"]) == (truth["executions"], truth["compiles"])
    with open_trace(tmp_path / "steady.trace") as trace:
        loop = [e for e in trace.executions() if e.frame is not None and e.frame.line == 11]
    assert len(loop) == 240 and [e.step for e in loop] == list(range(1, 241))  # the sync before the loop ends step 0
    doubled = {e.graph for step, e in enumerate(loop) if step % 3 == 0}
    added = {e.graph for step, e in enumerate(loop) if step % 3}
    assert len(doubled) == len(added) == 1 and doubled != added
    assert {e.cache for e in loop[3:]} == {"hit"}
    # XLA's execute time reaches each row, a repeated one too (taken a window later).
    assert all(e.execute_ms > 0 and e.sync_ms == e.compile_ms + e.execute_ms for e in loop)
    if capture == "full":  # the copies as XLA counts them, to the byte, though read once a second
        assert [summary["transfers"]["TransferFromDevice"], summary["transfers"]["TransferFromDeviceBytes"]] \
            == truth["from_device"] == [60, 60 * 8 * 4]
        # Read on the writer's thread, each second's copies go with a row of that second:
        # not all with the last execution, nor after it.
        carried = [e.index for e in loop if e.counters.get("TransferFromDevice")]
        assert carried and carried[0] < loop[-10].index


MIXED_LOOP = """
import torch, torch_xla, torch_xla.core.xla_model as xm
device = torch_xla.device()
x = torch.zeros(8, device=device)
read = []
for step in range(300):
    x = x * 2 if step % 3 == 0 else x + 1  # two graphs from one line: a steady loop
    if step % 50 == 49:
        x = x + torch.ones(8, device=device)  # now and then another graph
    if step % 40 == 0:
        xm.add_step_closure(lambda t: read.append(float(t.sum())), args=(x,))
    torch_xla.sync()
    if step % 70 == 0:
        read.append((x * 3).sum().item())  # a read between syncs: an execution of its own
print(len(read))
"""


@pytest.mark.parametrize("capture", ["light", "full"])
def test_a_steady_loops_rows_name_the_graphs_xla_ran_in_its_order(tmp_path: Path, capture: str) -> None:
    # A steady sync is handed on without reading its report again where the text and
    # counters say it is the last one once more: every row must still be the graph XLA
    # ran, in XLA's order, as its own analyses (the user's PT_XLA_DEBUG_FILE) list them.
    script, analyses = tmp_path / "mixed.py", tmp_path / "analysis.txt"
    script.write_text(MIXED_LOOP)
    result = cli("run", "--no-tui", "--capture", capture, "-o", tmp_path / "m.trace", script,
                 env={**os.environ, "PT_XLA_DEBUG_FILE": str(analyses)})
    assert result.status == 0, result.stderr
    assert result.stdout.strip() == python(script).stdout.strip() == "13"
    ran = re.findall(r"^Execution Analysis:\s+Graph Hash: (\w+)$", analyses.read_text(), re.MULTILINE)
    with open_trace(tmp_path / "m.trace") as trace:
        executions = trace.executions()
    assert len(ran) > 300 and [e.graph for e in executions] == [graph[:16] for graph in ran]
    reads = [e for e in executions if e.cause == "item"]
    assert len(reads) == 13 and sum("in a step closure" in (e.detail or "") for e in reads) == 8
    assert executions[-1].step == 299  # steps completed before it: the last sync ends the 300th


@pytest.mark.parametrize("capture", ["light", "full"])
def test_a_steady_syncs_left_out_analysis_still_names_the_graph_xla_ran(tmp_path: Path, capture: str) -> None:
    # Where the analyses are lazyviz's own, XLA is kept from writing a steady sync's
    # (hook/xla_quiet.h): the hook learns the graph from XLA's executor. The same loop's
    # graphs, as XLA's own analyses list them untraced, must be the trace's, in order.
    script, analyses = tmp_path / "mixed.py", tmp_path / "untraced.txt"
    script.write_text(MIXED_LOOP)
    untraced = python(script, env={**os.environ, "PT_XLA_DEBUG_LEVEL": "2", "PT_XLA_DEBUG_FILE": str(analyses)})
    assert untraced.status == 0, untraced.stderr
    ran = re.findall(r"^Execution Analysis:\s+Graph Hash: (\w+)$", analyses.read_text(), re.MULTILINE)
    result = cli("run", "--no-tui", "--capture", capture, "-o", tmp_path / "m.trace", script)
    assert result.status == 0, result.stderr
    assert result.stdout.strip() == untraced.stdout.strip() == "13"
    with open_trace(tmp_path / "m.trace") as trace:
        executions = trace.executions()
    assert len(ran) > 300
    if capture == "light":  # full capture's node lines are in the graphs XLA hashes
        assert [e.graph for e in executions] == [graph[:16] for graph in ran]
    loop = [e for e in executions if e.cause == "mark_step"]
    assert len(loop) == 300 and [e.step for e in loop] == list(range(300))
    doubled = {e.graph for step, e in enumerate(loop) if step % 3 == 0 and step % 50 != 49}
    added = {e.graph for step, e in enumerate(loop[1:], 1) if step % 3 and step % 50 != 49}
    assert len(doubled) <= 2 and len(added) <= 2 and not doubled & added


COUNTED_LOOP = """
import json, sys
import lazyviz
from lazyviz.backends.xla import XlaBackend
from lazyviz.backends.xla_polls import XlaPolls
python_polls, backends = [], []
take_poll, start = XlaPolls._poll, XlaBackend.__init__
XlaPolls._poll = lambda polls, final: python_polls.append(final) or take_poll(polls, final)
XlaBackend.__init__ = lambda backend, *args, **kwargs: backends.append(backend) or start(backend, *args, **kwargs)
with lazyviz.trace(sys.argv[1], capture=sys.argv[2], backend="xla"):
    import torch, torch_xla, torch_xla.core.xla_model as xm, torch_xla.debug.metrics as met
    device = torch_xla.device()
    x = torch.zeros(8, device=device)
    for step in range(600):
        x = x * 2 if step % 3 == 0 else x + 1  # two graphs from one line
        torch_xla.sync()
        if step % 100 == 99:
            (x * 3).cpu()  # a read now and then: its own execution, and copies
    xm.wait_device_ops()
    names = ("CachedCompile", "UncachedCompile", "ExecuteComputation", "CreateDataHandles", "MarkStep", "xla::add")
    counted = {name: met.counter_value(name) or 0 for name in names}
    wrappers = sorted({type(torch_xla.sync).__name__, type(torch.Tensor.cpu).__name__,
                       type(xm._run_step_closures).__name__})
    written = (backends[0]._folder / "analysis.txt").read_text().count("Execution Analysis: Execution Cause")
print(json.dumps({"python_polls": len(python_polls), "counted": counted, "wrappers": wrappers, "written": written}))
"""


@pytest.mark.parametrize("capture", ["light", "full"])
def test_a_steady_loops_syncs_are_handed_on_by_the_hook_with_xlas_counts(tmp_path: Path, capture: str) -> None:
    # Between two of Python's polls, lazyviz's hook hands on the steady syncs itself
    # (hook/xla_steady.h), from its own sync sites (hook/xla_sync_sites.h): Python's poll
    # runs for a few of 600 syncs, and the trace still
    # has every execution XLA ran and, in full capture, every counter as XLA counted it,
    # those counted when a graph has run (read once a second) too.
    script, trace = tmp_path / "counted.py", tmp_path / "counted.trace"
    script.write_text(COUNTED_LOOP)
    result = subprocess.run([sys.executable, str(script), str(trace), capture], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    ran = json.loads(result.stdout)
    counted = ran["counted"]
    with open_trace(trace) as recorded:
        executions = recorded.executions()
        after = recorded.run.counters_after_last_execution
    assert len(executions) == counted["CachedCompile"] + counted["UncachedCompile"] == 606
    assert sum(e.cache == "miss" for e in executions) == counted["UncachedCompile"]
    assert ran["python_polls"] < 60  # of 1,200 polls, two a sync: each read's and a graph's first few
    assert ran["wrappers"] == ["SyncSite"]  # the hook's sync sites, not Python's (a frame each call)
    # XLA wrote an analysis for a few of 606 executions: a steady sync's is left out (hook/xla_quiet.h).
    assert ran["written"] < 60
    if capture == "full":
        totals = {name: sum(e.counters.get(name, 0) for e in executions) + after.get(name, 0)
                  for name in counted if name not in ("CachedCompile", "UncachedCompile")}
        assert totals == {name: counted[name] for name in totals}


def test_a_python_index_into_a_device_schedule_becomes_data_proved(tmp_path: Path) -> None:
    """k-diffusion's Euler sampler on PyTorch/XLA: `sigmas[i]` is a constant slice in each
    step's graph, so XLA compiles every step (its own counter is the truth); the edit
    makes both indices data, and --try measures the recompiles gone, the same sample."""
    program = PROGRAMS / "xla_euler_sampler.py"
    data, truth, _ = traced_with_truth(program, tmp_path)
    misses = sum(e["cache"] == "miss" for e in data["executions"])
    assert misses == truth["UncachedCompile"] and misses >= 10
    (finding,) = [f for f in data["findings"] if f["kind"] == "recompile"]
    assert "xla::generic_slice" in finding["message"]
    fixed = cli("fix", tmp_path / f"{program.stem}.trace", "--try")
    assert fixed.status == 0, fixed.stderr
    assert "+        sigma = sigmas.index_select(0, torch.tensor([i]).to(sigmas.device)).squeeze(0)\n" in fixed.stdout
    old, new = row(fixed.stderr, "recompiles after warm-up")
    assert int(old) >= 8 and new == "0"
    assert "output: the same" in fixed.stderr


def test_if_tensor_keeping_the_best_loss_becomes_torch_where_proved(tmp_path: Path) -> None:
    """`if loss < best: best = loss.detach()` on PyTorch/XLA reads the comparison every
    step (XLA's own count: two executions a step); on XLA the choice is torch.where,
    which lowers: one execution a step, the same best."""
    program = PROGRAMS / "xla_best_loss.py"
    data, truth, _ = traced_with_truth(program, tmp_path)
    assert data["summary"]["executions"] == truth["UncachedCompile"] + truth["CachedCompile"] == 16
    (finding,) = data["findings"]
    assert finding["kind"] == "extra_sync" and finding["details"]["cause"] == "bool"
    fixed = cli("fix", tmp_path / f"{program.stem}.trace", "--try")
    assert fixed.status == 0, fixed.stderr
    assert "+    best = torch.where(loss < best, loss.detach(), best)\n" in fixed.stdout
    assert row(fixed.stderr, "executions per step") == ["2.0", "1.0"]
    assert "output: the same" in fixed.stderr


def test_generates_decode_loop_is_found_and_edited_in_light_capture_too(tmp_path: Path) -> None:
    """Without IR (--capture light) the loop shows only in graph sizes: at generate()'s
    line its end-of-sequence check's graph (isin, falling back) grows by a decode step a
    sync while its flag's `if` grows a little, in turn. Read apart, the check's growth is
    the loop (it was '1 finding, 0 with an edit': the isin fallback alone)."""
    folder = tmp_path / "generate"
    folder.mkdir()
    shutil.copy(PROGRAMS / "hf_generate_xla.py", folder / "generate.py")
    trace = tmp_path / "light.trace"
    assert cli("run", "--no-tui", "--capture", "light", "-o", trace, "generate.py", "6", cwd=folder).status == 0
    [loop] = [f for f in report(trace)["findings"] if f["kind"] == "missing_mark_step"]
    assert loop["details"]["library_loop"]["function"] == "_sample" and "aten::isin" in loop["message"]
    fixed = cli("fix", trace, cwd=folder)
    assert "2 findings, 1 with an edit below" in fixed.stderr
    assert "stopping_criteria=transformers.StoppingCriteriaList([SyncEachToken()]))" in fixed.stdout
    assert_diff_applies(fixed.stdout, folder)


def test_generates_decode_loop_is_named_and_cut_per_token_by_a_stopping_criterion(tmp_path: Path) -> None:
    """Hugging Face generate() with nothing cutting the graph: it grows over transformers'
    decode loop, inside the one call of the user's. lazyviz names the library's loop (not
    a loop of the user's, which has none) and edits the call to pass a stopping criterion
    that syncs once per token; the patched copy, run untraced, makes the same tokens with
    the executions torch_xla counts and a graph that no longer grows."""
    folder = tmp_path / "generate"
    folder.mkdir()
    program = shutil.copy(PROGRAMS / "hf_generate_xla.py", folder / "generate.py")
    data, truth, stdout = traced_with_truth(Path(program), tmp_path, "6")
    assert len(data["executions"]) == truth["CachedCompile"] + truth["UncachedCompile"]
    [loop] = [f for f in data["findings"] if f["kind"] == "missing_mark_step"]
    assert loop["details"]["library_loop"] | {"line": 0} == {
        "path": "transformers/generation/utils.py", "function": "_sample", "call": "generate", "line": 0,
        "callback": ""}  # generate()'s loop calls no function of the user's
    assert "(the loop of generate(): transformers/generation/utils.py, in _sample())" in loop["message"]
    assert "stopping_criteria=StoppingCriteriaList([SyncEachToken()])" in loop["fix"]
    assert "the loop runs before line" not in loop["fix"]  # no loop of the user's to name
    # generate()'s end-of-sequence check falls back once a token: what removes it, and when that is right.
    [isin] = [f for f in data["findings"] if f["kind"] == "fallback"]
    assert isin["details"]["op"] == "aten::isin.Tensor_Tensor" and isin["details"]["calls"] == truth[
        "aten::isin.Tensor_Tensor"]
    assert "EosTokenCriteria" in isin["fix"] and "eos_token_id=None" in isin["fix"]
    trace = tmp_path / "generate.trace"
    result = cli("fix", trace, "--try", cwd=folder)
    assert result.status == 0, result.stderr
    # Traced from the test's folder, not the program's: a file outside the run's folder is
    # named by its whole path, and the diff applies from the root.
    assert_diff_applies(result.stdout, Path("/"))
    assert "+class SyncEachToken(transformers.StoppingCriteria):" in result.stdout
    assert "run to its end (no steps or optimizer steps to bound it) each side" in result.stderr
    assert "stopping_criteria=transformers.StoppingCriteriaList([SyncEachToken()]))" in result.stdout
    assert "output: the same" in result.stderr
    nodes = [int(cell.replace(",", "")) for cell in row(result.stderr, "largest graph (nodes)")]
    assert nodes[1] * 3 < nodes[0], result.stderr
    # The truth, untraced: the edit applied, torch_xla's counters of the patched program.
    written = cli("fix", trace, "--write", cwd=folder)
    assert written.status == 0, written.stderr
    assert "class SyncEachToken(transformers.StoppingCriteria):" in (folder / "generate.py").read_text()
    counts = tmp_path / "patched.json"
    ran = subprocess.run([sys.executable, "generate.py", "6"], cwd=folder, capture_output=True, text=True,
                         env={**os.environ, "COUNTERS_FILE": str(counts)}, timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == stdout  # the same tokens
    after = json.loads(counts.read_text())
    executions = after["CachedCompile"] + after["UncachedCompile"]
    assert int(row(result.stderr, "executions")[1]) == executions
    assert after["MarkStep"] >= 6  # a sync per token, from the criterion


MODEL_LEFT_ON_THE_CPU = """import torch
import torch_xla

device = torch_xla.device()
dataset = torch.randn(64, 3, 8, 8)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())  # never moved: imagenet's CPU path
images = dataset[:2].to(device)
print(model(images).sum().item())
"""


def test_a_model_never_moved_to_the_device_is_named_on_xla_too(tmp_path: Path) -> None:
    """PyTorch/XLA says it its own way ("Expected XLA tensor. Got: torch.FloatTensor"), and
    the finding said no more than that; the frame that raised held the Conv2d's own weight
    and bias on the CPU, as on TS."""
    script = tmp_path / "unmoved.py"
    script.write_text(MODEL_LEFT_ON_THE_CPU)
    traceback_text = crashed_as_untraced(script, tmp_path / "m.trace")
    assert "Expected XLA tensor" in traceback_text
    [crash] = [f for f in report(tmp_path / "m.trace")["findings"] if f["kind"] == "crash"]
    assert crash["details"]["on_cpu"] == ["weight", "bias"]
    assert "the Conv2d it ran in holds its weight and bias on the CPU while its input is on the xla device" in \
        crash["message"]
    assert "model.to(device)" in crash["fix"] and crash["site"]["line"] == line_of(script, "print(model(images)")


def test_a_slice_bound_past_the_start_is_clamped_as_eager_does_on_every_device(tmp_path: Path) -> None:
    """`idx[:, -block_size:]` of a shorter sequence: eager PyTorch clamps the bound, torch_xla
    2.9 raises "Value out of range". The finding says what differs from eager; the edit
    clamps the bound as eager does, and the patched program runs on XLA and prints on the
    CPU what the original prints there; --try measures the crash gone."""
    program = PROGRAMS / "xla_sample_window.py"
    shutil.copy(program, tmp_path / program.name)
    on_cpu = python(tmp_path / program.name, "--device", "cpu", cwd=tmp_path)
    assert on_cpu.status == 0, on_cpu.stderr
    traced = cli("run", "--no-tui", "-o", "t.trace", program.name, "--device", "xla", cwd=tmp_path)
    assert traced.status == 1 and "Value out of range" in traced.stderr
    data = report(tmp_path / "t.trace")
    (finding,) = data["findings"]
    assert "eager PyTorch clamps a bound past the dimension's start" in finding["message"]
    assert finding["site"]["line"] == line_of(tmp_path / program.name, "logits = model(")
    fixed = cli("fix", "t.trace", cwd=tmp_path)
    assert fixed.status == 0, fixed.stderr
    assert "+        logits = model(idx[:, -min(block_size, idx.size(1)):])\n" in fixed.stdout
    assert_diff_applies(fixed.stdout, tmp_path)
    tried = cli("fix", "--try", "t.trace", cwd=tmp_path)
    assert tried.status == 0, tried.stderr
    assert "the crash at xla_sample_window.py" in tried.stderr and "is gone" in tried.stderr
    assert cli("fix", "--write", "t.trace", cwd=tmp_path).status == 0
    assert python(tmp_path / program.name, "--device", "xla", cwd=tmp_path).status == 0
    patched = python(tmp_path / program.name, "--device", "cpu", cwd=tmp_path)
    assert patched.status == 0 and patched.stdout == on_cpu.stdout


@pytest.mark.parametrize("capture", ["full", "light"])
def test_eager_modes_single_op_executions_are_a_cause_of_their_own_at_the_line_that_built_them(
        tmp_path: Path, capture: str) -> None:
    """torch_xla's eager mode runs each op outside torch_xla.compile at once, with no
    analysis of XLA's: every one is counted, with its own compile and execute times (not
    the compiled step's), as cause "eager"; full capture places each at the line its
    graph's HLO names (the model's at start-up, the labels' each step). The finding is
    one, per step, with advice that fits eager mode, not "move it out of the step"."""
    program = PROGRAMS / "xla_eager_labels.py"
    data, truth, stdout = traced_with_truth(program, tmp_path, "6", capture=capture)
    assert "loss " in stdout
    executions = data["executions"]
    caches = [e["cache"] for e in executions]
    assert len(executions) == truth["ExecuteTime"] + truth["EagerOpExecuteTime"] == 17, truth
    assert caches.count("miss") == truth["UncachedCompile"] == truth["CompileTime"] + truth["EagerOpCompileTime"]
    eager = [e for e in executions if e["cause"] == "eager"]
    compiled = [e for e in executions if e["cause"] == "mark_step"]
    assert (len(eager), len(compiled)) == (truth["EagerOpExecuteTime"], truth["ExecuteTime"])
    assert [e["cache"] for e in eager].count("miss") == truth["EagerOpCompileTime"]
    # Each has its own execute time: the compiled step's are not handed to the eager ones.
    assert all(e["execute_ms"] > 0 for e in executions), [(e["index"], e["execute_ms"]) for e in executions]
    assert all(e["compile_ms"] > 0 for e in compiled if e["cache"] == "miss")
    assert all(e["compile_ms"] > 0 for e in eager if e["cache"] == "miss")
    labels, call = line_of(program, "torch.randint("), line_of(program, "loss = train_step(")
    per_step = [e for e in eager if e["step"] >= 1]
    assert len(per_step) == 5
    if capture == "full":
        assert {e["frame"]["line"] for e in per_step} == {labels}
        assert {e["frame"]["line"] for e in eager if e["cache"] == "miss"} == {line_of(program, "model = "), labels}
    else:
        assert {e["frame"]["line"] for e in eager} == {call}
    [finding] = [f for f in data["findings"] if f["kind"] == "extra_sync"]
    assert finding["site"]["line"] == (labels if capture == "full" else call)
    assert finding["message"].startswith("1 eager execution per step in 5 of 6 steps (")
    assert "in eager mode an op outside torch_xla.compile() runs at once" in finding["message"]
    assert ("full capture names the line that built them" in finding["message"]) == (capture == "light")
    assert "inside the compiled function" in finding["fix"] and "out of the step" not in finding["fix"]
    assert data["summary"]["causes"] == {"eager": truth["EagerOpExecuteTime"], "mark_step": truth["ExecuteTime"]}


def test_torch_compile_openxla_runs_are_counted_at_the_users_call_and_a_new_batch_size_is_a_recompile(
        tmp_path: Path) -> None:
    """torch.compile(backend="openxla"): the bridge's runs have no cache lookup, and its
    compile ahead of the first run has one that runs nothing; every run is at the line
    that calls the compiled module (not FX's generated code), as cause "compiled", and
    the batch of 16 after three of 8 is a recompile finding in dynamo's own words."""
    program = PROGRAMS / "xla_openxla.py"
    data, truth, stdout = traced_with_truth(program, tmp_path)
    assert stdout.splitlines()[-1].startswith("16 ")
    executions = data["executions"]
    assert len(executions) == truth["ExecuteTime"] == 12
    assert [e["cache"] for e in executions].count("miss") == truth["CompileTime"] == 5
    call, read = line_of(program, "outputs.append(compiled(batch))"), line_of(program, ".item()")
    # Each run is read at its own call, in order (with no lookup of XLA's between the
    # first three, nothing else would read them before dynamo traced again); the first
    # pending batch is run by the bridge's sync as it traces, the second at the call.
    assert [(e["cause"], e["detail"]) for e in executions[:7]] == [
        *[("compiled", COMPILED_CALL)] * 3,
        ("other", "torch.compile's XLA bridge, syncing once as it traces"),
        ("compiled", f"{COMPILED_CALL}, traced again: tensor 'args[0]' size mismatch at index 0. expected 8, "
                     "actual 16"),
        ("other", "torch.compile's XLA bridge, running the compiled module's pending inputs first"),
        ("compiled", COMPILED_CALL)]
    runs = [e for e in executions if e["cause"] == "compiled"]
    assert {e["frame"]["line"] for e in executions[:7]} == {call}
    assert [e["frame"]["line"] for e in executions[7:]] == [read] * 5
    assert data["summary"]["causes"] == {"compiled": 5, "other": 2, "item": 5}
    [finding] = [f for f in data["findings"] if f["kind"] in ("recompile", "dynamic_shape")]
    assert finding["site"]["line"] == call and finding["executions"] == [runs[3]["index"]] == [4]
    assert ("the compiled module's input shape f32[8,16] -> f32[16,16] (dynamo traced it again: tensor 'args[0]' "
            "size mismatch at index 0. expected 8, actual 16)") in finding["message"]
    assert "pad each batch to one size" in finding["fix"] and "mark_dynamic" in finding["fix"]
    # XLA's counters, cleared by the bridge as it looks for ops that fall back: what each
    # execution moved is never negative.
    with open_trace(tmp_path / f"{program.stem}.trace") as trace:
        moved = [value for execution in trace.executions() for value in execution.counters.values()]
    assert moved and min(moved) > 0


def test_the_persistent_compile_cache_says_per_execution_how_a_graph_was_had_and_diff_says_why_b_compiled(
        tmp_path: Path) -> None:
    """torch_xla.runtime.initialize_cache: the first run compiles and writes its graph;
    a second with the same batch finds it there and, on PJRT CPU, cannot load it (XLA's
    PersistentCacheDeserializeFailure), in both capture modes; one with another batch
    compiles a graph the first never had. Each says so per execution, in the summary and
    the JSON report, and `lazyviz diff` says why B compiled: torch_xla's counters are the
    truth. The first run is untraced for one of them: lazyviz keeps XLA's cache keys."""
    program, cache = PROGRAMS / "xla_persistent_cache.py", tmp_path / "cache"

    def traced(name: str, batch: str, capture: str = "full") -> tuple[dict, dict]:
        counts = tmp_path / f"{name}.json"
        result = subprocess.run([sys.executable, "-m", "lazyviz", "run", "--no-tui", "--capture", capture,
                                 "-o", str(tmp_path / f"{name}.trace"), str(program), str(cache), batch],
                                capture_output=True, text=True, env={**os.environ, "COUNTERS_FILE": str(counts)},
                                timeout=600)
        assert result.returncode == 0, result.stderr
        return report(tmp_path / f"{name}.trace"), json.loads(counts.read_text())

    a, truth_a = traced("a", "8")
    assert truth_a["PersistentCacheMiss"] == 1 and truth_a["UncachedCompile"] == 1
    assert [e["persistent"] for e in a["executions"]] == ["not_cached", None, None, None]
    assert a["summary"]["persistent_cache"] == {"loaded": 0, "not_cached": 1, "load_failed": 0}
    for capture in ("full", "light"):
        b, truth_b = traced(f"b-{capture}", "8", capture)
        assert truth_b["PersistentCacheDeserializeFailure"] == 1
        assert [e["persistent"] for e in b["executions"]] == ["load_failed", None, None, None]
        assert b["executions"][0]["cache"] == "miss" and b["executions"][0]["graph"] == a["executions"][0]["graph"]
    text = cli("report", tmp_path / "b-light.trace").stdout
    assert ("persistent compile cache: 0 graphs loaded from it, 0 compiled and written to it, 1 in it that XLA "
            "could not load, compiled again") in text
    c, truth_c = traced("c", "16")
    assert truth_c["PersistentCacheMiss"] == 1
    assert c["summary"]["persistent_cache"] == {"loaded": 0, "not_cached": 1, "load_failed": 0}
    step, made = line_of(program, "torch_xla.sync()"), line_of(program, "data, target = ")
    same = cli("diff", tmp_path / "a.trace", tmp_path / "b-full.trace").stdout
    assert re.search(rf"B compiled graph {a['executions'][0]['graph']} at \S*{program.name}:{step} mark_step: in the "
                     r"cache, but XLA could not load it, so compiled again \(PersistentCacheDeserializeFailure\)", same)
    other = cli("diff", tmp_path / "a.trace", tmp_path / "c.trace").stdout
    assert re.search(rf"B compiled graph {c['executions'][0]['graph']} at \S*{program.name}:{step} mark_step: not in "
                     r"the cache: A never ran it; input shape: xla::device_data %\d+: f32\[8,16\] -> f32\[16,16\], "
                     rf"built at {program.name}:{made}", other), other
    # A run untraced writes what a traced one then finds: lazyviz leaves XLA's cache keys as they are.
    shutil.rmtree(cache)
    assert python(program, str(cache), "8").status == 0
    d, _ = traced("d", "8")
    assert d["executions"][0]["persistent"] == "load_failed"
