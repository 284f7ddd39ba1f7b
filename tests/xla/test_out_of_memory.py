"""A PyTorch/XLA run killed for memory: in a memory cgroup the kernel's OOM killer ends a
loop whose graph grows without torch_xla.sync(), untraced and traced alike, and lazyviz
says so with the memory it recorded as it rose and the graph XLA last compiled."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import in_cgroup

pytest.importorskip("torch_xla")

SCRIPT = Path(__file__).parent / "scripts" / "grows_out_of_memory.py"
LIMIT = 1100 * 2**20  # bytes: torch_xla starts at about 0.8 GB; the graph outgrows the rest in 20 s


def test_a_run_the_kernel_kills_for_memory_is_explained_on_xla(tmp_path: Path, memory_cgroup) -> None:
    group, env = memory_cgroup(LIMIT), {**os.environ, "PJRT_DEVICE": "CPU"}
    untraced = in_cgroup(group, SCRIPT, cwd=tmp_path, env=env)
    assert untraced.returncode == -9, untraced.stderr[-2000:]
    traced = in_cgroup(group, "-m", "lazyviz", "run", "--no-tui", "-o", "t.trace", SCRIPT, cwd=tmp_path, env=env)
    assert traced.returncode == 137, traced.stderr[-3000:]
    summary = traced.stderr[traced.stderr.index("lazyviz: "):]
    assert "killed by SIGKILL, most likely the kernel's out-of-memory killer" in summary, summary
    # XLA's own figure for the graph, not the sum of its nodes' shapes (XLA fuses them).
    assert "compiled to need" in summary and "built at grows_out_of_memory.py:8" in summary, summary
    report = json.loads(subprocess.run([sys.executable, "-m", "lazyviz", "report", "--format", "json", "t.trace"],
                                       cwd=tmp_path, capture_output=True, text=True, check=True).stdout)
    peaks = [peak["kb"] for peak in report["summary"]["peak_rss"]]
    assert len(peaks) > 3 and peaks == sorted(peaks) and peaks[-1] > 1.25 * peaks[0]
