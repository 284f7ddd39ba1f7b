"""`lazyviz run`'s side of the traced process: start it, pass on the signals meant for
it, wait, and record in the trace how it ended when it could not say so itself.

Signals, as the script would get them untraced:
- Ctrl-C reaches the whole foreground group, the script included: lazyviz only
  survives it (a Python handler, which exec resets to the default in the child; an
  ignored SIGINT would be inherited and make the script uninterruptible).
- SIGTERM and SIGHUP sent to lazyviz (a scheduler's kill, a closed terminal) are passed
  on to the script (to its whole group when it has its own session, under the UI), so
  it is never left running as an orphan.
A signal that the shell had set to be ignored (nohup, `&`) stays ignored for both.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from types import FrameType
from typing import IO

from lazyviz.trace.files import finish_trace
from lazyviz.trace.reader import close_all

FORWARDED = (signal.SIGTERM, signal.SIGHUP)


def exit_status_of(returncode: int) -> int:
    """A child killed by signal N exits the way a shell reports it: 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class Supervised:
    """The traced process, with lazyviz's signal handling in place while it runs."""

    def __init__(self, command: list[str], *, own_session: bool = False, stdin: int | IO | None = None,
                 stdout: int | IO | None = None, stderr: int | IO | None = None,
                 exit_on_hangup: Path | None = None) -> None:
        """exit_on_hangup: the trace of a run whose terminal belongs to a UI. When that
        terminal closes (SIGHUP), nothing is left to restore and Textual's teardown would
        block writing to it: pass SIGHUP on, wait for the script, record how it ended in
        that trace, and exit with its status from the handler itself."""
        self.own_session = own_session
        self.exit_on_hangup = exit_on_hangup
        self.received: int | None = None  # a SIGTERM/SIGHUP passed on to the script
        self._previous: dict[int, object] = {}
        self._install()
        try:
            self.process = subprocess.Popen(command, stdin=stdin, stdout=stdout, stderr=stderr,
                                            start_new_session=own_session)
        except BaseException:
            self.restore()
            raise

    def _install(self) -> None:
        for number in (signal.SIGINT, *FORWARDED):
            current = signal.getsignal(number)
            if current == signal.SIG_IGN:
                continue  # ignored by whoever started us: the script inherits that, as untraced
            if number == signal.SIGINT:
                handler = self._survive
            elif number == signal.SIGHUP and self.exit_on_hangup is not None:
                handler = self._hang_up
            else:
                handler = self._forward
            self._previous[number] = signal.signal(number, handler)

    def _survive(self, number: int, frame: FrameType | None) -> None:
        """Ctrl-C: the script got it too, from the terminal; we wait to report."""
        if self.own_session:  # under the UI the script has no terminal: pass it on
            self._send(number)

    def _forward(self, number: int, frame: FrameType | None) -> None:
        # Only async-signal-safe work here: note it and pass it on.
        self.received = number
        self._send(number)

    def _hang_up(self, number: int, frame: FrameType | None) -> None:
        # Once: the shell passes the terminal's SIGHUP on too, so a second one may come.
        if self.received == number or self.exit_on_hangup is None:
            return
        self._forward(number, frame)
        returncode = self.reap(30)
        if returncode is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            returncode = self.reap(5)
        if returncode is None:
            returncode = -signal.SIGKILL

        close_all()  # the UI's reader: an open connection would keep -wal and -shm beside the trace
        record_ending(self.exit_on_hangup, returncode)
        os._exit(exit_status_of(returncode))

    def _send(self, number: int) -> None:
        process = getattr(self, "process", None)
        if process is None or process.poll() is not None:
            return
        try:
            if self.own_session:
                os.killpg(process.pid, number)
            else:
                os.kill(process.pid, number)
        except (ProcessLookupError, PermissionError):
            pass

    def poll(self) -> int | None:
        return self.process.poll()

    def reap(self, seconds: float) -> int | None:
        """The return code once the process ended, waiting up to seconds; for signal
        handlers: os.waitpid directly, since Popen's wait lock may be held by the very
        frame the handler interrupted."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                pid, status = os.waitpid(self.process.pid, os.WNOHANG)
                if pid:
                    return os.waitstatus_to_exitcode(status)
            except ChildProcessError:  # reaped by Popen elsewhere: it records the code
                if self.process.returncode is not None:
                    return self.process.returncode
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)

    def wait(self, timeout: float | None = None) -> int:
        return self.process.wait(timeout)

    def stop(self, grace_s: float = 5.0) -> None:
        """Ctrl-C first, so the script ends as it would by hand and closes its trace; then
        SIGKILL if it will not stop."""
        try:
            os.killpg(self.process.pid, signal.SIGINT) if self.own_session else self.process.send_signal(signal.SIGINT)
            self.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.process.pid, signal.SIGKILL) if self.own_session else self.process.kill()
            except ProcessLookupError:
                pass
        except ProcessLookupError:
            pass

    def restore(self) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)  # type: ignore[arg-type]
        self._previous.clear()


def ending_fields(returncode: int) -> dict[str, str]:
    """What the parent records when the traced process could not record its end."""
    fields = {"exit_status": json.dumps(exit_status_of(returncode)), "complete": "false"}
    if returncode < 0:
        fields["ended_by"] = json.dumps(f"killed by {signal_name(-returncode)}")
    return fields


def record_ending(trace_path: Path, returncode: int) -> str | None:
    """Write the ending into the trace unless the process did, and leave one file."""
    return finish_trace(trace_path, ending_fields(returncode))
