"""SPMD on PyTorch/XLA: the collectives XLA's partitioner put into each graph, with
their lines, told apart from what the layout asked for. On 4 CPU devices.

The truth is XLA's own partitioned modules: the same program run untraced with
XLA_FLAGS=--xla_dump_to, its `*after_optimizations.txt` read with a regex of its own.
"""
from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import cli, line_of, python

import lazyviz

pytest.importorskip("torch_xla")

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"
MLP = PROGRAMS / "xla_spmd_mlp.py"
FSDP = PROGRAMS / "xla_spmd_fsdp.py"
ENV = {**os.environ, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4"}
COLLECTIVE = re.compile(r"= (\w+)\[([\d,]*)\]\S* (all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute)\(")


@pytest.fixture(scope="module")
def spmd_trace(tmp_path_factory: pytest.TempPathFactory):
    """spmd_trace(program, *args) -> the trace of one run, made once."""
    made: dict[tuple, Path] = {}
    folder = tmp_path_factory.mktemp("spmd-traces")

    def make(program: Path, *args: str) -> Path:
        if (program, args) not in made:
            path = folder / f"{program.stem}-{len(made)}.trace"
            result = cli("run", "--no-tui", "-o", path, program, *args, env=ENV)
            assert result.status == 0, result.stderr
            made[(program, args)] = path
        return made[(program, args)]

    return make


def xla_collectives(program: Path, tmp_path: Path, *args: str) -> Counter[tuple[str, str]]:
    """(kind, shape) -> how many of XLA's compiled modules hold it, untraced."""
    dump = tmp_path / "dump"
    result = python(program, *args, env={**ENV, "XLA_FLAGS": f"--xla_dump_to={dump} --xla_dump_hlo_as_text"})
    assert result.status == 0, result.stderr
    found: Counter[tuple[str, str]] = Counter()
    for module in dump.glob("*after_optimizations.txt"):
        found.update({(kind, f"{dtype}[{dims}]") for dtype, dims, kind in COLLECTIVE.findall(module.read_text())})
    return found


def report(trace: Path) -> dict:
    result = cli("report", "--format", "json", trace)
    assert result.status == 0, result.stderr
    return json.loads(result.stdout)


def test_a_weight_annotated_the_wrong_way_is_found_at_the_matmul_and_the_annotation(spmd_trace, tmp_path) -> None:
    trace = spmd_trace(MLP, "wrong")
    truth = xla_collectives(MLP, tmp_path, "wrong")
    got = report(trace)
    assert {(c["kind"], c["shape"]) for c in got["collectives"]} == set(truth)
    first = got["findings"][0]
    assert first["kind"] == "unasked_collective"
    assert first["site"]["line"] == line_of(MLP, "out = h @ w2")
    assert first["details"]["annotation"]["line"] == line_of(MLP, 'xs.mark_sharding(w2, mesh, (None, "model"))')
    assert first["details"]["suggested_spec"] == ["model", None]  # the layout of the megatron run below
    # XLA gathers h (f32[64,256]) forward and w2's partner backward (f32[256,64]) every
    # step; over 4 devices each device sends 3/4 of what it gathers.
    gathers = [shape for kind, shape in truth if kind == "all-gather"]
    assert sorted(gathers) == ["f32[256,64]", "f32[64,256]"]
    gathered = sum(4 * math.prod(map(int, re.findall(r"\d+", shape.split("[")[1]))) for shape in gathers)
    assert first["details"]["sent_bytes_per_step"] == gathered * 3 // 4
    assert len(got["findings"]) == 1  # the all-reduces are the sums a split contraction needs
    # Under SPMD XLA times each run as ExecuteReplicatedTime, not ExecuteTime: each row has its time.
    with lazyviz.open(trace) as opened:
        assert all(e.execute_ms > 0 and e.sync_ms == e.compile_ms + e.execute_ms for e in opened.executions())
    check = cli("check", trace)
    assert check.status == 1 and "all-gather the layout did not ask for" in check.stdout
    assert "annotate it ('model', None) at xla_spmd_mlp.py:" in check.stdout
    html = tmp_path / "report.html"
    assert cli("report", "--format", "html", "-o", html, trace).status == 0
    assert "<h2>Collectives</h2>" in html.read_text() and "NOT ASKED FOR" in html.read_text()


@pytest.mark.parametrize("layout", ["data", "megatron", "2d", "loader"])
def test_designed_layouts_are_quiet_and_list_their_all_reduces(spmd_trace, tmp_path, layout: str) -> None:
    trace = spmd_trace(MLP, layout)
    truth = xla_collectives(MLP, tmp_path, layout)
    got = report(trace)
    assert got["findings"] == []
    assert {(c["kind"], c["shape"]) for c in got["collectives"]} == set(truth)
    assert {c["kind"] for c in got["collectives"]} == {"all-reduce"}
    assert all(c["expected"] for c in got["collectives"])
    if layout in ("data", "loader"):  # the batch split by mark_sharding or by the loader
        assert {c["expected"] for c in got["collectives"]} == {"summed over the batch's devices (data parallel)"}
    if layout == "megatron":  # one all-reduce of the output, at the row-parallel matmul
        assert [(c["shape"], c["location"]) for c in got["collectives"]] == \
               [("f32[64,64]", f"xla_spmd_mlp.py:{line_of(MLP, 'out = h @ w2')}")]
    check = cli("check", trace)
    assert check.status == 0, check.stdout
    text = cli("report", trace).stdout
    assert "collectives: each device sends" in text and "NOT ASKED FOR" not in text


def test_diff_shows_the_gathers_gone_with_the_suggested_annotation(spmd_trace) -> None:
    wrong, fixed = spmd_trace(MLP, "wrong"), spmd_trace(MLP, "megatron")
    result = cli("diff", wrong, fixed)
    assert result.status == 0, result.stderr
    line = line_of(MLP, "out = h @ w2")
    assert f"only in A: all-gather f32[64,256] over model at xla_spmd_mlp.py:{line} (aten::mm)" in result.stdout
    assert "(not asked for by the layout)" in result.stdout
    assert f"only in B: all-reduce f32[64,64] over model at xla_spmd_mlp.py:{line} (aten::mm)" in result.stdout


def test_check_gates_collective_bytes_and_new_collectives(spmd_trace, tmp_path) -> None:
    fixed, wrong = spmd_trace(MLP, "megatron"), spmd_trace(MLP, "wrong")
    over = cli("check", fixed, "--max-collective-bytes-per-step", "1000")
    assert over.status == 1 and "collective bytes per step" in over.stdout
    assert cli("check", fixed, "--max-collective-bytes-per-step", "1000000").status == 0
    baseline = tmp_path / "baseline.json"
    assert cli("check", fixed, "--write-baseline", baseline).status == 0
    assert json.loads(baseline.read_text())["collectives"] == \
           [f"all-reduce f32[64,64] over model at xla_spmd_mlp.py:{line_of(MLP, 'out = h @ w2')}"]
    assert cli("check", fixed, "--baseline", baseline).status == 0
    against = cli("check", wrong, "--baseline", baseline)
    assert against.status == 1 and "new collective: all-gather f32[64,256] over model" in against.stdout


def test_fsdpv2_on_a_transformer_is_quiet(spmd_trace) -> None:
    got = report(spmd_trace(FSDP))
    assert got["findings"] == []
    kinds = Counter(c["kind"] for c in got["collectives"])
    assert kinds["all-gather"] and kinds["all-reduce"]
    assert all(c["expected"] for c in got["collectives"])
    assert cli("check", spmd_trace(FSDP)).status == 0


def test_fix_try_rewrites_the_annotation_and_proves_the_gathers_gone(tmp_path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    program = folder / MLP.name
    program.write_text(MLP.read_text())
    trace = tmp_path / "wrong.trace"
    assert cli("run", "--no-tui", "-o", trace, program, "wrong", env=ENV).status == 0
    result = cli("fix", "--try", trace, env=ENV)
    assert result.status == 0, result.stderr
    assert '-        xs.mark_sharding(w2, mesh, (None, "model"))' in result.stdout
    assert '+        xs.mark_sharding(w2, mesh, ("model", None))' in result.stdout
    assert re.search(r"collective bytes per step\s+192\.0 KB\s+24\.0 KB", result.stderr), result.stderr
    assert "findings gone:" in result.stderr and "all-gather the layout did not ask for" in result.stderr
    assert "output: the same" in result.stderr
    assert program.read_text() == MLP.read_text()  # --try edits a copy, never the user's file


async def test_the_ui_lists_a_graphs_collectives_and_the_bytes_per_step(spmd_trace) -> None:
    from lazyviz.tui.app import build_app
    from lazyviz.tui.widgets.code_view import CodeView
    from lazyviz.tui.widgets.executions import ExecutionList

    app = build_app(spmd_trace(MLP, "wrong"))
    async with app.run_test(size=(140, 40)) as pilot:
        table = app.query_one(ExecutionList)
        for _ in range(600):
            if len(table.rows) == 3 and app.state.latest is not None:
                break
            await pilot.pause(0.05)
        await pilot.press("end")
        backend = app.query_one("#backend-view", CodeView)
        for _ in range(600):  # worked out off the UI's thread: up to 30 s on a slow machine
            if "collectives XLA put in" in backend.text:
                break
            await pilot.pause(0.05)
        line = line_of(MLP, "out = h @ w2")
        assert f"NOT ASKED FOR: all-gather f32[64,256] over model at xla_spmd_mlp.py:{line} (aten::mm)" in backend.text
        assert "all-reduce f32[64,256] over model in the backward pass (aten::mm)  [expected:" in backend.text
        timing = str(app.query_one("#timing-view").render())
        assert "collectives: each device sends 192.0 KB per step, 96.0 KB of it not asked for" in timing


def test_a_folder_of_host_traces_adds_up_their_bytes_per_step(spmd_trace, tmp_path) -> None:
    # SPMD across hosts runs a process per host, each writing rank<R>.trace; two real
    # traces of one layout stand in for two hosts here (one machine has no second host).
    folder = tmp_path / "traces"
    folder.mkdir()
    for rank in (0, 1):
        (folder / f"rank{rank}.trace").write_bytes(spmd_trace(MLP, "megatron").read_bytes())
    result = cli("report", folder)
    assert result.status == 0, result.stderr
    assert "bytes each device sends per step: rank 0 24.0 KB, rank 1 24.0 KB; 48.0 KB added over the 2 ranks" \
        in result.stdout


BATCHNORM = PROGRAMS / "xla_spmd_batchnorm.py"


def test_a_batch_gathered_for_batch_norm_is_named_with_the_work_it_multiplies(spmd_trace, tmp_path) -> None:
    truth = xla_collectives(BATCHNORM, tmp_path)
    gathered = [shape for kind, shape in truth if kind == "all-gather"]
    assert gathered == ["f32[32,16,14,14]"]  # XLA's own module: the whole batch of conv1's output
    got = report(spmd_trace(BATCHNORM))
    [finding] = got["findings"]
    assert finding["kind"] == "unasked_collective"
    assert finding["site"]["line"] == line_of(BATCHNORM, "h = bn(c)")
    assert "XLA gathers the whole batch (f32[32,16,14,14]" in finding["message"]
    assert "for aten::native_batch_norm" in finding["message"]
    assert re.search(r"[1-9]\d* of the graph's \d+ matmuls and convolutions over the batch run on the whole",
                     finding["message"])
    assert "x.var((0, 2, 3), unbiased=False" in finding["fix"]
    # The fix, applied (--manual): the gather gone in XLA's module, the same loss, quiet.
    truth = xla_collectives(BATCHNORM, tmp_path / "manual", "--manual")
    assert not [shape for kind, shape in truth if kind == "all-gather"]
    manual = report(spmd_trace(BATCHNORM, "--manual"))
    assert manual["findings"] == []
    out = {args: python(BATCHNORM, *args, env=ENV).stdout for args in ((), ("--manual",))}
    assert out[()] == out[("--manual",)] and out[()].startswith("loss ")
