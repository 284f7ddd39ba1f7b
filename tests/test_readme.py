"""README's promises: its test command is the one CI runs."""
from __future__ import annotations

import re

from conftest import ROOT


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Run the tests (fresh machine)")[1]
    command = re.search(r"```\n(.+?)\n```", section, re.DOTALL).group(1).strip()
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert command in ci_lines
