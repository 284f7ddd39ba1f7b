"""`lazyviz run` behaves like `python script.py`, keeps what it recorded whatever
happens to the script, and says clearly when the input is wrong."""
from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest
from conftest import SCRIPTS, cli, python

import lazyviz

pytestmark = pytest.mark.torch  # each test runs real scripts on torch's lazy backend


def test_output_argv_and_exit_status_match_untraced(tmp_path: Path) -> None:
    script = SCRIPTS / "behaves.py"
    untraced = python(script, "3", "--flag", "x y")
    traced = cli("run", "--no-tui", "-o", tmp_path / "t.trace", script, "3", "--flag", "x y")
    assert untraced.status == traced.status == 3
    assert traced.stdout == untraced.stdout
    assert "argv ['" + str(script) + "', '3', '--flag', 'x y']" in traced.stdout
    assert "name __main__" in traced.stdout and f"path0 {SCRIPTS}" in traced.stdout
    # The script's stderr comes first, untouched; lazyviz's summary follows it.
    assert traced.stderr.startswith(untraced.stderr)
    assert f"trace: {tmp_path / 't.trace'}" in traced.stderr


def test_module_mode(tmp_path: Path) -> None:
    traced = cli("run", "--no-tui", "-o", tmp_path / "m.trace", "-m", "pkg.train", "a", cwd=SCRIPTS)
    untraced = python("-m", "pkg.train", "a", cwd=SCRIPTS)
    assert traced.status == untraced.status == 0
    assert traced.stdout == untraced.stdout == "module __main__ ['a'] [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]\n"
    with lazyviz.open(tmp_path / "m.trace") as trace:
        assert [e.cause for e in trace.executions()] == ["tolist"]


def test_script_that_raises_keeps_executions_and_error(tmp_path: Path) -> None:
    script = SCRIPTS / "raises.py"
    untraced = python(script)
    traced = cli("run", "--no-tui", "-o", tmp_path / "r.trace", script)
    assert traced.status == untraced.status == 1
    assert traced.stderr.startswith(untraced.stderr)  # same traceback, no lazyviz frames
    with lazyviz.open(tmp_path / "r.trace") as trace:
        assert len(trace.executions()) == 2
        run = trace.run
        assert run.error == "ValueError: bad <batch> & 'shape'"
        assert "raises.py" in run.traceback and run.exit_status == 1


def test_sigkill_leaves_a_readable_trace(tmp_path: Path) -> None:
    traced = cli("run", "--no-tui", "-o", tmp_path / "k.trace", SCRIPTS / "killed.py")
    assert traced.status == 128 + 9
    with lazyviz.open(tmp_path / "k.trace") as trace:
        assert [e.step for e in trace.executions()] == [0, 1, 2]
        assert not trace.run.complete and trace.run.ended_by == "killed by SIGKILL"
    report = cli("report", tmp_path / "k.trace")
    assert report.status == 0 and "killed by SIGKILL; the trace stopped early" in report.stdout


def test_a_pytest_suite_under_lazyviz_names_each_executions_test(tmp_path: Path) -> None:
    # Parametrized cases run the same stack, line for line: only the test tells them apart,
    # even for the hits the hook repeats without calling Python.
    (tmp_path / "test_lazy.py").write_text(
        "import pytest, torch, torch._lazy, torch._lazy.ts_backend\n"
        "torch._lazy.ts_backend.init()\n"
        "@pytest.mark.parametrize('n', [1, 2, 3])\n"
        "def test_steps(n):\n"
        "    x = torch.ones(4, device='lazy')\n"
        "    for _ in range(5):\n"
        "        x = x + n\n"
        "        torch._lazy.mark_step()\n"
        "    assert x.sum().item() == 4 * (1 + 5 * n)\n")
    traced = cli("run", "--no-tui", "--capture", "light", "-o", tmp_path / "t.trace", "-m", "pytest", "-q",
                 "-p", "no:cacheprovider", "test_lazy.py", cwd=tmp_path)
    assert traced.status == 0 and "3 passed" in traced.stdout, traced.stderr
    with lazyviz.open(tmp_path / "t.trace") as trace:
        tests = [(e.context, e.cause) for e in trace.executions()]
    for n in (1, 2, 3):
        test = f"test_lazy.py::test_steps[{n}]"
        assert [cause for context, cause in tests if context == test] == ["mark_step"] * 5 + ["item"]
    assert len(tests) == 18


