"""`lazyviz run` in a real terminal (tmux), as a user sees it."""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SAMPLES, SCRIPTS, default_signals

pytestmark = [pytest.mark.torch, pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (apt-get install tmux)")]


# A row of the executions table: index, step, cause, then the site (the strip and the
# details may name the same line too).
TABLE_ROW = re.compile(r"^\s*\d+\s+\d+\s+\w+\s+\S*slow_steps\.py:20\b", re.MULTILINE)


class Terminal:
    def __init__(self, command: str, cwd: Path, size: tuple[int, int] = (100, 30)) -> None:
        self.socket = f"lazyviz-test-{uuid.uuid4().hex[:8]}"
        self.tmux = ["tmux", "-L", self.socket]
        # A shell first, then the command: the program starts in a terminal of its final size.
        subprocess.run([*self.tmux, "-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", str(size[0]),
                        "-y", str(size[1]),
                        "-c", str(cwd), "bash --norc --noprofile"], check=True,
                       preexec_fn=default_signals)  # the tmux server's, which its shells inherit
        self.keys(command, "Enter")

    def screen(self, scrollback: int = 0) -> str:
        """The visible screen, with up to `scrollback` lines that scrolled off above it."""
        # -J with scrollback: lines the terminal wrapped (the shell's, not the UI's) come back whole.
        join = ["-J"] if scrollback else []
        result = subprocess.run([*self.tmux, "capture-pane", "-p", *join, "-t", "t", "-S", str(-scrollback)],
                                capture_output=True, text=True)
        return result.stdout

    def wait_for(self, condition: Callable[[str], bool], seconds: float = 90, scrollback: int = 0) -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            screen = self.screen(scrollback)
            if condition(screen):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"never saw it; the screen was:\n{self.screen()}")

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", "t", *keys], check=True)

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)


def run_slow_steps(trace: Path, steps: int, pause_s: float) -> Terminal:
    """`lazyviz run` on the slow-steps script in a fresh terminal; the shell echoes EXIT=N."""
    command = (f"{shlex.quote(sys.executable)} -m lazyviz run -o {shlex.quote(str(trace))} "
               f"{shlex.quote(str(SCRIPTS / 'slow_steps.py'))} {steps} {pause_s}; echo EXIT=$?")
    return Terminal(command, trace.parent)


def test_the_first_screen_at_80x24_names_the_problem(tmp_path: Path) -> None:
    """As a new user in an 80x24 terminal: the first screen says what is wrong and where,
    the counts line survives, every footer key fits; quitting prints the summary."""
    trace = tmp_path / "b.trace"
    command = (f"{shlex.quote(sys.executable)} -m lazyviz run -o {shlex.quote(str(trace))} "
               f"{shlex.quote(str(SAMPLES / 'batch_size_change.py'))} --steps 8; echo EXIT=$?")
    terminal = Terminal(command, tmp_path, size=(80, 24))
    try:
        # The why column of step 4's row comes with the whole analysis, a poll after the
        # quick one on a loaded machine.
        screen = terminal.wait_for(lambda s: "exited 0" in s and "step 4: shape 16->24" in s
                                   and "shape 16->24 at :28" in s)
        lines = screen.splitlines()
        assert lines[1].strip().startswith("steps 8 · executions 8") and "misses 3" in lines[1]
        assert "recompile" in lines[2] and "built at batch_size_change.py:28" in lines[2]
        assert "q Quit" in lines[-1] and "palette" in lines[-1] and "s SVG" in lines[-1]  # the footer, whole
        terminal.keys("q")
        # The summary may be longer than the screen (long paths wrap at 80 columns).
        after = terminal.wait_for(lambda s: re.search(r"^EXIT=\d+$", s, re.MULTILINE) is not None, scrollback=200)
        assert "findings:" in after and re.search(r"^EXIT=0$", after, re.MULTILINE)
        assert f"the script's output: {trace}.out" in after
    finally:
        terminal.close()


def test_live_run_shows_rows_while_the_script_runs(tmp_path: Path) -> None:
    trace = tmp_path / "live.trace"
    terminal = run_slow_steps(trace, 12, 0.6)
    try:
        running = terminal.wait_for(lambda s: "running" in s and "slow_steps.py:20" in s)
        rows_while_running = len(TABLE_ROW.findall(running))
        finished = terminal.wait_for(lambda s: "exited 0" in s)
        # All 12 arrived (the header counts them); the table may since have moved to the
        # run's worst finding, so which rows are on screen is not asked.
        assert "executions 12" in finished and TABLE_ROW.findall(finished) and rows_while_running < 12
        terminal.keys("8")  # the Output tab: the script's own prints, not over the UI
        terminal.wait_for(lambda s: "step 11" in s)
        terminal.keys("q")
        after = terminal.wait_for(lambda s: re.search(r"^EXIT=\d+$", s, re.MULTILINE) is not None)
        assert re.search(r"^EXIT=0$", after, re.MULTILINE)
        output = Path(f"{trace}.out").read_text()  # the script's own output, whole
        assert "step 0\n" in output and output.endswith("step 11\n")
    finally:
        terminal.close()


