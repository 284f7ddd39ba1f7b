"""`lazyviz run`: the script runs in a child process under the tracer; this side
claims the trace, supervises the child (lazyviz.record.supervisor), and shows the live UI or
prints the summary."""
from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
from pathlib import Path

from lazyviz.analysis.run import Run
from lazyviz.backends import backends, detect_backend, prepare_backend
from lazyviz.commands.base import CliError, add_force, regular_file, say, step_count
from lazyviz.export.report import text_report
from lazyviz.record.imports import imported_modules
from lazyviz.record.supervisor import Supervised, exit_status_of, record_ending
from lazyviz.trace import TraceError
from lazyviz.trace import open as open_trace
from lazyviz.trace.files import (
    claim_trace_path,
    default_rank_folder,
    default_trace_path,
    held_apart,
    launch_folder,
    output_path,
    rank_trace,
)


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


class RunCommand:
    """Run a script on a lazy backend under the tracer."""

    name = "run"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.usage = ("%(prog)s [-h] [-o TRACE] [-f] [--no-tui] [--backend {ts,xla}] [--capture {full,light}]\n"
                        "       [--no-source-lines] [--steps N] [--iterations N] [-m] SCRIPT | MODULE [ARGS ...]")
        parser.add_argument("-o", "--output", metavar="TRACE",
                            help="trace file to write (default: lazyviz-<script>.<pid>.trace; "
                                 "under torchrun a folder of rank<R>.trace)")
        add_force(parser, "the -o trace (only ever a lazyviz trace that no run is writing)")
        parser.add_argument("--no-tui", action="store_true", help="no live UI: print a summary at the end")
        parser.add_argument(
            # Not argparse's choices: those would read every installed package's entry points
            # (50 ms) for every lazyviz command.
            "--backend", metavar="NAME",
            help="lazy backend: ts (torch's TorchScript backend), xla (PyTorch/XLA), or one an installed "
                 "package registers (a torch_xla fork's); "
                 "default: picked from the script's imports (torch._lazy: ts, torch_xla: xla), else xla where "
                 "PJRT_DEVICE is set and torch_xla is installed (a library imports it), else ts",
        )
        parser.add_argument(
            "--capture", choices=("full", "light"), default="full",
            help="full: IR, stacks and counters per execution; light: sites, timings, counters and backend text",
        )
        parser.add_argument("--no-source-lines", dest="source_lines", action="store_false",
                            help="with --capture full, do not tag IR nodes with the line of the script that "
                                 "built them (saves about 0.5-1 us per node)")
        parser.add_argument("--steps", type=step_count, metavar="N",
                            help="end the script cleanly (exit status 0) once N steps have ended: trace the "
                                 "first N steps of a long job")
        parser.add_argument("--iterations", type=step_count, metavar="N",
                            help="end the script cleanly (exit status 0) once its optimizers have stepped N times: "
                                 "the bound for a loop without mark_step()")
        parser.add_argument("-m", dest="module", action="store_true", help="run a module, as python -m does")
        parser.add_argument("target", metavar="SCRIPT | MODULE", nargs="?",
                            help="the script (or, with -m, the module) to run")
        parser.add_argument("args", nargs=argparse.REMAINDER, metavar="[ARGS ...]", help="the script's own arguments")

    def run(self, options: argparse.Namespace) -> int:
        if options.target is None:
            raise CliError("run: give the script to run (or -m MODULE)")
        if not options.module:
            self._check_script(options.target)
        if options.backend is None:
            options.backend = detect_backend(imported_modules(options.target, options.module))
        elif options.backend not in backends():
            raise CliError(f"run: unknown backend {options.backend!r} (known: {', '.join(backends())})")
        trace_path = self._trace_path(options)
        self._check_space(trace_path.parent)
        claim = claim_trace_path(trace_path, options.force)
        started = False
        try:
            prepare_backend(options.backend)
            command = [sys.executable, "-m", "lazyviz.record.child", "--trace", str(trace_path),
                       "--capture", options.capture, "--backend", options.backend]
            if options.module:
                command.append("--module")
            if not options.source_lines:
                command.append("--no-source-lines")
            if options.steps is not None:
                command += ["--steps", str(options.steps)]
            if options.iterations is not None:
                command += ["--iterations", str(options.iterations)]
            command += ["--", options.target, *options.args]
            started = True
            if under_torchrun() and os.environ["RANK"] != "0":
                # Under torchrun, rank 0 talks to the terminal; the others write beside their traces.
                with open(output_path(trace_path), "xb") as output:
                    return self._finish(trace_path, self._run_plain(command, trace_path, output), quiet=True)
            if options.no_tui or not (sys.stdout.isatty() and sys.stdin.isatty()):
                return self._finish(trace_path, self._run_plain(command, trace_path))
            return self._run_with_ui(command, trace_path)
        finally:
            if not started:
                trace_path.unlink(missing_ok=True)  # the empty file we made; nothing ran
            claim.release()

    @staticmethod
    def _trace_path(options: argparse.Namespace) -> Path:
        if options.output is not None:
            if options.output == "":
                raise CliError("-o needs a path (leave -o out for the default name)")
            if options.output == "-":
                raise CliError("a trace cannot go to standard output (-o -): name a file")
            if os.path.islink(options.output.rstrip(os.sep) or os.sep):
                raise CliError(f"{options.output} is a symbolic link: -o writes a new file, never through a link")
        if under_torchrun():
            # One trace per rank, always in a folder: ranks never share a file.
            folder = Path(options.output or default_rank_folder(options.target)).resolve()
            if folder.exists() and not folder.is_dir():
                raise CliError(f"under torchrun -o names a folder of rank traces, and {folder} is a file")
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise CliError(f"cannot create {folder}: {error.strerror}") from None
            return rank_trace(folder, os.environ["RANK"])
        trace_path = Path(options.output or default_trace_path(options.target)).resolve()
        if options.output and (trace_path.is_dir() or options.output.endswith(os.sep)):
            trace_path.mkdir(parents=True, exist_ok=True)
            trace_path = rank_trace(trace_path, 0)
        if not trace_path.parent.is_dir():
            raise CliError(f"cannot write {trace_path}: no such directory {trace_path.parent}")
        return trace_path

    @staticmethod
    def _check_space(folder: Path, minimum: int = 1 << 20) -> None:
        try:
            stats = os.statvfs(folder)
        except OSError:
            return
        if stats.f_bavail * stats.f_frsize < minimum:
            raise CliError(f"no space left in {folder} for the trace")

    def _run_with_ui(self, command: list[str], trace_path: Path) -> int:
        """The script runs in its own session with its output going to a file beside the
        trace (shown in the Output tab), so nothing it prints lands over the UI."""
        from lazyviz.tui.app import build_app  # Textual loads only for the UI, not for --no-tui or --help

        output = output_path(trace_path)
        with open(output, "xb") as output_file:
            child = Supervised(command, own_session=True, stdin=subprocess.DEVNULL, stdout=output_file,
                               stderr=subprocess.STDOUT, exit_on_hangup=trace_path)
        # SIGTERM reaches the script through the supervisor; the UI notices (child.received)
        # on its own timer and closes, restoring the terminal. A signal handler must not
        # call into Textual: it may be in the middle of the very call it would re-enter.
        try:
            app = build_app(trace_path, child.process, output, close_when=lambda: child.received is not None)
            if app.run() == "detach" and child.poll() is None:  # `q`, then "let it finish"
                say(f"lazyviz: the script goes on, traced; its output goes to {output}. The summary comes "
                    "when it ends; Ctrl-C stops it.")
                child.wait()
        finally:
            if child.poll() is None and (_run_finished(trace_path) or child.received is not None):
                _wait_quietly(child)  # done, or told to end: let it tear down by itself
            stopped = child.poll() is None
            if stopped:
                child.stop()
            returncode = child.wait()
            # Our handlers stay until the ending is recorded: the terminal's SIGHUP may come
            # after the UI saw it close, and would otherwise kill us before we record it.
            # Then they go, so Ctrl-C during the summary is the user's again.
            try:
                record_ending(trace_path, returncode)
            finally:
                child.restore()
        say(_script_traceback(trace_path))  # its stderr went to the Output tab
        status = self._finish(trace_path, returncode)  # the same summary as --no-tui
        if stopped:
            say(f"lazyviz: stopped the script when the UI quit (status {status}); "
                 f"the trace keeps what it recorded: {trace_path}")
        say(f"  the script's output: {output}")
        return status

    @staticmethod
    def _check_script(script: str) -> None:
        path = regular_file(script, "file")
        try:
            ast.parse(path.read_bytes(), filename=script)
        except SyntaxError as error:
            where = f"{script}:{error.lineno}" if error.lineno else script
            raise CliError(f"{where}: {error.msg}") from None
        except (OSError, ValueError) as error:
            raise CliError(f"can't read {script!r}: {error}") from None

    @staticmethod
    def _run_plain(command: list[str], trace_path: Path, output: object = None) -> int:
        """The script shares our terminal and process group: Ctrl-C reaches it directly.
        Records how it ended (before our handlers go, as with the UI) and returns its raw
        return code (negative: killed by that signal)."""
        child = Supervised(command, stdout=output, stderr=output)
        try:
            returncode = child.wait()
            record_ending(trace_path, returncode)
            return returncode
        finally:
            child.restore()

    @staticmethod
    def _finish(trace_path: Path, returncode: int, quiet: bool = False) -> int:
        """The summary of a run whose ending is recorded; its exit status."""
        status = exit_status_of(returncode)
        if not quiet:
            text = _summary_text(trace_path, status)
            if text:
                say(text, report=True)
            say(_launched_text(trace_path), report=True)
            say(held_apart(trace_path) or "")  # the last checkpoint had no room
        return status


