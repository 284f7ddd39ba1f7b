"""What LTC itself shows the user reads the same traced and untraced: the user's own
LTC_SAVE_TENSORS_FILE dump (its stacks and IR), torch._lazy.debug's helpers and every
counter (#37)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from conftest import SCRIPTS, cli, python

pytestmark = pytest.mark.torch  # real runs on torch's lazy backend

SCRIPT = SCRIPTS / "ltc_debugging.py"


def runs(tmp_path: Path, at_start: bool) -> tuple[tuple[str, str], tuple[str, str], str]:
    """((stdout, dump) untraced, (stdout, dump) traced, lazyviz's stderr)."""
    results = []
    stderr = ""
    for traced in (False, True):
        dump = tmp_path / f"{'traced' if traced else 'untraced'}-{at_start}.txt"
        env = {**os.environ, "LTC_SAVE_TENSORS_FILE": str(dump)} if at_start else None
        args = [] if at_start else [dump]
        if traced:
            result = cli("run", "--no-tui", "-o", tmp_path / f"t{at_start}.trace", SCRIPT, *args, env=env)
            stderr = result.stderr
        else:
            result = python(SCRIPT, *args, env=env)
        assert result.status == 0, result.stderr
        results.append((result.stdout, dump.read_text()))
    return results[0], results[1], stderr


@pytest.mark.parametrize("at_start", [False, True], ids=["dump-asked-at-run-time", "dump-set-before"])
def test_the_users_dump_helpers_and_counters_read_as_untraced(tmp_path: Path, at_start: bool) -> None:
    (out, dump), (traced_out, traced_dump), stderr = runs(tmp_path, at_start)
    assert traced_out == out  # dump_ir, render_ir_graph and every counter, SyncedTensorsWithIR too
    assert traced_dump == dump  # byte for byte: whole stacks, no node locations
    # The dump's stacks are whole, innermost first, as torch's own test_debug_util checks.
    assert re.search(r"Python Stacktrace:\s+mark_step \(.*/_lazy/__init__.py:\d+\)\s+train \(.*ltc_debugging.py:\d+\)"
                     r"\s+<module> \(.*ltc_debugging.py:\d+\)\s+\n", traced_dump)
    assert "location=" not in traced_dump
    assert "LTC_SAVE_TENSORS_FILE is set" in stderr  # what it cost lazyviz is said once
    assert stderr.count("LTC_SAVE_TENSORS_FILE is set") == 1


def test_source_lines_keep_the_debug_helpers_as_untraced(tmp_path: Path) -> None:
    # No dump: lazyviz records per-node lines, and the helpers still print none.
    untraced = python(SCRIPT)
    trace = tmp_path / "lines.trace"
    traced = cli("run", "--no-tui", "-o", trace, SCRIPT)
    assert traced.status == 0 and traced.stdout == untraced.stdout
    import lazyviz

    with lazyviz.open(trace) as opened:
        graph = opened.graph(opened.executions()[0].graph)
    assert graph is not None and "location=train@ltc_debugging.py:" in graph.ir_text
