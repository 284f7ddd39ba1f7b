"""A run that dies of memory dies as it would untraced, and is explained: under a limit
on the address space, a loop without mark_step() grows its graph until LTC's allocator
raises. Untraced: RuntimeError, exit 1. Traced, it once died by SIGABRT in pybind11's
assertion (the hook made a Python object with no memory left); now the same error and
exit status, and the summary names the graph that grew."""
from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SCRIPTS, default_signals, in_cgroup

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
    # The allocation that fails first depends on the process's layout (traced: one more
    # thread): LTC's allocator's "can't allocate memory", or operator new's std::bad_alloc.
    assert re.search(r"RuntimeError: .*(can't allocate memory|std::bad_alloc)", traced.stderr), traced.stderr[-3000:]
    assert "SIGABRT" not in traced.stderr
    summary = traced.stderr[traced.stderr.index("lazyviz: "):]
    # The graph that grew, its size and the line that built most of it; not "a tensor of
    # 256 KiB, more memory than the device has".
    assert "is more than the process could hold" in summary and "nodes, its tensors" in summary, summary
    assert "built at grows_out_of_memory.py:11" in summary, summary


CGROUP_LIMIT = 700 * 2**20  # bytes of memory: torch and LTC load (about 280 MiB), the graph grows past it in seconds


@pytest.mark.torch
def test_a_run_the_kernel_kills_for_memory_is_explained_with_its_memory_by_execution(tmp_path: Path,
                                                                                     memory_cgroup) -> None:
    """In a cgroup, memory is not refused but taken back: the kernel's OOM killer ends the
    process by SIGKILL, untraced and traced alike. The summary says so with the memory
    lazyviz's writer recorded as it rose, and names the last graph and the lines that grew
    it; the report, the HTML report and `check --max-peak-rss` read the same figures."""
    script, group = SCRIPTS / "grows_out_of_memory.py", memory_cgroup(CGROUP_LIMIT)
    untraced = in_cgroup(group, str(script), cwd=tmp_path)
    assert untraced.returncode == -9, untraced.stderr[-2000:]
    traced = in_cgroup(group, "-m", "lazyviz", "run", "--no-tui", "-o", "t.trace", str(script), cwd=tmp_path)
    assert traced.returncode == 137, traced.stderr[-3000:]  # as a shell gives a child killed by SIGKILL
    summary = traced.stderr[traced.stderr.index("lazyviz: "):]
    assert "killed by SIGKILL, most likely the kernel's out-of-memory killer" in summary, summary
    assert "the last graph it ran" in summary and "built at grows_out_of_memory.py:11" in summary, summary
    report = json.loads(subprocess.run([sys.executable, "-m", "lazyviz", "report", "--format", "json", "t.trace"],
                                       cwd=tmp_path, capture_output=True, text=True, check=True).stdout)
    peaks = report["summary"]["peak_rss"]
    # Rising, a figure each time it rose, by the execution stored then.
    assert len(peaks) >= 2 and peaks[-1]["kb"] > 1.5 * peaks[0]["kb"]
    assert [p["kb"] for p in peaks] == sorted({p["kb"] for p in peaks})
    assert [p["execution"] for p in peaks] == sorted({p["execution"] for p in peaks})
    low = f"{peaks[-1]['kb'] // 1024 - 1}M"
    check = subprocess.run([sys.executable, "-m", "lazyviz", "check", "--allow-unfinished", "--any-fallbacks",
                            "--max-peak-rss", low, "t.trace"], cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 1 and f"(budget {low[:-1]}.0 MB): past the budget by execution" in check.stdout
    roomy = subprocess.run([sys.executable, "-m", "lazyviz", "check", "--allow-unfinished", "--max-peak-rss", "1G",
                            "t.trace"], cwd=tmp_path, capture_output=True, text=True)
    assert "(budget 1.0 GB)" not in roomy.stdout and "the script died: " in roomy.stdout  # the kill is a breach
    html = subprocess.run([sys.executable, "-m", "lazyviz", "report", "t.trace", "-o", "t.html"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert html.returncode == 0, html.stderr
    assert 'aria-label="peak resident memory by execution"' in (tmp_path / "t.html").read_text()