def _summary_text(trace_path: Path, status: int) -> str:
    """The end-of-run summary, or one line when there is nothing to summarise."""
    if not trace_path.exists():
        return ""  # the tracer never started; it said why
    try:
        with open_trace(trace_path) as trace:
            recorded = Run(trace)
            run, executions = recorded.info, recorded.executions
            if not run.argv:
                return ""
            # A script that raised gets its report (the crash's finding) whatever ran before.
            if not executions and not run.fallbacks_after_last_execution and not run.device_used and not run.error:
                if any(launch_folder(trace_path).glob("rank*.trace")):
                    return ""  # the launched processes ran the graphs: their summary says it (_launched_text)
                return (f"lazyviz: {run.script} ran no lazy-tensor graph (nothing on device '{run.device}'), "
                        f"{run.state}; trace: {trace_path}" + "".join(f"\n  note: {note}" for note in run.notes))
            return text_report(recorded)
    except TraceError as error:
        return f"lazyviz: cannot read the trace: {error}"


def _launched_text(trace_path: Path) -> str:
    """The summary of the first process a launcher (torch_xla.launch) started, as
    torchrun's rank 0 prints its own, with where the others are."""
    folder = launch_folder(trace_path)
    traces = sorted(folder.glob("rank*.trace"), key=lambda path: (len(path.name), path.name))
    if not traces:
        return ""
    try:
        with open_trace(traces[0]) as trace:
            text = text_report(Run(trace))
    except TraceError as error:
        text = f"lazyviz: cannot read {traces[0]}: {error}"
    return (f"lazyviz: torch_xla.launch's processes: {len(traces)} trace(s) in {folder} (lazyviz report "
            f"{folder}, lazyviz view {folder}); {traces[0].stem}:\n{text}")


def _script_traceback(trace_path: Path) -> str:
    try:
        with open_trace(trace_path) as trace:
            return trace.run.traceback or ""
    except TraceError:
        return ""


def _run_finished(trace_path: Path) -> bool:
    try:
        with open_trace(trace_path) as trace:
            return trace.run.finished
    except TraceError:
        return False


def _wait_quietly(child, grace_s: float = 30.0) -> None:
    try:
        child.wait(grace_s)
    except subprocess.TimeoutExpired:
        pass


