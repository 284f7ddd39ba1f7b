"""No finding ends in empty advice: every finding says what to do, whatever the error
text (a crash lazyviz has no reading of included), on every sample and crash script;
a sparse tensor sent to the lazy device (pytorch/examples' gcn) gets words and an edit
that keeps the program running on the lazy device and on the CPU."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from builders import UNROUNDED
from conftest import ROOT, SAMPLE_ARGS, SCRIPTS, assert_diff_applies, cli
from hypothesis import given, settings
from hypothesis import strategies as st

from lazyviz.analysis.failures import crash, explain
from lazyviz.analysis.ir import parse_ir
from lazyviz.trace.model import Failure, Frame, RunInfo
from lazyviz.trace.table import ExecutionTable

PROGRAMS = ROOT / "tests" / "programs"
EMPTY_BY_HAND = re.compile(r"^\s*(by hand|edit|fix):\s*$", re.MULTILINE)


def raised(error: str) -> RunInfo:
    return RunInfo(argv=["train.py"], backend="ts", capture="full", versions={}, start_time="", pid=1, cwd="/w",
                   rank={}, finished=True, exit_status=1, error=error, traceback=None, steps=0, elapsed_s=1.0,
                   error_frames=[Frame("/w/train.py", 9, "<module>")])


MESSAGES = st.one_of(
    st.text(min_size=1, max_size=300).filter(lambda t: t.strip() and not t.startswith("KeyboardInterrupt")),
    st.sampled_from([
        "ValueError: math domain error",
        "RuntimeError: Value out of range (expected to be in range of [-1, 0], but got -32)",
        "NotImplementedError: Could not run 'aten::_sparse_coo_tensor_with_dims_and_tensors' with arguments from "
        "the 'SparseXLA' backend. This could be because the operator doesn't exist for this backend " + "x" * 300,
        "RuntimeError: Input tensor is not a lazy tensor",
        "RuntimeError: data pointer on an invalid python storage",
        "RuntimeError: out of memory",
        "RuntimeError: operator aten::view_as_real appears to be a view operator, but it has no implementation",
    ]))


@settings(max_examples=200, deadline=None)
@given(MESSAGES)
def test_any_crash_or_failed_execution_says_what_to_do(message: str) -> None:
    found = crash(raised(message), ExecutionTable.of([]))
    assert found is not None
    what, fix, _, _ = found
    assert what.strip() and fix.strip()
    assert len(what) < 600  # a dispatcher's list of every backend is not read to the user
    what, fix, _ = explain(Failure(1, message), parse_ir(""))
    assert what.strip() and fix.strip()


def test_the_sparse_layout_crash_is_named_as_such() -> None:
    message = ("NotImplementedError: Could not run 'aten::_sparse_coo_tensor_with_dims_and_tensors' with arguments "
               "from the 'SparseLazy' backend. This could be because the operator doesn't exist for this backend, or "
               "was omitted during the selective/custom build process (if using custom build). " + "Lazy: x. " * 40)
    what, fix, details, frame = crash(raised(message), ExecutionTable.of([]))  # type: ignore[misc]
    assert details.sparse and frame is not None and frame.line == 9
    assert what.endswith("with arguments from the 'SparseLazy' backend at train.py:9 in <module>(): lazy tensors have "
                         "no sparse layout (neither has PyTorch/XLA), so a sparse tensor cannot be made on the lazy "
                         "device or moved there")
    assert "drop .to_sparse()" in fix and ".to_dense()" in fix


def test_the_dense_edit_cuts_by_the_columns_python_gives_after_a_non_ascii_string() -> None:
    """ast's columns count UTF-8 bytes: a line with 'café' before the call is cut right."""
    import ast

    from lazyviz.fix.dense_layout import _without

    line = 'print("café"); x = (a @ b).to_sparse().to(device)\n'
    call = next(node for node in ast.walk(ast.parse(line))
                if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "to_sparse")
    assert _without(line, call) == 'print("café"); x = (a @ b).to(device)\n'


