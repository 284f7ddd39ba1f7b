"""Each sample traced for real: what lazyviz records must match what the sample does
and what torch's own LTC dump shows for the same run."""
from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import SAMPLE_ARGS, SAMPLES, line_of, python

import lazyviz
from lazyviz.trace.model import Execution

pytestmark = pytest.mark.torch  # each test runs real scripts on torch's lazy backend


def executions(path: Path) -> list[Execution]:
    with lazyviz.open(path) as trace:
        return trace.executions()


def ltc_dump_sites(name: str, tmp_path: Path) -> list[tuple[str, int]]:
    """Run the sample untraced with LTC_SAVE_TENSORS_FILE and read, per dumped sync,
    the first frame of the sample's own file."""
    dump = tmp_path / f"{name}.ltc.txt"  # torch appends, never truncates
    env = {**os.environ, "LTC_SAVE_TENSORS_FILE": str(dump), "LTC_SAVE_TENSORS_FMT": "text"}
    script = SAMPLES / f"{name}.py"
    result = python(script, *SAMPLE_ARGS[name], env=env)
    assert result.status == 0, result.stderr
    sites = []
    for entry in dump.read_text().split("[ScheduleSyncTensorsGraph]")[1:]:
        frames = re.findall(r"^\s+(\S+) \((.+):(\d+)\)$", entry.split("Hashes:")[0], re.MULTILINE)
        user = next(((file, int(line)) for _, file, line in frames if file == str(script)), None)
        sites.append(user)
    return sites


def test_clean_mlp_runs_once_per_step(sample_trace) -> None:
    path = sample_trace("clean_mlp")
    found = executions(path)
    mark_step_line = line_of(SAMPLES / "clean_mlp.py", "torch._lazy.mark_step()")
    assert [e.step for e in found] == list(range(6))
    assert {(e.cause, e.frame.line) for e in found} == {("mark_step", mark_step_line)}
    assert all(e.frame.file == str(SAMPLES / "clean_mlp.py") for e in found)
    # Warm-up compiles (step 0 also initialises the parameters), then hits only.
    assert [e.cache for e in found] == ["miss", "miss", "hit", "hit", "hit", "hit"]
    assert all(not e.fallback_ops for e in found)
    with lazyviz.open(path) as trace:
        run = trace.run
        assert run.exit_status == 0 and run.steps == 6 and run.backend == "ts"
        graph = trace.graph(found[1].graph)
        assert graph is not None and graph.nodes == found[1].nodes
        assert "aten::addmm" in graph.ir_text or "aten::mm" in graph.ir_text
        assert "graph(" in graph.backend_text  # TorchScript


def test_sites_match_torch_ltc_dump(sample_trace, tmp_path: Path) -> None:
    """Every sync torch dumps is one execution here, at the same user line."""
    for name in ("item_in_loop", "fallback_mse", "batch_size_change"):
        dumped = ltc_dump_sites(name, tmp_path)
        recorded = [(e.frame.file, e.frame.line) if e.frame else None for e in executions(sample_trace(name))]
        assert recorded == dumped, name


def test_batch_size_change_recompiles_at_the_new_size(sample_trace) -> None:
    found = executions(sample_trace("batch_size_change"))
    misses = [e.step for e in found if e.is_miss]
    assert misses == [0, 1, 4]  # warm-up, then the first step with batch 24
    assert found[4].graph != found[3].graph


def test_item_in_loop_syncs_twice_per_step(sample_trace) -> None:
    found = executions(sample_trace("item_in_loop"))
    script = SAMPLES / "item_in_loop.py"
    item_line = line_of(script, "loss.item()")
    mark_step_line = line_of(script, "torch._lazy.mark_step()")
    assert Counter(e.step for e in found) == {step: 2 for step in range(5)}
    assert [(e.cause, e.frame.line) for e in found[:2]] == [("item", item_line), ("mark_step", mark_step_line)]
    assert Counter(e.cause for e in found) == {"item": 5, "mark_step": 5}


def test_missing_mark_step_runs_one_growing_graph(sample_trace) -> None:
    found = executions(sample_trace("missing_mark_step"))
    assert len(found) == 1
    only = found[0]
    assert only.cause == "item" and only.step == 0
    assert only.frame.line == line_of(SAMPLES / "missing_mark_step.py", ".item()")
    assert only.nodes > 12 * 5  # the loop body, once per iteration


def test_fallback_sample_names_ops_and_lines(sample_trace) -> None:
    found = executions(sample_trace("fallback_mse"))
    script = SAMPLES / "fallback_mse.py"
    by_op = {e.detail: e.frame.line for e in found if e.cause == "fallback"}
    assert by_op == {
        "aten::mse_loss": line_of(script, "F.mse_loss("),
        "aten::mse_loss_backward": line_of(script, "loss.backward()"),
    }
    totals: Counter[str] = Counter()
    for e in found:
        totals.update(e.fallback_ops)
    assert totals == {"aten::mse_loss": 4, "aten::mse_loss_backward": 4}


def test_transformer_adamw_falls_back_in_the_optimizer(sample_trace) -> None:
    found = executions(sample_trace("transformer_adamw"))
    script = SAMPLES / "transformer_adamw.py"
    step_line = line_of(script, "optimizer.step()")
    lerp = [e for e in found if e.detail == "aten::lerp.Scalar"]
    assert lerp and {e.frame.line for e in lerp} == {step_line}
    assert len(found) / 3 > 10  # many executions per step
    assert [e.cause for e in found if e.cause == "mark_step"] == ["mark_step"] * 3
