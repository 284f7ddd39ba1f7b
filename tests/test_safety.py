"""Do no harm: the fault suite. Each test names the item of the safety issue it covers,
runs the real CLI, and checks what a user would: their files, their script's behaviour,
the processes left, and one line (never a traceback) for bad input."""
from __future__ import annotations

import json
import os
import pty
import re
import resource
import select
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import ROOT, SCRIPTS, cli, default_signals, line_of, python

import lazyviz

pytestmark = pytest.mark.torch  # each test runs real scripts on torch's lazy backend

PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2


def one_line_error(result, *words: str) -> None:
    assert result.status == 2, (result.status, result.stderr)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] if Path(f"/proc/{pid}").exists() else "X"
    return state not in ("Z", "X")


def wait_for_file(path: Path, seconds: float = 120) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def without_root_overrides() -> None:
    """Root that obeys file permissions: drop the capabilities that bypass them (the
    interpreter lives under /root, so switching to another user would not run it)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def lazyviz_obeying_permissions(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lazyviz", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, preexec_fn=without_root_overrides, timeout=300)


@pytest.fixture
def shared_dir():
    """A folder outside pytest's private tmp, which an unprivileged user can enter."""
    folder = Path(tempfile.mkdtemp(prefix="lazyviz-safety-"))
    folder.chmod(0o755)
    yield folder
    folder.chmod(0o755)
    shutil.rmtree(folder, ignore_errors=True)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="drops root's permission overrides to test permissions")


