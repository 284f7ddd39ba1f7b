"""A run that dies of memory dies as it would untraced, and is explained: under a limit
on the address space, a loop without mark_step() grows its graph until LTC's allocator
raises. Untraced: RuntimeError, exit 1. Traced, it once died by SIGABRT in pybind11's
assertion (the hook made a Python object with no memory left); now the same error and
exit status, and the summary names the graph that grew."""
from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SCRIPTS, default_signals

LIMIT = 3_000_000 * 1024  # bytes of address space: torch and LTC load, the graph cannot grow for long


def limited() -> None:
    default_signals()
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          preexec_fn=limited, check=False)


@pytest.mark.torch
def test_a_graph_grown_out_of_memory_raises_as_untraced_and_is_named(tmp_path: Path) -> None:
    script = SCRIPTS / "grows_out_of_memory.py"
    untraced = run(str(script), cwd=tmp_path)
    assert untraced.returncode == 1 and "can't allocate memory" in untraced.stderr, untraced.stderr[-2000:]
    traced = run("-m", "lazyviz", "run", "--no-tui", "-o", "t.trace", str(script), cwd=tmp_path)
    assert traced.returncode == 1, traced.stderr[-3000:]
    assert "can't allocate memory" in traced.stderr and "SIGABRT" not in traced.stderr
    summary = traced.stderr[traced.stderr.index("lazyviz: "):]
    # The graph that grew, its size and the line that built most of it; not "a tensor of
    # 256 KiB, more memory than the device has".
    assert "is more than the process could hold" in summary and "nodes, its tensors" in summary, summary
    assert "built at grows_out_of_memory.py:11" in summary, summary
