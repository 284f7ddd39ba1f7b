"""A fork of PyTorch/XLA that keeps its API under another package name (tests/xla/fork:
`forkxla`, as torch-neuronx and tt-xla keep theirs) is its own backend: one registry line
that the fork's distribution hands lazyviz (an entry point), and no file of lazyviz's
names it. Traced, it is counted as torch_xla counts it, its findings and edits speak its
names, and the edit runs."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, assert_diff_applies, cli, python

pytest.importorskip("torch_xla")

FORK = Path(__file__).parent / "fork"
COUNTS = Path(__file__).parent / "scripts" / "xla_counts.py"


@pytest.fixture
def fork_env() -> dict[str, str]:
    """The environment of a user who installed the fork (its package and its entry point)."""
    paths = [str(FORK / "site-packages"), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PJRT_DEVICE": "CPU", "PYTHONPATH": os.pathsep.join(paths)}


def untraced_counts(script: Path, env: dict[str, str]) -> tuple[tuple[int, int], str]:
    """((executions, compiles) by torch_xla's own metrics, stdout) of a run untraced."""
    result = python(COUNTS, "0", script, cwd=script.parent, env=env)
    assert result.status == 0, result.stderr
    executions, compiles = re.search(r"at exit: (\d+) executions, (\d+) compiles", result.stderr).groups()
    return (int(executions), int(compiles)), result.stdout


def test_a_fork_of_torch_xla_is_traced_reported_and_fixed_as_its_own_backend(tmp_path: Path,
                                                                             fork_env: dict[str, str]) -> None:
    script = tmp_path / "train_fork.py"
    shutil.copy(FORK / "train_fork.py", script)
    truth, untraced_out = untraced_counts(script, fork_env)
    trace = tmp_path / "fork.trace"
    # No --backend: the script imports forkxla, and the fork's entry point says whose that is.
    traced = cli("run", "--no-tui", "-o", trace, script, cwd=tmp_path, env=fork_env)
    assert traced.status == 0, traced.stderr
    assert traced.stdout == untraced_out
    assert "(forkxla, capture full) exited 0" in traced.stderr
    report = json.loads(cli("report", "--format", "json", trace, env=fork_env).stdout)
    assert report["run"]["backend"] == "forkxla" and report["run"]["capabilities"]["hlo"]
    assert (report["summary"]["executions"], report["summary"]["misses"]) == truth
    # Its findings and edits call the fork's own step call, never torch_xla's.
    [finding] = [f for f in report["findings"] if f["kind"] == "missing_mark_step"]
    assert "forkxla.sync()" in finding["fix"] and "torch_xla" not in finding["fix"]
    fixed = cli("fix", trace, cwd=tmp_path, env=fork_env)
    assert fixed.status == 0, fixed.stderr
    diff = fixed.stdout[fixed.stdout.index("--- a/"):]
    assert "+    forkxla.sync()\n" in diff and "torch_xla" not in diff
    assert_diff_applies(diff, tmp_path)
    subprocess.run(["git", "apply", "-"], input=diff.encode(), cwd=tmp_path, check=True)
    # The edited program cuts each step: one graph compiled for the steady step, the same output.
    (executions, compiles), edited_out = untraced_counts(script, fork_env)
    assert edited_out == untraced_out
    assert executions > truth[0] and compiles < executions


def test_no_file_of_lazyviz_names_the_fork() -> None:
    """The fork came in through its own entry point: lazyviz's files know nothing of it."""
    named = [path for path in (ROOT / "lazyviz").rglob("*.py") if "forkxla" in path.read_text()]
    assert named == []
