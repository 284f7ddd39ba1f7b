"""`lazyviz check` for CI, the chrome timeline, and run-to-run diff, on real traces."""
from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLES, cli, line_of


def test_check_passes_on_the_clean_sample(sample_trace) -> None:
    result = cli("check", sample_trace("clean_mlp"))
    assert result.status == 0 and result.stdout.startswith("lazyviz check: ok")


def test_check_gates_the_peak_memory_the_trace_recorded(sample_trace) -> None:
    """The process's peak resident memory, as the writer noted it rising: a budget below it
    fails the check at the step it was passed by, one above it passes, a size without a
    unit is bad usage."""
    path = sample_trace("clean_mlp")
    report = json.loads(cli("report", "--format", "json", path).stdout)
    peaks = report["summary"]["peak_rss"]
    assert peaks and all(peak["kb"] > 50_000 for peak in peaks)  # torch alone is more than 50 MB
    top = max(peak["kb"] for peak in peaks)
    low = cli("check", path, "--max-peak-rss", f"{top // 1024 - 1}M")
    assert low.status == 1 and "peak resident memory" in low.stdout and "past the budget by step" in low.stdout
    assert cli("check", path, "--max-peak-rss", f"{top // 1024 + 1}M").status == 0
    bad = cli("check", path, "--max-peak-rss", "300")
    assert bad.status == 2 and "not a size with a unit" in bad.stderr


def test_check_fails_on_the_item_sample_with_its_line(sample_trace) -> None:
    result = cli("check", sample_trace("item_in_loop"))
    assert result.status == 1
    line = line_of(SAMPLES / "item_in_loop.py", "loss.item()")
    assert result.stdout.splitlines() == [
        f"lazyviz check: executions per step: up to 2 in 3 steps (budget 1); "
        f"Tensor.item() at {SAMPLES / 'item_in_loop.py'}:{line} x3"]
    assert cli("check", sample_trace("item_in_loop"), "--max-executions-per-step", "2").status == 0


def test_check_fails_on_fallbacks_unless_allowed(sample_trace) -> None:
    path = sample_trace("fallback_mse")
    result = cli("check", path, "--max-executions-per-step", "3")
    assert result.status == 1
    assert [breach.split(" x")[0] for breach in result.stdout.splitlines()] == [
        "lazyviz check: fallback: aten::mse_loss", "lazyviz check: fallback: aten::mse_loss_backward"]
    assert f"fallback_mse.py:{line_of(SAMPLES / 'fallback_mse.py', 'F.mse_loss(')}" in result.stdout
    allowed = cli("check", path, "--max-executions-per-step", "3",
                  "--allow-fallback", "aten::mse_loss", "--allow-fallback", "aten::mse_loss_backward")
    assert allowed.status == 0, allowed.stdout


def test_check_names_the_recompile(sample_trace) -> None:
    result = cli("check", sample_trace("batch_size_change"))
    assert result.status == 1
    assert "cache misses after warm-up: 1 (budget 0); first in step 4" in result.stdout
    assert "Float[16,32] -> Float[24,32]" in result.stdout


@pytest.mark.torch  # runs lazyviz on a real script
def test_baseline_catches_a_new_graph(tmp_path: Path) -> None:
    script = SAMPLES / "batch_size_change.py"
    clean, changed = tmp_path / "clean.trace", tmp_path / "changed.trace"
    assert cli("run", "--no-tui", "-o", clean, script, "--steps", "6", "--change-at", "99").status == 0
    assert cli("run", "--no-tui", "-o", changed, script, "--steps", "6").status == 0
    baseline = tmp_path / "lazyviz-baseline.json"
    assert cli("check", clean, "--write-baseline", baseline).status == 0
    recorded = json.loads(baseline.read_text())
    assert recorded["format"] == "lazyviz-baseline" and recorded["executions_per_step"] == 1
    assert baseline.read_text().count("\n") > 5  # readable, one fact per line
    assert cli("check", clean, "--baseline", baseline).status == 0
    result = cli("check", changed, "--baseline", baseline)
    assert result.status == 1
    assert "batch_size_change.py" in result.stdout and "graph(s) the baseline does not have" in result.stdout


def test_check_usage_errors(sample_trace, tmp_path: Path) -> None:
    not_json = tmp_path / "b.json"
    not_json.write_text("{")
    for args in (["check", tmp_path / "none.trace"], ["check", sample_trace("clean_mlp"), "--baseline", not_json]):
        result = cli(*args)
        assert result.status == 2 and result.stderr.count("\n") == 1


def test_chrome_timeline(sample_trace, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    assert cli("export", sample_trace("item_in_loop"), "--format", "chrome", "-o", out).status == 0
    events = json.loads(out.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert tracks == {"steps", "python tracing", "executions"}
    executions = [e for e in events if e["ph"] == "X" and e.get("cat") in ("compile", "cached") and e["name"] != "compile"]
    assert len(executions) == 10
    assert executions[0]["name"].startswith("item samples/item_in_loop.py:")  # relative to the run's folder
    assert executions[0]["args"]["cache"] == "miss"
    assert {"graph", "nodes", "cache"} <= executions[0]["args"].keys()
    assert sum(1 for e in events if e["name"] == "compile") == 4
    assert all(e["dur"] > 0 for e in events if e["ph"] == "X")


@pytest.mark.torch  # runs lazyviz on a real script
def test_diff_of_two_runs_of_the_clean_sample(tmp_path: Path) -> None:
    a, b = tmp_path / "a.trace", tmp_path / "b.trace"
    for path in (a, b):
        assert cli("run", "--no-tui", "-o", path, SAMPLES / "clean_mlp.py", "--steps", "5").status == 0
    result = cli("diff", a, b)
    assert result.status == 0 and "graphs: the same set in both runs" in result.stdout
    assert "only in" not in result.stdout


def test_an_svg_export_on_a_terminal_goes_to_a_new_file_it_names(sample_trace, tmp_path: Path) -> None:
    """SVG XML in a terminal is no use: on a terminal, export writes a new file beside the
    trace (never over one) and names it; piped, it writes to standard output as before."""
    trace = tmp_path / "run.trace"
    trace.write_bytes(sample_trace("clean_mlp").read_bytes())
    taken = tmp_path / "run.trace.execution-1.svg"
    taken.write_text("mine")
    leader, follower = pty.openpty()
    try:
        result = subprocess.run([sys.executable, "-m", "lazyviz", "export", str(trace), "--execution", "1"],
                                stdin=follower, stdout=follower, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(follower)
        os.close(leader)
    assert result.returncode == 0, result.stderr
    written = tmp_path / "run.trace.execution-1-2.svg"
    assert f"wrote {written}" in result.stderr and written.read_text().startswith("<?xml")
    assert taken.read_text() == "mine"
    piped = cli("export", trace, "--execution", "1")
    assert piped.status == 0 and piped.stdout.startswith("<?xml")