def test_missing_script_is_one_line(tmp_path: Path) -> None:
    result = cli("run", "--no-tui", tmp_path / "missing.py")
    assert result.status == 2
    assert result.stderr.count("\n") == 1 and "missing.py" in result.stderr and "no such file" in result.stderr


def test_syntax_error_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    result = cli("run", "--no-tui", broken)
    assert result.status == 2 and result.stderr.count("\n") == 1 and "broken.py:1" in result.stderr


def test_not_a_trace_is_one_line(tmp_path: Path) -> None:
    text = tmp_path / "not-a-trace.txt"
    text.write_text("hello\n" * 100)
    for path in (text, tmp_path / "absent.trace"):
        result = cli("report", path)
        assert result.status == 2 and result.stderr.count("\n") == 1 and str(path) in result.stderr


def test_newer_schema_is_one_line(sample_trace, tmp_path: Path) -> None:
    newer = tmp_path / "newer.trace"
    shutil.copy(sample_trace("clean_mlp"), newer)
    with sqlite3.connect(newer) as db:
        db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    result = cli("report", newer)
    assert result.status == 2 and result.stderr.count("\n") == 1 and "upgrade lazyviz" in result.stderr


def as_version(path: Path, version: int) -> None:
    """Rewrite a trace in an older schema's layout: before 6, no `memory`; before 5, each
    graph's IR text whole (no `ir_lines`); before 4, each execution row held all its fields
    (no `kinds`); before 2, without `call` and `context`."""
    with lazyviz.open(path) as trace:
        texts = {graph.id: graph.ir_text for graph in trace.graphs()}
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE memory")
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
        if version >= 5:
            return
        db.executemany("UPDATE graphs SET ir_text = ? WHERE id = ?",
                       [(zlib.compress(text.encode()), graph) for graph, text in texts.items()])
        db.execute("ALTER TABLE graphs DROP COLUMN ir_lines")
        db.execute("DROP TABLE ir_lines")
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
        if version >= 4:
            return
        db.execute("CREATE TABLE wide AS SELECT * FROM execution_rows ORDER BY idx")
        db.execute("DROP VIEW execution_rows")
        db.execute("DROP TABLE executions")
        db.execute("DROP TABLE kinds")
        db.execute("ALTER TABLE wide RENAME TO executions")
        if version < 2:
            db.execute("ALTER TABLE executions DROP COLUMN call")
            db.execute("ALTER TABLE executions DROP COLUMN context")
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))


@pytest.mark.parametrize("version", [5, 4, 3])
def test_an_older_trace_reads_as_it_did(sample_trace, tmp_path: Path, version: int) -> None:
    old = tmp_path / f"v{version}.trace"
    shutil.copy(sample_trace("batch_size_change"), old)
    current = cli("report", "--format", "json", old)
    with lazyviz.open(old) as trace:
        table, rows = list(trace.table()), trace.executions()
        by_lines = trace.ir_texts()
    assert table == rows and len(rows) > 5  # the columns and the rows read alike
    assert any(by_lines.line_ids(graph) is not None for graph in by_lines)  # what schema 5 changed
    as_version(old, version)
    result = cli("report", "--format", "json", old)
    assert result.status == 0, result.stderr
    # All of it but the process's memory, which schema 6 began to record.
    expected = json.loads(current.stdout)
    assert expected["summary"].pop("peak_rss")
    assert json.loads(result.stdout) == {**expected, "summary": {**expected["summary"], "peak_rss": []}}
    with lazyviz.open(old) as trace:
        assert list(trace.table()) == trace.executions() == rows


def test_a_version_1_trace_still_reads(sample_trace, tmp_path: Path) -> None:
    # Version 1 had no `call` and `context` columns: they read as None, the rest as before.
    old = tmp_path / "v1.trace"
    shutil.copy(sample_trace("fallback_mse"), old)
    current = cli("report", "--format", "json", old)
    as_version(old, 1)
    result = cli("report", "--format", "json", old)
    assert result.status == 0, result.stderr
    before, after = json.loads(current.stdout), json.loads(result.stdout)
    messages = [f["message"] for f in before["findings"]]
    assert "aten::mse_loss falls back to the CPU in mse_loss():" in messages[0], messages
    assert [f["message"] for f in after["findings"]] == [re.sub(r" in [\w.]+\(\):", ":", m) for m in messages]


