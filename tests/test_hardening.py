"""The independent fuzz campaign's defects (#38), each reproduced on a real trace of
samples/item_in_loop.py through the real CLI: invalid text from a damaged trace, an
unbounded walk, pipes and links given as paths, and messages that named the wrong thing."""
from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SCRIPTS, cli
from test_safety import one_line_error

import lazyviz

pytestmark = pytest.mark.torch  # the trace comes from a real run


def damaged(trace: Path, folder: Path, name: str, sql: str, *values: object) -> Path:
    copy = folder / f"{name}.trace"
    shutil.copy(trace, copy)
    db = sqlite3.connect(copy)
    db.execute(sql, values)
    db.commit()
    db.close()
    return copy


# Each JSON field a trace holds, holding a lone surrogate (JSON escapes it; no encoder writes it out).
SURROGATES = {
    "argv": ("UPDATE run SET value = ? WHERE key = 'argv'", json.dumps(["\ud800.py"])),
    "capture": ("UPDATE run SET value = ? WHERE key = 'capture'", json.dumps("full\udfff")),
    "error": ("INSERT OR REPLACE INTO run (key, value) VALUES ('error', ?)", json.dumps("Boom\udc00")),
    "fallback_ops": ("UPDATE kinds SET fallback_ops = ? WHERE id = 0", json.dumps({"aten::\ud800": 1})),
    "stack": ("UPDATE stacks SET frames = ? WHERE id = 1", json.dumps([["/x\ud800.py", 1, "f\udfff"]])),
}
COMMANDS = (["report"], ["report", "--all"], ["report", "--format", "markdown"], ["report", "--format", "json"],
            ["check"], ["export", "--execution", "0", "--format", "dot"])


@pytest.mark.parametrize("field", sorted(SURROGATES))
def test_a_lone_surrogate_in_any_json_field_is_shown_replaced(sample_trace, tmp_path: Path, field: str) -> None:
    trace = damaged(sample_trace("item_in_loop"), tmp_path, field, *SURROGATES[field])
    for command in COMMANDS:
        # Through a pipe to a UTF-8 stdout, as a real encoder sees it.
        result = subprocess.run([sys.executable, "-m", "lazyviz", command[0], str(trace), *command[1:]],
                                capture_output=True, env={**os.environ, "PYTHONIOENCODING": "utf-8"}, timeout=120)
        assert result.returncode in (0, 1), (command, result.stderr.decode("utf-8", "replace"))
        assert b"internal error" not in result.stderr
    html = tmp_path / f"{field}.html"
    assert cli("report", trace, "--format", "html", "-o", html).status == 0 and html.stat().st_size > 0


def test_a_huge_depth_around_a_node_ends_at_once(sample_trace) -> None:
    result = cli("export", sample_trace("item_in_loop"), "--execution", "0", "--format", "dot",
                 "--around", "%1", "--depth", "2147483647", timeout=60)
    assert result.status == 0 and "digraph" in result.stdout


def test_pipes_and_folders_given_as_files_are_refused(sample_trace, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    one_line_error(cli("check", sample_trace("item_in_loop"), "--baseline", fifo, timeout=60), "not a regular file")
    one_line_error(cli("check", sample_trace("item_in_loop"), "--baseline", tmp_path, timeout=60), "not a regular file")
    one_line_error(cli("run", fifo, timeout=60), "not a regular file")
    nul = tmp_path / "nul.py"
    nul.write_bytes(b"print(1)\0\n")
    result = cli("run", "--no-tui", nul)
    one_line_error(result, "nul.py: source code string cannot contain null bytes")
    assert "None" not in result.stderr


def test_run_names_the_backends_it_knows_for_one_it_does_not(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text("print('ran')\n")
    one_line_error(cli("run", "--no-tui", "--backend", "tpu", script, cwd=tmp_path),
                   "unknown backend 'tpu' (known: ts, xla")
    assert not list(tmp_path.glob("*.trace"))  # nothing recorded, nothing claimed


def test_run_refuses_links_empty_and_dash_outputs(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text("print('ran')\n")
    dangling = tmp_path / "dangling.trace"
    dangling.symlink_to(tmp_path / "nowhere.trace")
    one_line_error(cli("run", "--no-tui", "-o", dangling, script), "symbolic link")
    assert not (tmp_path / "nowhere.trace").exists()
    one_line_error(cli("run", "--no-tui", "-o", "", script), "-o needs a path")
    one_line_error(cli("run", "--no-tui", "-o", "-", script, cwd=tmp_path), "standard output")
    assert not (tmp_path / "-").exists()
    # An existing folder is the folder form: DIR/rank0.trace.
    folder = tmp_path / "traces"
    folder.mkdir()
    assert cli("run", "--no-tui", "-o", folder, script).status == 0 and (folder / "rank0.trace").is_file()


def test_a_report_never_replaces_a_link_to_a_trace(sample_trace, tmp_path: Path) -> None:
    other = tmp_path / "other.trace"
    shutil.copy(sample_trace("clean_mlp"), other)
    link = tmp_path / "link.trace"
    link.symlink_to(other)
    one_line_error(cli("report", sample_trace("item_in_loop"), "-f", "-o", link), "is a lazyviz trace")
    assert link.is_symlink() and other.read_bytes()[:16] == b"SQLite format 3\0"


def test_reading_a_trace_whose_header_says_wal_leaves_nothing_beside_it(sample_trace, tmp_path: Path) -> None:
    # A trace copied while it was written (or damaged at bytes 18-19): no writer, no -wal.
    trace = tmp_path / "copied.trace"
    header = bytearray(sample_trace("item_in_loop").read_bytes())
    header[18:20] = b"\x02\x02"
    trace.write_bytes(bytes(header))
    assert cli("report", trace).status == 0 and cli("check", trace).status in (0, 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copied.trace"]


def test_a_disk_that_fills_keeps_the_trace_in_its_file_or_names_its_files(tmp_path: Path) -> None:
    # On a 1.1 MB disk: the run goes on, what was recorded is in the trace file as it
    # grows (the WAL is folded in every 256 KB), and where the last part could not be
    # folded in, the summary names the files that hold it; `report` folds them later.
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1100k", "tmpfs", str(disk)],
                                           capture_output=True).returncode:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        trace = disk / "x.trace"
        result = cli("run", "--no-tui", "-o", trace, SCRIPTS / "fills_trace.py", "400", "60")
        assert result.status == 0 and "Traceback" not in result.stderr
        written = int(re.search(r"stopped growing after (\d+) executions", result.stderr).group(1))
        if Path(f"{trace}-wal").exists():
            assert "keep them together" in result.stderr and "x.trace-wal" in result.stderr
            subprocess.run(["mount", "-o", "remount,size=8m", str(disk)], check=True)
            assert cli("report", trace).status == 0
        assert sorted(p.name for p in disk.iterdir()) == ["x.trace"]
        copy = tmp_path / "copy.trace"  # the file alone, as a user copies it
        shutil.copy(trace, copy)
        with lazyviz.open(copy) as opened:
            assert opened.count() == written
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