@pytest.mark.torch
def test_every_finding_of_the_samples_and_crash_scripts_says_what_to_do(sample_trace, tmp_path: Path) -> None:
    traces = [sample_trace(name) for name in SAMPLE_ARGS]
    for script in ("raises.py", "cpu_tensor.py", "cat_cpu_tensor.py", "split_piece.py", "split_graph_piece.py"):
        trace = tmp_path / f"{script}.trace"
        cli("run", "--no-tui", "-o", trace, SCRIPTS / script, cwd=tmp_path)
        traces.append(trace)
    kinds = set()
    for trace in traces:
        report = json.loads(cli("report", trace, "--format", "json").stdout)
        for finding in report["findings"]:
            kinds.add(finding["kind"])
            assert finding["fix"].strip(), (trace.name, finding["message"])
        fixed = cli("fix", trace, cwd=tmp_path)
        assert fixed.status == 0 and not EMPTY_BY_HAND.search(fixed.stderr), fixed.stderr
        # No number printed as Python writes a float, in the report or in fix's words.
        text = cli("report", trace).stdout
        assert not UNROUNDED.search(text + fixed.stderr), UNROUNDED.findall(text + fixed.stderr)
    assert {"crash", "fallback", "recompile", "extra_sync", "missing_mark_step"} <= kinds


@pytest.mark.torch
def test_a_sparse_tensor_sent_to_the_device_is_kept_dense_and_runs_on_both_devices(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(PROGRAMS / "gcn_sparse.py", folder / "main.py")
    trace = tmp_path / "gcn.trace"
    ran = cli("run", "--no-tui", "-o", trace, "main.py", "--device", "lazy", cwd=folder)
    assert ran.status == 1 and "'SparseLazy' backend" in ran.stderr
    report = json.loads(cli("report", trace, "--format", "json").stdout)
    crash_finding = report["findings"][0]
    assert crash_finding["kind"] == "crash" and crash_finding["details"]["sparse"]
    assert crash_finding["site"]["line"] == _line(folder / "main.py", "return x.to_sparse().to(device)")
    result = cli("fix", trace, "--try", cwd=folder)
    assert result.status == 0, result.stderr
    assert_diff_applies(result.stdout, folder)
    assert "+    return x.to(device), labels.to(device), adj.to(device)\n" in result.stdout
    assert "edit: drop 2 .to_sparse() calls at main.py:" in result.stderr
    assert "the crash at main.py:" in result.stderr and "is gone; the copy ran to its end" in result.stderr
    # The edit applied, the program runs on both of its devices: the same losses.
    subprocess.run(["patch", "-p1", "--batch"], input=result.stdout.encode(), cwd=folder, check=True,
                   capture_output=True)
    losses = {}
    for device in ("cpu", "lazy"):
        done = subprocess.run([sys.executable, "main.py", "--device", device], cwd=folder, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        losses[device] = [float(line.split()[-1]) for line in done.stdout.splitlines()]
    assert len(losses["cpu"]) == 4 and losses["cpu"] == pytest.approx(losses["lazy"], abs=2e-4)


def _line(path: Path, text: str) -> int:
    return next(number for number, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_a_graph_out_of_memory_without_the_failed_size_is_named_without_guessing_it() -> None:
    """Under a memory limit the allocation that fails first depends on the process's layout:
    LTC's allocator says the size it wanted, C++'s operator new says only std::bad_alloc.
    Both name the graph that grew; only the first names the allocation that failed."""
    from builders import ex

    from lazyviz.analysis.graphs import IRGraphs

    lines = ["  %0 = [Float[256,256]] lazy_tensors::device_data(), location=<module>@t.py:9, NodeType=D"]
    lines += [f"  %{n} = [Float[256,256]] aten::mm(%{n - 1}, %{n - 1}), location=<module>@t.py:11"
              for n in range(1, 40)]
    graphs = IRGraphs.of({"g": "IR {\n" + "\n".join(lines) + "\n}\n"})
    table = ExecutionTable.of([ex(0, graph="g", nodes=40)])
    for error, failed in (("RuntimeError: std::bad_alloc", "its largest tensor is 256.0 KiB"),
                          ("RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate "
                           "memory: you tried to allocate 262144 bytes.", "the allocation that failed was one tensor of "
                                                                          "256.0 KiB")):
        what, fix, _, _ = crash(raised(error), table, graphs)  # type: ignore[misc]
        assert "the graph of execution 0 (40 nodes, its tensors 10.0 MiB in all, built at t.py:11" in what, what
        assert what.endswith(f"is more than the process could hold: {failed}") and "cut the graph" in fix