# -- 1, 2: output paths ------------------------------------------------------------------
def test_run_never_replaces_a_users_file(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    Path(f"{notes}-wal").write_text("mine too\n")
    script = tmp_path / "s.py"
    shutil.copy(SCRIPTS / "slow_steps.py", script)
    for args in (["-o", notes], ["-f", "-o", notes], ["-o", script], ["--force", "-o", script], ["-o", "/dev/null"]):
        result = cli("run", "--no-tui", *args, script, "1", "0")
        one_line_error(result, str(args[-1]))
    assert notes.read_text() == "my notes\n" and Path(f"{notes}-wal").read_text() == "mine too\n"
    assert script.read_bytes() == (SCRIPTS / "slow_steps.py").read_bytes()
    assert Path("/dev/null").exists() and stat.S_ISCHR(Path("/dev/null").stat().st_mode)
    assert "--force" in cli("run", "--no-tui", "-o", notes, script, "1", "0").stderr


def test_run_replaces_its_own_trace_only_with_force(tmp_path: Path) -> None:
    trace = tmp_path / "t.trace"
    assert cli("run", "--no-tui", "-o", trace, SCRIPTS / "slow_steps.py", "2", "0").status == 0
    one_line_error(cli("run", "--no-tui", "-o", trace, SCRIPTS / "slow_steps.py", "3", "0"), "exists", "--force")
    with lazyviz.open(trace) as opened:
        assert opened.count() == 2
    assert cli("run", "--no-tui", "-f", "-o", trace, SCRIPTS / "slow_steps.py", "3", "0").status == 0
    with lazyviz.open(trace) as opened:
        assert opened.count() == 3


def test_report_export_and_baseline_never_write_over_inputs_or_files(sample_trace, tmp_path: Path) -> None:
    trace = tmp_path / "t.trace"
    shutil.copy(sample_trace("clean_mlp"), trace)
    before = trace.read_bytes()
    script = tmp_path / "train.py"
    script.write_text("print('mine')\n")
    one_line_error(cli("report", trace, "-o", trace), "trace being read")
    one_line_error(cli("report", trace, "-o", trace, "--force"), "trace being read")
    one_line_error(cli("check", trace, "--write-baseline", trace), "trace")
    one_line_error(cli("export", trace, "--execution", "0", "-o", script, "--format", "ir"), "exists", "--force")
    drawing = tmp_path / "graph.svg"
    drawing.write_text("<svg/>")
    refused = cli("export", trace, "--execution", "0", "-o", drawing)
    assert refused.stderr == f"lazyviz: {drawing} exists; use --force to replace it\n"  # not "not a lazyviz trace"
    one_line_error(cli("report", trace, "-o", sample_trace("item_in_loop"), "--force"), "lazyviz trace")
    assert trace.read_bytes() == before and script.read_text() == "print('mine')\n"
    report = tmp_path / "r.txt"
    assert cli("report", trace, "-o", report).status == 0
    one_line_error(cli("report", trace, "-o", report), "exists")
    assert cli("report", trace, "-o", report, "--force").status == 0 and "lazyviz:" in report.read_text()


# -- 3: two runs on one -o -------------------------------------------------------------------
def test_second_run_on_a_live_trace_is_refused_and_the_first_is_untouched(tmp_path: Path) -> None:
    trace, gate = tmp_path / "t.trace", tmp_path / "go"
    first = subprocess.Popen([sys.executable, "-m", "lazyviz", "run", "--no-tui", "-o", str(trace),
                              str(SCRIPTS / "slow_steps.py"), "6", "0", str(gate)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert first.stdout.readline() == "step 0\n"  # held there until the gate opens
    for force in ([], ["--force"]):
        second = cli("run", "--no-tui", *force, "-o", trace, SCRIPTS / "slow_steps.py", "1", "0")
        one_line_error(second, str(trace))
    gate.touch()
    _out, err = first.communicate(timeout=120)
    assert first.returncode == 0 and "6 graph executions in 6 steps" in err
    with lazyviz.open(trace) as opened:
        assert opened.count() == 6 and opened.run.complete


# -- 4: torchrun, -o without a trailing slash ---------------------------------------------
def test_torchrun_output_is_a_folder_without_the_slash(tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "lazyviz", "run", "--no-tui", "-o", str(folder), str(SCRIPTS / "ddp_train.py"), "--steps", "2"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in folder.glob("*.trace")) == ["rank0.trace", "rank1.trace"]
    assert sorted(lazyviz.open_ranks(folder)) == [0, 1]


# -- 5: permissions and file-name characters ------------------------------------------------
@needs_root
def test_read_only_folder_and_unreadable_trace(sample_trace, shared_dir: Path) -> None:
    trace = shared_dir / "t.trace"
    shutil.copy(sample_trace("clean_mlp"), trace)
    trace.chmod(0o644)
    shared_dir.chmod(0o555)
    result = lazyviz_obeying_permissions("report", trace)
    assert result.returncode == 0, result.stderr
    assert "6 graph executions in 6 steps" in result.stdout
    assert sorted(p.name for p in shared_dir.iterdir()) == ["t.trace"]
    trace.chmod(0o000)
    result = lazyviz_obeying_permissions("report", trace)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "permission denied" in result.stderr


@needs_root
def test_trace_that_cannot_be_created_is_refused_before_the_script_runs(shared_dir: Path) -> None:
    shared_dir.chmod(0o555)
    result = lazyviz_obeying_permissions("run", "--no-tui", "-o", shared_dir / "t.trace", SCRIPTS / "slow_steps.py", "1", "0")
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr.count("\n") == 1 and "cannot create" in result.stderr


def test_file_names_with_uri_characters(sample_trace, tmp_path: Path) -> None:
    for name in ("50%41.trace", "run#1.trace", "what?.trace"):
        path = tmp_path / name
        shutil.copy(sample_trace("item_in_loop"), path)
        result = cli("report", path)
        assert result.status == 0 and "10 graph executions in 5 steps" in result.stdout, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["50%41.trace", "run#1.trace", "what?.trace"]


# -- 6: one self-contained file --------------------------------------------------------------
def test_run_and_report_leave_one_file(tmp_path: Path) -> None:
    trace = tmp_path / "t.trace"
    assert cli("run", "--no-tui", "-o", trace, SCRIPTS / "slow_steps.py", "2", "0").status == 0
    assert [p.name for p in tmp_path.iterdir()] == ["t.trace"]
    assert cli("report", trace).status == 0 and cli("check", trace, "--any-fallbacks").status in (0, 1)
    assert [p.name for p in tmp_path.iterdir()] == ["t.trace"]


def test_killed_run_is_folded_into_one_file(tmp_path: Path) -> None:
    trace = tmp_path / "k.trace"
    assert cli("run", "--no-tui", "-o", trace, SCRIPTS / "killed.py").status == 137
    assert [p.name for p in tmp_path.iterdir()] == ["k.trace"]


# -- 7, 10: signals -------------------------------------------------------------------------
def test_script_gets_the_default_sigint_handler_and_its_argv(tmp_path: Path) -> None:
    untraced = python("sees.py", cwd=SCRIPTS)
    traced = cli("run", "--no-tui", "-o", tmp_path / "t.trace", "sees.py", cwd=SCRIPTS)
    assert traced.status == untraced.status == 0
    assert traced.stdout == untraced.stdout
    assert "argv0 sees.py file sees.py" in traced.stdout and "default_int_handler" in traced.stdout


def _in_pty(command: list[str], cwd: Path, ready: str) -> tuple[int, str]:
    """Run in a terminal, press Ctrl-C once `ready` is printed; (exit status, output)."""
    pid, fd = pty.fork()
    if pid == 0:
        default_signals()  # Ctrl-C must reach a handler, however pytest was started
        os.chdir(cwd)
        os.execv(command[0], command)
    output = b""
    deadline = time.monotonic() + 120
    pressed = False
    while time.monotonic() < deadline:
        readable, _, _ = select.select([fd], [], [], 0.2)
        if readable:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        if not pressed and ready.encode() in output:
            os.write(fd, b"\x03")
            pressed = True
    finished, status = os.waitpid(pid, os.WNOHANG)
    grace = time.monotonic() + 10  # it may be exiting right now
    while finished == 0 and time.monotonic() < grace:
        time.sleep(0.1)
        finished, status = os.waitpid(pid, os.WNOHANG)
    if finished == 0:  # still running: Ctrl-C did not stop it
        os.killpg(os.getpgid(pid), signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(fd)
        raise AssertionError(f"Ctrl-C did not stop it; the output was:\n{output.decode('utf-8', 'replace')}")
    os.close(fd)
    return os.waitstatus_to_exitcode(status), output.decode("utf-8", "replace")


def test_ctrl_c_without_the_ui_stops_the_script_as_untraced(tmp_path: Path) -> None:
    untraced_status, untraced = _in_pty([sys.executable, "runs_until_stopped.py", str(tmp_path / "u.pid")],
                                        SCRIPTS, "running")
    traced_status, traced = _in_pty([sys.executable, "-m", "lazyviz", "run", "--no-tui", "-o",
                                     str(tmp_path / "t.trace"), "runs_until_stopped.py", str(tmp_path / "t.pid")],
                                    SCRIPTS, "running")
    assert untraced_status == -signal.SIGINT and "KeyboardInterrupt" in untraced
    assert traced_status == 130 and "KeyboardInterrupt" in traced, traced
    assert not alive(int((tmp_path / "t.pid").read_text()))
    with lazyviz.open(tmp_path / "t.trace") as trace:
        assert trace.count() >= 1 and trace.run.error.startswith("KeyboardInterrupt")


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_reach_the_script(tmp_path: Path, number: int) -> None:
    pid_file = tmp_path / "pid"
    lazyviz_process = subprocess.Popen(
        [sys.executable, "-m", "lazyviz", "run", "--no-tui", "-o", str(tmp_path / "t.trace"),
         str(SCRIPTS / "runs_until_stopped.py"), str(pid_file)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    script_pid = int(wait_for_file(pid_file))
    assert lazyviz_process.stdout.readline() == "running\n"
    lazyviz_process.send_signal(number)
    try:
        _, err = lazyviz_process.communicate(timeout=60)
    finally:  # whatever happened, leave nothing running
        for pid in (lazyviz_process.pid, script_pid):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert lazyviz_process.returncode == 128 + number
    assert not alive(script_pid)
    assert f"killed by {signal.Signals(number).name}" in err and "Traceback" not in err


# -- 8: a KeyboardInterrupt inside lazyviz's callback ---------------------------------------
def test_keyboard_interrupt_in_the_execution_callback_reaches_the_script(tmp_path: Path) -> None:
    result = cli("run", "--no-tui", "-o", tmp_path / "t.trace", SCRIPTS / "interrupt_in_hook.py", "400")
    assert result.status == 0, result.stderr
    assert "interrupted in" in result.stdout and "after True" in result.stdout, result.stdout
    assert "Exception ignored" not in result.stderr


# -- 9: fork ----------------------------------------------------------------------------------
def test_forked_children_never_hang(tmp_path: Path) -> None:
    untraced = python(SCRIPTS / "forks.py")
    traced = cli("run", "--no-tui", "-o", tmp_path / "t.trace", SCRIPTS / "forks.py", timeout=120)
    assert traced.status == untraced.status == 0
    assert sorted(traced.stdout.splitlines()) == sorted(untraced.stdout.splitlines())
    with lazyviz.open(tmp_path / "t.trace") as trace:
        assert trace.run.complete and trace.count() >= 2  # the parent's own executions


# -- 11: a full disk mid-run -------------------------------------------------------------------
def test_disk_full_mid_run_lets_the_script_finish_and_says_so(tmp_path: Path) -> None:
    untraced = python(SCRIPTS / "fills_trace.py")

    def small_files() -> None:  # EFBIG past 200 KB stands in for a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

    traced = subprocess.run([sys.executable, "-m", "lazyviz", "run", "--no-tui", "-o", str(tmp_path / "t.trace"),
                             str(SCRIPTS / "fills_trace.py")], capture_output=True, text=True,
                            preexec_fn=small_files, timeout=300)
    assert traced.returncode == 0 and traced.stdout == untraced.stdout
    assert "stopped growing" in traced.stderr and "Traceback" not in traced.stderr
    assert "incomplete" in traced.stderr or "stopped early" in traced.stderr or "unfinished" in traced.stderr
    report = cli("report", tmp_path / "t.trace")
    assert report.status == 0 and ("unfinished" in report.stdout or "stopped early" in report.stdout)
    assert cli("check", tmp_path / "t.trace", "--max-misses-after", "1000").status == 1


# -- 12: threads ------------------------------------------------------------------------------
def test_threads_keep_their_own_cause(tmp_path: Path) -> None:
    assert cli("run", "--no-tui", "-o", tmp_path / "t.trace", SCRIPTS / "threads_sync.py").status == 0
    cpu_line = line_of(SCRIPTS / "threads_sync.py", "x.cpu()")
    item_line = line_of(SCRIPTS / "threads_sync.py", "y.sum().item()")
    with lazyviz.open(tmp_path / "t.trace") as trace:
        causes = {(e.frame.line, e.cause) for e in trace.executions() if e.frame}
    assert causes == {(cpu_line, "cpu"), (item_line, "item")}


def test_threads_building_at_once_keep_their_own_node_lines(tmp_path: Path) -> None:
    # A node's line is read without the GIL once its code objects are known: from the
    # building thread's own frames, never the other thread's.
    assert cli("run", "--no-tui", "-o", tmp_path / "t.trace", SCRIPTS / "threads_build.py").status == 0
    script = SCRIPTS / "threads_build.py"
    want = {"aten::add": f"adds@threads_build.py:{line_of(script, 'x = x + 1')}",
            "aten::mul": f"muls@threads_build.py:{line_of(script, 'y = y * 1.5')}"}
    seen: dict[str, set[str]] = {op: set() for op in want}
    with lazyviz.open(tmp_path / "t.trace") as trace:
        graphs = trace.graphs()
    for graph in graphs:
        for op, location in re.findall(r"\] (aten::add|aten::mul)\(.*?location=([^,\s]+)", graph.ir_text):
            seen[op].add(location)
    assert len(graphs) >= 40  # most rounds a new graph (LTC shares some: 56-60 of 80)
    assert seen == {op: {location} for op, location in want.items()}


def test_the_same_frames_below_another_line_name_that_line(tmp_path: Path) -> None:
    # A node's walk is kept by the code objects it met and the user frame's instruction:
    # the same module called from another line, or through a helper, is not that walk.
    script = SCRIPTS / "same_frames_other_line.py"
    assert cli("run", "--no-tui", "-o", tmp_path / "t.trace", script).status == 0
    want = {f"<module>@same_frames_other_line.py:{line_of(script, 'a = layer(x)')}",
            f"<module>@same_frames_other_line.py:{line_of(script, 'b = layer(x * 2)')}",
            f"helper@same_frames_other_line.py:{line_of(script, 'return layer(x * 3)')}"}
    with lazyviz.open(tmp_path / "t.trace") as trace:
        graphs = trace.graphs()
    assert graphs
    for graph in graphs:
        located = re.findall(r"\] aten::addmm\(.*?location=([^,\s]+)", graph.ir_text)
        assert sorted(located) == sorted(want), graph.ir_text


def test_each_of_thousands_of_lines_names_its_own_nodes(tmp_path: Path) -> None:
    # More lines building nodes than the hook keeps walks for (2 x 2,048, by the innermost
    # frame's code object and instruction): kept walks are replaced as the script goes,
    # and the second round (another graph: another shape) takes some kept, some walked anew.
    count = 4500
    head = ["import torch", "import torch._lazy", "import torch._lazy.ts_backend", "",
            "torch._lazy.ts_backend.init()", "for size in (2, 3):", "    y = torch.zeros(size, device='lazy')"]
    body = [f"    y = y * {index + 2}" for index in range(count)]
    script = tmp_path / "many_lines.py"
    script.write_text("\n".join([*head, *body, "    torch._lazy.mark_step()", ""]))
    assert cli("run", "--no-tui", "-o", tmp_path / "t.trace", script).status == 0
    with lazyviz.open(tmp_path / "t.trace") as trace:
        graphs = trace.graphs()
    assert len(graphs) == 2
    want = [f"<module>@many_lines.py:{len(head) + 1 + index}" for index in range(count)]
    for graph in graphs:
        # Post order: the multiplications in the order the lines run.
        assert re.findall(r"\] aten::mul\(.*?location=([^,\s]+)", graph.ir_text) == want


# -- 13: the script's own view ---------------------------------------------------------------
def test_no_lazy_graph_keeps_the_scripts_exit_status(tmp_path: Path) -> None:
    result = cli("run", "--no-tui", "-o", tmp_path / "n.trace", SCRIPTS / "no_lazy.py")
    assert result.status == 0 and result.stdout == "hello from a plain script\n"
    assert "ran no lazy-tensor graph" in result.stderr


def test_pytest_without_lazy_graphs_stays_green(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    result = cli("run", "--no-tui", "-o", tmp_path / "p.trace", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 "test_plain.py", cwd=tmp_path)
    assert result.status == 0 and "1 passed" in result.stdout


def test_held_back_import_warnings_follow_the_users_filters(tmp_path: Path) -> None:
    # A numpy that is missing makes torch warn at import ("Failed to initialize NumPy").
    broken = tmp_path / "site" / "numpy"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'numpy'\", name='numpy')\n")
    for warnings_filter in ("ignore", "default"):
        env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}:{ROOT}", "PYTHONWARNINGS": warnings_filter}
        untraced = python(SCRIPTS / "sees.py", env=env)
        # cli(): default signal dispositions, as python() gives the untraced run (under a
        # `nohup ... &` pytest the traced script saw SIGINT ignored, untraced not).
        traced = cli("run", "--no-tui", "-o", tmp_path / f"{warnings_filter}.trace", SCRIPTS / "sees.py", env=env,
                     timeout=300)
        assert ("NumPy" in untraced.stderr) == (warnings_filter == "default")  # torch did warn
        assert ("NumPy" in traced.stderr) == ("NumPy" in untraced.stderr), (warnings_filter, traced.stderr)
        assert traced.stdout == untraced.stdout and "value 6.0" in untraced.stdout


# -- 14, 15, 16: reading damaged or hostile traces -----------------------------------------
def test_recursive_view_is_one_line_not_a_hang(sample_trace, tmp_path: Path) -> None:
    crafted = tmp_path / "c.trace"
    shutil.copy(sample_trace("clean_mlp"), crafted)
    with sqlite3.connect(crafted) as db:
        db.execute("DROP TABLE run")
        db.execute("CREATE VIEW run AS WITH RECURSIVE r(key, value) AS (SELECT 'a', '1' UNION ALL "
                   "SELECT key, value || 'x' FROM r) SELECT key, value FROM r")
    for command in (["report"], ["check"], ["report", "--format", "json"]):
        one_line_error(cli(*command, crafted, timeout=60), "damaged")


def test_escape_sequences_from_a_trace_are_printed_escaped(tmp_path: Path) -> None:
    trace = tmp_path / "t.trace"
    run = cli("run", "--no-tui", "-o", trace, SCRIPTS / "bad_name.py")
    assert run.status == 1
    summary = run.stderr.split("lazyviz: ", 1)[1]
    assert "\x1b" not in summary and "\\x1b]0;pwned" in summary
    for command in (["report"], ["check", "--any-fallbacks"]):
        result = cli(*command, trace)
        assert "\x1b" not in result.stdout + result.stderr
    assert "\\x1b" in cli("report", trace).stdout


def test_cli_edge_cases_are_one_line(sample_trace, tmp_path: Path) -> None:
    trace = sample_trace("clean_mlp")
    one_line_error(cli("export", trace, "--execution", "99999999999999999999"), "execution", "--help")
    one_line_error(cli("export", trace, "--execution", "999", "--format", "ir"), "no execution 999")
    for bad in ({"format": "lazyviz-baseline", "sites": []},
                {"format": "lazyviz-baseline", "sites": {"a.py:1 mark_step": {"graphs": 3}}},
                {"format": "lazyviz-baseline", "fallbacks": "aten::sin"}, [1, 2]):
        baseline = tmp_path / "b.json"
        baseline.write_text(json.dumps(bad))
        one_line_error(cli("check", trace, "--baseline", baseline), "not a lazyviz baseline")
    usage = cli("run", "--help").stdout
    assert "SCRIPT | MODULE [ARGS ...]" in usage


# -- 17, 18: honest end-of-run facts ----------------------------------------------------------
def test_check_fails_an_unfinished_trace_and_agrees_with_report(sample_trace, tmp_path: Path) -> None:
    killed = tmp_path / "k.trace"
    cli("run", "--no-tui", "-o", killed, SCRIPTS / "killed.py")
    result = cli("check", killed)
    assert (result.status == 1 and "unfinished" in result.stdout) or "stopped early" in result.stdout
    assert cli("check", killed, "--allow-unfinished").status == 0
    missing = cli("check", sample_trace("missing_mark_step"), "--any-fallbacks")
    assert missing.status == 1 and "missing mark_step()" in missing.stdout
    assert "None steps" not in cli("check", sample_trace("clean_mlp")).stdout


@pytest.mark.parametrize("how, status, state", [
    ("256", 0, "exited 0"), ("-1", 255, "exited 255"), ("True", 1, "exited 1"),
    ("os_exit", 7, "exited 7; the trace stopped early"), ("sigterm", 143, "killed by SIGTERM"),
])
def test_the_exit_is_recorded_as_the_shell_sees_it(tmp_path: Path, how: str, status: int, state: str) -> None:
    untraced = python(SCRIPTS / "exits.py", how)
    traced = cli("run", "--no-tui", "-o", tmp_path / "t.trace", SCRIPTS / "exits.py", how)
    assert traced.status == status and os.waitstatus_to_exitcode(0) == 0
    assert untraced.status in (status, -(status - 128))
    with lazyviz.open(tmp_path / "t.trace") as trace:
        assert trace.run.state.startswith(state), trace.run.state
    assert state in traced.stderr


def test_sigkill_is_named(tmp_path: Path) -> None:
    traced = cli("run", "--no-tui", "-o", tmp_path / "k.trace", SCRIPTS / "killed.py")
    assert traced.status == 137 and "killed by SIGKILL" in traced.stderr
    assert "killed by SIGKILL" in cli("report", tmp_path / "k.trace").stdout


# -- 19, 20: start-up apart; the summary says each thing once --------------------------------
def test_start_up_is_not_tracing_time(sample_trace) -> None:
    with lazyviz.open(sample_trace("clean_mlp")) as trace:
        first = trace.execution(0)
        run = trace.run
    assert first.trace_ms == 0 and run.startup_ms is not None and run.startup_ms > 0
    assert "start-up before the first graph" in cli("report", sample_trace("clean_mlp")).stdout


def test_summary_gives_each_finding_its_headline_once(sample_trace) -> None:
    report = cli("report", sample_trace("batch_size_change")).stdout
    findings = report.split("findings:")[1]
    assert findings.count("Float[16,32] -> Float[24,32]") == 1
    assert "recompiled: input shape" in findings and "fix: pad or bucket" in findings


# -- 21: the hook build ------------------------------------------------------------------------
def test_hook_loads_without_ninja_and_builds_from_its_own_copy(tmp_path: Path) -> None:
    from lazyviz.backends.ts import HOOK_FOLDER, built_hook

    library = built_hook()
    assert library is not None
    assert all((library.parent / part.name).read_bytes() == part.read_bytes() for part in HOOK_FOLDER.iterdir())
    bare_path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                if not (Path(p) / "ninja").exists())
    env = {**os.environ, "PATH": bare_path}
    result = subprocess.run([sys.executable, "-m", "lazyviz", "run", "--no-tui", "-o", str(tmp_path / "t.trace"),
                             str(SCRIPTS / "slow_steps.py"), "1", "0"], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode == 0 and "building the execution hook" not in result.stderr, result.stderr


def test_stale_build_lock_is_named_and_cleared(tmp_path: Path) -> None:
    env = {**os.environ, "LAZYVIZ_CACHE": str(tmp_path / "cache")}
    code = "from lazyviz.backends.ts import hook_build_dir; print(hook_build_dir())"
    build_dir = Path(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                    check=True).stdout.strip())
    build_dir.mkdir(parents=True)
    (build_dir / "lock").write_text("")  # what a killed build leaves
    # An old build of another hook source, untouched for 40 days, goes once this one is built.
    old_build = build_dir.with_name("hook-torch2.13.0-py311-000000000000")
    old_build.mkdir()
    (old_build / "lazyviz-build.lock").write_text("")
    (old_build / "lazyviz_hook.so").write_bytes(b"old")
    os.utime(old_build, (time.time() - 40 * 86400,) * 2)
    result = subprocess.run([sys.executable, "-m", "lazyviz.backends.ts"], env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    # Not a terminal: a line when the build starts and one when it is done, no spinner.
    assert "lazyviz: building the execution hook" in result.stderr and "\r" not in result.stderr
    assert re.search(r"lazyviz: built the execution hook in \d+ s\n", result.stderr), result.stderr
    assert f"stale build lock left by an interrupted build: {build_dir / 'lock'}" in result.stderr
    assert f"removed an old execution hook build unused for 30 days: {old_build}" in result.stderr
    assert not old_build.exists() and (build_dir / "lazyviz-build.lock").exists()


def test_only_lazyviz_own_unused_hook_builds_are_pruned(tmp_path: Path) -> None:
    from lazyviz.backends.ts import prune_unused_builds

    def folder(name: str, days_unused: float, ours: bool = True) -> Path:
        path = tmp_path / name
        path.mkdir()
        if ours:
            (path / "lazyviz-build.lock").write_text("")
        os.utime(path, (time.time() - days_unused * 86400,) * 2)
        return path

    old, recent = folder("hook-torch2.13.0-py311-aaaaaaaaaaaa", 45), folder("hook-torch2.13.0-py311-bbbbbbbbbbbb", 3)
    current = folder("hook-torch2.13.0-py311-cccccccccccc", 90)
    not_ours = folder("hook-something-else", 90, ours=False)
    assert prune_unused_builds(tmp_path, keep=current) == [old]
    assert not old.exists() and recent.exists() and current.exists() and not_ours.exists()
