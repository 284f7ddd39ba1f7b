"""A job of many ranks, as bench/ranks.py writes 256 of them, smaller (no torch): one rank
diverges, one died early (no end record), one's trace was cut short. Each is reported
as what it is, per rank, never as a traceback; the figures are bench/ranks.py's."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import cli

from lazyviz.trace.files import rank_trace
from lazyviz.trace.synthetic import write_rank_job

RANKS, EXECUTIONS, DIVERGE_AT = 24, 200, 20  # 40 steps; the last rank dies in step 13


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("job")
    write_rank_job(folder, RANKS, EXECUTIONS, diverge_at=DIVERGE_AT)
    return folder


def test_the_divergent_rank_is_found_past_the_step_a_dead_rank_stopped_in(job: Path) -> None:
    report = json.loads(cli("report", "--format", "json", job).stdout)
    assert [r["rank"] for r in report["ranks"]] == list(range(RANKS)) and report["unreadable"] == []
    (divergence,) = report["divergence"]
    odd = RANKS // 2
    assert divergence["step"] == DIVERGE_AT and divergence["graphs"][str(odd)].startswith("0024")
    assert {tuple(g["ranks"]) for g in divergence["ranks"]} == {(odd,), tuple(r for r in range(RANKS - 1) if r != odd)}
    dead = report["ranks"][-1]["report"]
    assert dead["run"]["finished"] is False and len(dead["executions"]) == EXECUTIONS // 3


def test_text_report_and_check_name_each_rank(job: Path) -> None:
    text = cli("report", job).stdout
    assert f"ranks 0-{RANKS // 2 - 1}, {RANKS // 2 + 1}-{RANKS - 2} ran" in text  # one line for 23 ranks
    assert text.count("\n[rank ") == RANKS and f"[rank {RANKS - 1}] lazyviz: train.py (ts, capture full) unfinished" in text
    check = cli("check", job, "--same-graphs-across-ranks")
    assert check.status == 1 and "Traceback" not in check.stderr + check.stdout
    lines = check.stdout.splitlines()
    assert any(line.startswith(f"lazyviz check: rank {RANKS - 1}: unfinished") for line in lines)
    assert any(f"ranks diverge at step {DIVERGE_AT}" in line for line in lines)


def test_a_rank_cut_short_is_reported_as_unreadable_and_the_rest_as_usual(job: Path, tmp_path: Path) -> None:
    for rank in range(RANKS):
        (tmp_path / f"rank{rank}.trace").write_bytes(rank_trace(job, rank).read_bytes())
    cut = tmp_path / "rank3.trace"
    os.truncate(cut, cut.stat().st_size // 2)
    text = cli("report", tmp_path)
    assert text.status == 0 and "Traceback" not in text.stderr
    assert f"{RANKS - 1} ranks in" in text.stdout and f"rank 3 cannot be read: {cut}" in text.stdout
    assert f"ranks diverge at step {DIVERGE_AT}" in text.stdout
    report = json.loads(cli("report", "--format", "json", tmp_path).stdout)
    assert [u["rank"] for u in report["unreadable"]] == [3] and len(report["ranks"]) == RANKS - 1
    check = cli("check", tmp_path, "--same-graphs-across-ranks")
    assert check.status == 1 and f"lazyviz check: rank 3: {cut}" in check.stdout
