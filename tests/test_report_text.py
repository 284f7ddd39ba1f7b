"""The text report a user reads first: findings first, grouped so a suite's hundreds of
findings fit one screen, every one with --all, colour only on a terminal."""
from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from conftest import cli

from lazyviz.trace.schema import GraphRecord
from lazyviz.trace.synthetic import chain_ir, execution, write_trace

TESTS = 40


@pytest.fixture
def suite_trace(tmp_path: Path) -> Path:
    """A pytest suite of 40 tests on the lazy device, each recompiling once after warm-up
    when its batch grows from 16 to 24 rows at the same line."""
    records, graphs, index = [], [], 0
    for test in range(TESTS):
        small, big = f"{test:04x}a{'0' * 11}", f"{test:04x}b{'0' * 11}"
        graphs += [GraphRecord(small, 8, chain_ir(8, 16), "", index), GraphRecord(big, 8, chain_ir(8, 24), "", index + 3)]
        for step in range(4):
            graph = big if step == 3 else small
            records.append(execution(index, step=test * 4 + step, graph=graph, nodes=8,
                                     cache="miss" if step in (0, 3) else "hit",
                                     context=f"tests/test_model.py::test_case_{test}"))
            index += 1
    path = tmp_path / "suite.trace"
    write_trace(path, records, graphs, argv=["-m", "pytest", "tests"])
    return path


def test_a_suite_of_recompiles_is_one_line_with_its_count(suite_trace: Path) -> None:
    report = cli("report", suite_trace)
    assert report.status == 0, report.stderr
    findings = report.stdout.split("findings:")[1].split("executions in")[0]
    assert f"{TESTS} recompile findings at train.py:30" in findings
    assert findings.count("fix:") == 1  # said once for the group
    assert len(report.stdout.splitlines()) < 24  # one screen
    # Findings come before the run's figures.
    assert report.stdout.index("findings:") < report.stdout.index("graph executions in")


def test_all_shows_every_finding(suite_trace: Path) -> None:
    every = cli("report", "--all", suite_trace).stdout
    assert every.count("recompiled: input shape Float[16,64] -> Float[24,64]") == TESTS
    assert "test_case_39" in every


def test_colour_only_on_a_terminal(suite_trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lazyviz.export.report import coloured

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    text = cli("report", suite_trace).stdout
    assert "\x1b[" not in text  # piped: plain
    shown = coloured(text, Terminal())
    assert "\x1b[" in shown
    # The terminal's own colours (30-37), which its theme keeps readable on white, never
    # the bright ones (90-97) that vanish there.
    codes = {int(code) for code in re.findall(r"\x1b\[(?:\d;)?(\d+)m", shown)}
    assert codes & set(range(30, 38)) and not codes & set(range(90, 98)), codes
    monkeypatch.setenv("NO_COLOR", "1")
    assert coloured(text, Terminal()) == text


@pytest.mark.torch
def test_no_step_run_reads_as_such(sample_trace) -> None:
    text = cli("report", sample_trace("missing_mark_step")).stdout
    assert "1 graph execution and no mark_step() (no steps)" in text and "per step)" not in text


def test_a_summary_on_a_terminal_wraps_between_words_with_a_hanging_indent() -> None:
    from lazyviz.export.report import wrapped

    line = ("    warning: Tensor.item() forces 1 extra execution per step in 8 of 8 steps (2.93 ms per step), "
            "sync 69.5 ms at Float[24,1] [samples/item_in_loop.py:33]")
    lines = wrapped(f"  findings:\n{line}", 80).split("\n")
    assert lines[0] == "  findings:" and len(lines) > 2 and all(len(part) <= 80 for part in lines)
    assert lines[1].startswith("    warning:") and all(part.startswith("        ") for part in lines[2:])
    assert " ".join(part.strip() for part in lines[1:]).split() == line.split()  # no word cut in two


@pytest.mark.torch  # reads real traces of samples
@pytest.mark.parametrize(("sample", "verdict"), [("fallback_mse", "finding: fallback aten::mse_loss"),
                                                  ("item_in_loop", "finding: "),
                                                  ("clean_mlp", "the step's own sync")])
def test_each_costly_sync_site_says_what_explains_it(sample_trace, sample: str, verdict: str) -> None:
    report = cli("report", sample_trace(sample))
    assert report.status == 0, report.stderr
    slowest = report.stdout.split("slowest sync sites (total sync ms):\n")[1].split("\n  trace:")[0].splitlines()
    assert slowest and all(re.search(r": (finding: .+|the step's own sync|no finding)$", line) for line in slowest)
    assert any(verdict in line for line in slowest)


@pytest.mark.torch
def test_a_compile_is_warm_up_only_where_its_graph_runs_again(tmp_path: Path) -> None:
    """A sample loop whose context grows a token at a time compiles a new graph per token,
    each run once: none of those compiles is warm-up, though each is its own first. A
    training loop's compiles, whose graphs run again step after step, are."""
    import shutil

    program = Path(__file__).parent / "programs" / "char_lm_device.py"
    shutil.copy(program, tmp_path / program.name)
    ran = cli("run", "--no-tui", "-o", "t.trace", program.name, "--device", "lazy", "--mark-step", "--steps", "4",
              "--tokens", "12", cwd=tmp_path)
    assert ran.status == 0, ran.stderr
    said = re.search(r"(\d+) compiles \(cache misses\), (\d+) of them the usual warm-up", ran.stderr)
    assert said is not None, ran.stderr
    misses, warmup = map(int, said.groups())
    assert misses >= 14 and misses - warmup >= 11  # the tokens past the first
    steady = cli("run", "--no-tui", "-o", "s.trace", program.name, "--device", "lazy", "--mark-step", "--tokens", "0",
                 "--log-every", "100", cwd=tmp_path)
    assert re.search(r"\d+ compiles \(cache misses\), (all|both) the usual warm-up", steady.stderr), steady.stderr