def test_script_without_lazy_tensors_is_one_line(tmp_path: Path) -> None:
    result = cli("run", "--no-tui", "-o", tmp_path / "n.trace", SCRIPTS / "no_lazy.py")
    assert result.stdout == "hello from a plain script\n"
    assert result.status == 0  # the script's own status, always
    assert result.stderr.count("\n") == 1 and "ran no lazy-tensor graph" in result.stderr


def test_report_json_contract(sample_trace) -> None:
    result = cli("report", sample_trace("item_in_loop"), "--format", "json")
    assert result.status == 0
    report = json.loads(result.stdout)
    assert report["format"] == "lazyviz-report" and report["version"] == 2
    assert all("changes_same_as" in r for r in report["recompiles"])
    assert report["run"]["backend"] == "ts" and report["run"]["capture"] == "full"
    assert report["run"]["torch"].startswith("2.") and report["run"]["exit_status"] == 0
    assert report["run"]["error"] is None and report["steps"] == 5
    first = report["executions"][0]
    assert set(first) >= {"index", "step", "cause", "frame", "graph", "nodes", "cache", "sync_ms",
                          "trace_ms", "fallback_ops"}
    assert first["frame"]["file"].endswith("item_in_loop.py") and first["cause"] == "item"
    assert sum(g["executions"] for g in report["graphs"]) == len(report["executions"]) == 10
    assert report["fallbacks"] == {}


def test_report_text_names_sites(sample_trace) -> None:
    result = cli("report", sample_trace("fallback_mse"))
    assert result.status == 0
    assert "12 graph executions in 4 steps" in result.stdout
    assert "aten::mse_loss x4" in result.stdout and "fallback_mse.py" in result.stdout


def test_light_capture_skips_ir_and_stacks(tmp_path: Path) -> None:
    path = tmp_path / "light.trace"
    result = cli("run", "--no-tui", "--capture", "light", "-o", path, SCRIPTS / "slow_steps.py", "3", "0")
    assert result.status == 0
    with lazyviz.open(path) as trace:
        found = trace.executions()
        assert len(found) == 3 and all(e.frame and e.frame.file.endswith("slow_steps.py") for e in found)
        graph = trace.graph(found[0].graph)
        assert graph.ir_text == "" and "graph(" in graph.backend_text
        assert trace.run.capture == "light" and found[0].stack_id is None


def test_stack_is_recorded_outermost_first(sample_trace) -> None:
    with lazyviz.open(sample_trace("clean_mlp")) as trace:
        stack = trace.stack(trace.execution(0).stack_id)
    assert [f.function for f in stack[:2]] == ["<module>", "main"]
    assert stack[-1].function == "mark_step" and "torch" in stack[-1].file


def test_follow_reads_a_growing_trace(tmp_path: Path) -> None:
    path, gate = tmp_path / "grow.trace", tmp_path / "go"
    process = subprocess.Popen(
        [sys.executable, "-m", "lazyviz", "run", "--no-tui", "-o", str(path), str(SCRIPTS / "slow_steps.py"),
         "5", "0.2", str(gate)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert process.stdout.readline() == "step 0\n"  # the trace holds a row, and the script waits for the gate
        batches: list[list[int]] = []
        done = threading.Event()

        def follow() -> None:
            with lazyviz.open(path) as trace:
                for batch in trace.follow(poll_s=0.05):
                    batches.append([e.index for e in batch])
            done.set()

        threading.Thread(target=follow, daemon=True).start()
        deadline = time.monotonic() + 60
        while not batches and time.monotonic() < deadline:
            time.sleep(0.02)
        assert batches == [[0]]  # read while the run was held after its first step
        gate.touch()
        assert done.wait(60), "follow() did not end when the run finished"
        assert [i for batch in batches for i in batch] == [0, 1, 2, 3, 4]
        assert len(batches) >= 2  # it saw the trace grow, not one read at the end
    finally:
        process.wait(60)


def test_json_report_streamed_in_pieces_is_the_same_document(sample_trace, monkeypatch) -> None:
    from lazyviz.export import report

    monkeypatch.setattr(report, "LINES_PER_PIECE", 3)  # several pieces, and a short last one
    from lazyviz.analysis.run import Run

    with lazyviz.open(sample_trace("batch_size_change")) as trace:
        pieces = list(report.dumps_report(report.json_report(Run(trace), lines=True)))
        whole = report.json_report(Run(trace))
    assert len(pieces) > 10 and len(whole["executions"]) > 6
    assert json.loads("".join(pieces)) == json.loads(json.dumps(whole))
