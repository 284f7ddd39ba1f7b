"""Multi-process runs under torchrun (gloo, 2 processes): one trace per rank, and the
step where ranks ran different graphs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SCRIPTS, cli, line_of

import lazyviz

pytestmark = pytest.mark.torch  # each test runs real scripts on torch's lazy backend

SCRIPT = SCRIPTS / "ddp_train.py"


def torchrun(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "lazyviz", "run", "--no-tui", "-o", f"{folder}/", str(SCRIPT), *args],
        capture_output=True, text=True, timeout=300,
    )


def test_clean_data_parallel_run(tmp_path: Path) -> None:
    result = torchrun(tmp_path, "--steps", "4")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rank 0 done" in result.stdout and "rank 1 done" not in result.stdout
    assert (tmp_path / "rank1.trace.out").read_text().strip().endswith("rank 1 done")
    traces = lazyviz.open_ranks(tmp_path)
    assert sorted(traces) == [0, 1]
    assert traces[1].run.rank["world_size"] == "2" and traces[1].run.rank["rank"] == "1"
    collectives = [e for e in traces[0].executions() if e.detail == "distributed.all_reduce()"]
    assert len(collectives) == 4 * 4  # one per parameter per step: shown as such
    report = json.loads(cli("report", tmp_path, "--format", "json").stdout)
    assert [r["rank"] for r in report["ranks"]] == [0, 1] and report["divergence"] == []
    assert cli("check", tmp_path, "--same-graphs-across-ranks").status == 0


@pytest.fixture(scope="module")
def divergent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("divergent")
    result = torchrun(folder, "--steps", "4", "--diverge-at", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    return folder


def test_divergent_batch_on_one_rank(divergent: Path) -> None:
    tmp_path = divergent
    report = json.loads(cli("report", tmp_path, "--format", "json").stdout)
    (divergence,) = report["divergence"]
    assert divergence["step"] == 2
    assert sorted(r for group in divergence["ranks"] for r in group["ranks"]) == [0, 1]
    assert "input shape" in divergence["change"] and "Float[16,8] -> Float[24,8]" in divergence["change"]
    # ... named at the line that built the differing input, not the all_reduce that synced it.
    assert divergence["change"].endswith(f"built at {SCRIPT.name}:{line_of(SCRIPT, 'inputs, targets = torch.randn')}")
    assert divergence["site"]["file"] == str(SCRIPT)
    check = cli("check", tmp_path, "--same-graphs-across-ranks")
    assert check.status == 1 and "ranks diverge at step 2" in check.stdout
    text = cli("report", tmp_path)
    assert "error: ranks diverge at step 2" in text.stdout


def test_a_crashing_rank_leaves_every_trace_readable(tmp_path: Path) -> None:
    result = torchrun(tmp_path, "--steps", "6", "--crash-at", "2")
    assert result.returncode != 0
    traces = lazyviz.open_ranks(tmp_path)
    crashed = traces[1].run
    assert crashed.error == "RuntimeError: rank 1 gives up at step 2"
    assert max(e.step for e in traces[1].executions()) == 1
    assert traces[0].count() > 0  # the other rank's trace too, whatever stopped it
    assert cli("report", tmp_path).status == 0


async def test_ui_switches_ranks_and_marks_the_divergent_step(divergent: Path) -> None:
    from test_tui import wait_for

    from lazyviz.tui.app import build_app
    from lazyviz.tui.widgets.executions import ExecutionList

    ranks = {rank: trace.path for rank, trace in lazyviz.open_ranks(divergent).items()}
    app = build_app(ranks[0], ranks=ranks, poll_s=0.05)
    async with app.run_test(size=(100, 30)) as pilot:
        table = app.query_one(ExecutionList)
        await wait_for(pilot, lambda: table.rows and app.state.run_info and app.state.run_info.finished)
        assert "rank 0 of 2" in str(app.query_one("#header").render())
        await pilot.press("9")
        await wait_for(pilot, lambda: "ranks diverge" in app.query_one("#ranks-view").text)
        marked = [line for line in app.query_one("#ranks-view").text.splitlines() if line.startswith("!")]
        assert len(marked) == 1 and "step    2" in marked[0]
        rank0_graphs = {e.graph for e in table.rows}
        await pilot.press("right_square_bracket")
        await wait_for(pilot, lambda: app.state.run_info is not None and app.state.run_info.rank.get("rank") == "1"
                       and len(table.rows) == app.query_one(ExecutionList).rows.__len__() > 0)
        assert "rank 1 of 2" in str(app.query_one("#header").render())
        assert {e.graph for e in table.rows} - rank0_graphs  # rank 1 ran a graph rank 0 did not