@pytest.mark.parametrize("key", ["q", "C-c"])
def test_quitting_stops_the_script_and_keeps_the_trace(tmp_path: Path, key: str) -> None:
    trace = tmp_path / "stopped.trace"
    terminal = run_slow_steps(trace, 200, 0.2)
    try:
        terminal.wait_for(lambda s: s.count("slow_steps.py:20") >= 3 and "running" in s)
        terminal.keys(key)  # Ctrl-C in the UI stops the script as it would untraced
        if key == "q":  # q asks first: the script is still running
            terminal.wait_for(lambda s: "The script is still running" in s)
            terminal.keys("y")
        after = terminal.wait_for(lambda s: re.search(r"^EXIT=\d+$", s, re.MULTILINE) is not None)
        assert "stopped the script" in after and re.search(r"^EXIT=130$", after, re.MULTILINE)
        import lazyviz

        with lazyviz.open(trace) as opened:
            assert opened.count() >= 3 and opened.run.finished
            assert opened.run.error.startswith("KeyboardInterrupt")
    finally:
        terminal.close()


def test_leaving_the_ui_lets_the_script_finish_traced(tmp_path: Path) -> None:
    """q, then d: the UI goes, the script runs on to its end, traced, and the summary
    comes when it ends."""
    trace = tmp_path / "detached.trace"
    terminal = run_slow_steps(trace, 12, 0.3)
    try:
        terminal.wait_for(lambda s: "slow_steps.py:20" in s and "running" in s)
        terminal.keys("q")
        terminal.wait_for(lambda s: "The script is still running" in s)
        terminal.keys("d")
        terminal.wait_for(lambda s: "the script goes on, traced" in s)
        after = terminal.wait_for(lambda s: re.search(r"^EXIT=\d+$", s, re.MULTILINE) is not None, scrollback=200)
        assert re.search(r"^EXIT=0$", after, re.MULTILINE) and "stopped the script" not in after
        assert re.search(r"12 graph\s+executions in\s+12 steps", after)  # the summary may wrap
        import lazyviz

        with lazyviz.open(trace) as opened:
            assert opened.count() == 12 and opened.run.exit_status == 0
    finally:
        terminal.close()


def test_closing_the_terminal_ends_the_script_too(tmp_path: Path) -> None:
    """SIGHUP to lazyviz (the terminal closed under the UI) reaches the script, which
    runs in its own session: nothing is left running, and the trace says how it ended."""
    trace, pid_file = tmp_path / "hup.trace", tmp_path / "pid"
    command = (f"{shlex.quote(sys.executable)} -m lazyviz run -o {shlex.quote(str(trace))} "
               f"{shlex.quote(str(SCRIPTS / 'runs_until_stopped.py'))} {shlex.quote(str(pid_file))}")
    terminal = Terminal(command, tmp_path)
    try:
        # The header counts committed executions: once it shows one, the trace holds it.
        terminal.wait_for(lambda s: re.search(r"executions [1-9]", s) is not None and pid_file.exists())
        script_pid = int(pid_file.read_text())
    finally:
        terminal.close()  # the terminal goes away: SIGHUP to what runs in it
    def left_running() -> list[str]:  # the script, or lazyviz itself (named by the trace path)
        found = [f"script {script_pid}"] if Path(f"/proc/{script_pid}").exists() else []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if str(trace).encode() in (proc / "cmdline").read_bytes():
                    found.append(f"lazyviz {proc.name}")
            except OSError:
                pass
        return found

    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and left_running():
        time.sleep(0.2)
    assert not left_running(), "left running after the terminal closed"
    import lazyviz

    with lazyviz.open(trace) as opened:
        assert opened.count() >= 1 and opened.run.ended_by == "killed by SIGHUP"


def test_closing_the_terminal_on_a_finished_run_leaves_one_file(tmp_path: Path) -> None:
    # The UI's own reader kept -wal and -shm beside the trace when the terminal closed
    # (SIGHUP ends lazyviz without its normal teardown).
    trace = tmp_path / "u.trace"
    command = (f"{shlex.quote(sys.executable)} -m lazyviz run -o {shlex.quote(str(trace))} "
               f"{shlex.quote(str(SAMPLES / 'item_in_loop.py'))} --steps 2")
    terminal = Terminal(command, tmp_path)
    try:
        terminal.wait_for(lambda s: "exited 0" in s)
    finally:
        terminal.close()
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and any(Path(f"{trace}{end}").exists() for end in ("-wal", "-shm")):
        time.sleep(0.2)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("u.trace")) == ["u.trace", "u.trace.out"]
