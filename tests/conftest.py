"""Shared fixtures: run lazyviz for real, and trace each sample once per session."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
SCRIPTS = Path(__file__).resolve().parent / "scripts"

# tests/xla run in .venv-xla (scripts/xla-venv), whose torch is torch_xla's own; the
# main environment has no torch_xla and skips them.
HAS_XLA = importlib.util.find_spec("torch_xla") is not None
collect_ignore = [] if HAS_XLA else ["xla"]


@dataclass
class Completed:
    status: int
    stdout: str
    stderr: str


def default_signals() -> None:
    """For Popen's preexec_fn: SIGHUP, SIGINT and SIGTERM as a fresh terminal session
    has them. A shell under nohup leaves SIGHUP ignored, and `cmd &` in a script leaves
    SIGINT ignored; children inherit that, and lazyviz rightly keeps an ignored signal
    ignored (as the script would untraced), so a test of what these signals do must
    start its processes with the default dispositions, whatever started pytest."""
    for number in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)


def cli(*args: str | Path, cwd: Path | None = None, timeout: float = 600, env: dict | None = None) -> Completed:
    """Run the real `python -m lazyviz` command."""
    result = subprocess.run(
        [sys.executable, "-m", "lazyviz", *map(str, args)],
        capture_output=True, text=True, cwd=cwd, timeout=timeout, env=env, preexec_fn=default_signals,
    )
    return Completed(result.returncode, result.stdout, result.stderr)


def python(*args: str | Path, cwd: Path | None = None, env: dict | None = None) -> Completed:
    result = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                            env=env, timeout=600, preexec_fn=default_signals)
    return Completed(result.returncode, result.stdout, result.stderr)


def assert_diff_applies(diff: str, folder: Path) -> None:
    """The diff applies as a user applies it, from the folder the script ran in: with
    `git apply --check` and with `patch --dry-run -p1` (bytes as printed: CRLF kept)."""
    assert diff, "no diff"
    for command in (["git", "apply", "--check", "-"], ["patch", "--dry-run", "--batch", "-p1"]):
        check = subprocess.run(command, input=diff.encode(), cwd=folder, capture_output=True)
        assert check.returncode == 0, f"{command[0]}: {check.stdout.decode()}{check.stderr.decode()}\n{diff}"


def line_of(path: Path, text: str) -> int:
    """The 1-based line of the first code line containing text (tests never hard-code
    lines); docstring lines, which quote code in backticks, are skipped."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if text in line and "`" not in line:
            return number
    raise AssertionError(f"{text!r} not in {path}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that reads a sample's trace runs torch to make it: mark it so, as the
    modules that start `lazyviz run` themselves mark all their tests. `pytest -m "not
    torch"` then runs the fast unit tests, without torch or a compiler."""
    for item in items:
        if "sample_trace" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.torch)


@pytest.fixture(scope="session")
def execution_hook() -> None:
    """Build the C++ hook once, before any test times a run."""
    if HAS_XLA:
        return  # the XLA environment runs tests/xla only; XLA needs no hook
    from lazyviz.backends.ts import load_hook

    load_hook()


@pytest.fixture(autouse=True)
def _hook_for_torch_tests(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("torch") is not None:
        request.getfixturevalue("execution_hook")


# Sample name -> its arguments: small, fixed step counts keep the suite quick.
SAMPLE_ARGS = {
    "clean_mlp": ["--steps", "6"],
    "batch_size_change": ["--steps", "8"],
    "item_in_loop": ["--steps", "5"],
    "missing_mark_step": ["--steps", "12"],
    "fallback_mse": ["--steps", "4"],
    "transformer_adamw": ["--steps", "3"],
    "python_number_aliasing": ["--steps", "6"],
    "dtype_change": ["--steps", "6"],
    "python_branch": ["--steps", "6"],
}


@pytest.fixture(scope="session")
def sample_trace(tmp_path_factory: pytest.TempPathFactory, execution_hook: None):
    """sample_trace(name) -> path of that sample's trace, run once per session."""
    made: dict[str, Path] = {}
    folder = tmp_path_factory.mktemp("sample-traces")

    def make(name: str) -> Path:
        if name not in made:
            path = folder / f"{name}.trace"
            result = cli("run", "--no-tui", "-o", path, SAMPLES / f"{name}.py", *SAMPLE_ARGS[name])
            assert result.status == 0, result.stderr
            made[name] = path
        return made[name]

    return make


def row(text: str, label: str) -> list[str]:
    """The before and after cells of one row of --try's table."""
    line = next(line for line in text.splitlines() if line.strip().startswith(label))
    return line.strip()[len(label):].split()


@pytest.fixture
def memory_cgroup(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """memory_cgroup(limit) -> a memory cgroup of `limit` bytes (v1's memory controller,
    else v2's), as a container or a batch scheduler gives a job: there the kernel's OOM
    killer, not a failed allocation, ends a process that outgrows it. Skips where this
    user cannot make one (it needs root)."""
    made: list[Path] = []

    def make(limit: int) -> Path:
        for root, limit_file in ((Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"),
                                 (Path("/sys/fs/cgroup"), "memory.max")):
            group = root / f"lazyviz-test-{os.getpid()}-{len(made)}"
            try:
                group.mkdir()
            except OSError:
                continue
            made.append(group)
            try:
                (group / limit_file).write_text(str(limit))
            except OSError:
                continue
            return group
        pytest.skip("no memory cgroup can be made here (it needs root and a memory controller)")

    yield make
    for group in made:
        with contextlib.suppress(OSError):
            group.rmdir()


def in_cgroup(group: Path, *args: str | Path, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    """Python with `args`, run inside the cgroup."""
    def enter() -> None:
        default_signals()
        (group / "cgroup.procs").write_text(str(os.getpid()))

    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=600,
                          preexec_fn=enter, check=False, env=env)
