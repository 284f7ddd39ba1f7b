"""README's promises: its test command is the one CI runs."""
from __future__ import annotations

import re

from conftest import ROOT


def readme_command(heading: str) -> str:
    section = (ROOT / "README.md").read_text().split(heading)[1]
    return re.search(r"```\n(.+?)\n```", section, re.DOTALL).group(1).strip()


def test_ci_runs_the_readme_test_commands() -> None:
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert readme_command("## Run the tests (fresh machine)") in ci_lines
    xla = readme_command("## PyTorch/XLA tests")
    assert xla in ci_lines and "scripts/xla-venv" in xla
    assert ci_lines.index(xla) > ci_lines.index(readme_command("## Run the tests (fresh machine)"))


def test_ci_runs_the_unit_tests_without_torch() -> None:
    """README says the unit tests run without torch: CI runs them in a venv that has none."""
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    command = 'scripts/notorch-venv && .venv-notorch/bin/python -m pytest -q -m "not torch"'
    assert command in readme and command in ci.splitlines()
