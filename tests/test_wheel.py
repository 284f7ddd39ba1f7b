"""lazyviz installed as users install it: the sdist and the wheel built from the repo (the
wheel from the sdist, as `python -m build` does), metadata that twine accepts, and the
wheel installed without -e into a fresh venv, where every module imports and every
command works on a real run. Every other test runs the editable install, which reads the
tree and so cannot see a package the wheel forgot (once, lazyviz.fix: every command failed)."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLES, default_signals
from test_layout import modules

pytestmark = pytest.mark.torch

# Every module of the tree, imported from the installed wheel (__main__ would run the CLI).
IMPORT_ALL = """
import importlib, pkgutil, sys
import lazyviz
names = [m.name for m in pkgutil.walk_packages(lazyviz.__path__, "lazyviz.") if not m.name.endswith("__main__")]
for name in names:
    importlib.import_module(name)
print(lazyviz.__file__)
print("\\n".join(sorted(names)))
"""


def _run(command: list[str | Path], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    # PYTHONPATH from the test run would put the tree back on the path: the point is that it is not.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    return subprocess.run([str(part) for part in command], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=timeout, stdin=subprocess.DEVNULL, preexec_fn=default_signals, check=False)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist, then the wheel built from it (so a file the sdist forgot fails here too)."""
    out = tmp_path_factory.mktemp("dist")
    built = _run([sys.executable, "-m", "build", "--outdir", out, ROOT], cwd=out)
    assert built.returncode == 0, built.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed, not editable. It sees this interpreter's
    packages (torch, textual: the same torch, so the C++ hook built for it is reused);
    lazyviz itself must come from the venv (asserted where it is imported)."""
    folder = tmp_path_factory.mktemp("venv") / "venv"
    made = _run([sys.executable, "-m", "venv", "--system-site-packages", folder], cwd=dist)
    assert made.returncode == 0, made.stderr
    wheel = next(dist.glob("lazyviz-*.whl"))
    installed = _run([folder / "bin" / "pip", "install", "-q", "--no-deps", "--force-reinstall", wheel], cwd=dist)
    assert installed.returncode == 0, installed.stderr[-3000:]
    return folder


def test_the_wheel_and_sdist_hold_every_module_and_file(dist: Path) -> None:
    wheel = next(dist.glob("lazyviz-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    tree = {name.replace(".", "/") + ("/__init__.py" if path.name == "__init__.py" else ".py")
            for name, path in modules().items()}
    assert tree - names == set()
    hook = {f"lazyviz/backends/hook/{p.name}" for p in (ROOT / "lazyviz/backends/hook").iterdir()}
    assert hook <= names and "lazyviz/tui/lazyviz.tcss" in names
    assert not any(name.startswith("tui/") for name in names)  # installed as lazyviz.tui only
    checked = _run([sys.executable, "-m", "twine", "check", "--strict", *dist.glob("lazyviz-*")], cwd=dist)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_every_module_imports_from_the_installed_wheel(venv: Path, tmp_path: Path) -> None:
    done = _run([venv / "bin" / "python", "-c", IMPORT_ALL], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    where, *names = done.stdout.split()
    assert Path(where).is_relative_to(venv), f"lazyviz imported from {where}, not the venv"
    assert set(names) >= {name for name in modules() if not name.endswith("__main__")} - {"lazyviz"}


def test_every_command_works_installed(venv: Path, tmp_path: Path) -> None:
    lazyviz = venv / "bin" / "lazyviz"
    assert _run([lazyviz, "--help"], cwd=tmp_path).returncode == 0
    ran = _run([lazyviz, "run", "--no-tui", "-o", "t.trace", SAMPLES / "item_in_loop.py", "--steps", "6"], cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "Tensor.item() forces 1 extra execution per step" in ran.stderr
    report = _run([lazyviz, "report", "t.trace"], cwd=tmp_path)
    assert report.returncode == 0 and "item_in_loop.py:" in report.stdout, report.stderr
    check = _run([lazyviz, "check", "t.trace"], cwd=tmp_path)
    assert check.returncode == 1 and "executions per step: up to 2" in check.stdout + check.stderr, check.stderr
    fix = _run([lazyviz, "fix", "t.trace"], cwd=tmp_path)
    assert fix.returncode == 0 and "+++ " in fix.stdout and "add_step_closure" in fix.stdout, fix.stderr
    svg = _run([lazyviz, "export", "t.trace", "--execution", "1", "--format", "svg", "-o", "g.svg"], cwd=tmp_path)
    assert svg.returncode == 0, svg.stderr
    assert (tmp_path / "g.svg").read_text().lstrip().startswith(("<?xml", "<svg"))
