"""The `lazyviz` command. Heavy imports (torch, textual) happen inside the subcommand
that needs them, so `lazyviz --help` and `lazyviz report` stay fast."""
from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

from lazyviz import __version__


class CliError(Exception):
    """A problem the user can fix: one line on stderr, then this exit status."""

    def __init__(self, message: str, exit_status: int = 2) -> None:
        super().__init__(message)
        self.exit_status = exit_status


def _open_trace(path: str):  # -> Trace, imported lazily
    from lazyviz.trace import TraceError, open as open_trace

    try:
        return open_trace(path)
    except TraceError as error:
        raise CliError(str(error)) from None


def _write_output(text: str, options: argparse.Namespace, output: str | None = None,
                  inputs: tuple[str, ...] = (), for_people: bool = True) -> None:
    from lazyviz._output import OutputRefused, write_output

    try:
        write_output(text, output, force=getattr(options, "force", False), inputs=inputs, for_people=for_people)
    except OutputRefused as error:
        raise CliError(str(error)) from None


def _say(text: str) -> None:
    """A line for the user on stderr; the terminal may be gone (SIGHUP), which is fine."""
    from lazyviz._output import printable

    try:
        sys.stderr.write(printable(text) + ("" if text.endswith("\n") else "\n"))
        sys.stderr.flush()
    except OSError:
        pass


def _execution_index(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an execution index: {text!r}") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"no execution {text}: indexes start at 0")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {text!r}") from None
    if not 0 <= value < 2**31:
        raise argparse.ArgumentTypeError(f"{text} is out of range")
    return value


def _add_force(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("-f", "--force", action="store_true", help=f"replace {what} if it exists")


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


class RunCommand:
    """Run a script on a lazy backend under the tracer."""

    name = "run"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.usage = ("%(prog)s [-h] [-o TRACE] [-f] [--no-tui] [--backend {ts,xla}] [--capture {full,light}]\n"
                        "       [-m] SCRIPT | MODULE [ARGS ...]")
        parser.add_argument("-o", "--output", metavar="TRACE",
                            help="trace file to write (default: lazyviz-<script>.<pid>.trace; "
                                                   "under torchrun a folder of rank<R>.trace)")
        _add_force(parser, "the -o trace (only ever a lazyviz trace that no run is writing)")
        parser.add_argument("--no-tui", action="store_true", help="no live UI: print a summary at the end")
        parser.add_argument(
            "--backend", choices=("ts", "xla"),
            help="lazy backend: ts (torch's TorchScript backend) or xla (PyTorch/XLA); "
                 "default: xla when the script imports torch_xla, else ts",
        )
        parser.add_argument(
            "--capture", choices=("full", "light"), default="full",
            help="full: IR, stacks and counters per execution; light: sites, timings, counters and backend text",
        )
        parser.add_argument("-m", dest="module", action="store_true", help="run a module, as python -m does")
        parser.add_argument("target", metavar="SCRIPT | MODULE", nargs="?",
                            help="the script (or, with -m, the module) to run")
        parser.add_argument("args", nargs=argparse.REMAINDER, metavar="[ARGS ...]", help="the script's own arguments")

    def run(self, options: argparse.Namespace) -> int:
        from lazyviz._source import top_level_imports
        from lazyviz.trace.files import TracePathError, claim_trace_path

        if options.target is None:
            raise CliError("run: give the script to run (or -m MODULE)")
        if not options.module:
            self._check_script(options.target)
        if options.backend is None:
            imported = top_level_imports(options.target, options.module) or set()
            options.backend = "xla" if "torch_xla" in imported else "ts"
        trace_path = self._trace_path(options)
        self._check_space(trace_path.parent)
        try:
            claim = claim_trace_path(trace_path, options.force)
        except TracePathError as error:
            raise CliError(str(error)) from None
        started = False
        try:
            self._ensure_hook(options.backend)
            command = [sys.executable, "-m", "lazyviz._child", "--trace", str(trace_path),
                       "--capture", options.capture, "--backend", options.backend]
            if options.module:
                command.append("--module")
            command += ["--", options.target, *options.args]
            started = True
            if under_torchrun() and os.environ["RANK"] != "0":
                # Under torchrun, rank 0 talks to the terminal; the others write beside their traces.
                with open(f"{trace_path}.out", "xb") as output:
                    return self._finish(trace_path, self._run_plain(command, output), quiet=True)
            if options.no_tui or not (sys.stdout.isatty() and sys.stdin.isatty()):
                return self._finish(trace_path, self._run_plain(command))
            return self._run_with_ui(command, trace_path)
        finally:
            if not started:
                trace_path.unlink(missing_ok=True)  # the empty file we made; nothing ran
            claim.release()

    @staticmethod
    def _trace_path(options: argparse.Namespace) -> Path:
        from lazyviz.tracer import default_trace_path

        if under_torchrun():
            # One trace per rank, always in a folder: ranks never share a file.
            folder = Path(options.output or _default_rank_folder(options.target)).resolve()
            if folder.exists() and not folder.is_dir():
                raise CliError(f"under torchrun -o names a folder of rank traces, and {folder} is a file")
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise CliError(f"cannot create {folder}: {error.strerror}") from None
            return folder / f"rank{os.environ['RANK']}.trace"
        trace_path = Path(options.output or default_trace_path(options.target)).resolve()
        if options.output and (trace_path.is_dir() or options.output.endswith(os.sep)):
            trace_path.mkdir(parents=True, exist_ok=True)
            trace_path = trace_path / "rank0.trace"
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
        from lazyviz._supervisor import Supervised, exit_status_of
        from tui.app import build_app

        output_path = Path(f"{trace_path}.out")
        app = None

        def terminal_gone(number: int) -> None:  # SIGHUP/SIGTERM: the script got it; close
            if app is not None:
                app.exit()

        with open(output_path, "xb") as output:
            child = Supervised(command, own_session=True, stdin=subprocess.DEVNULL, stdout=output,
                               stderr=subprocess.STDOUT, on_signal=terminal_gone)
        try:
            app = build_app(trace_path, child.process, output_path)
            app.run()
        finally:
            if child.poll() is None and (_run_finished(trace_path) or child.received is not None):
                _wait_quietly(child)  # done, or told to end: let it tear down by itself
            stopped = child.poll() is None
            if stopped:
                child.stop()
            returncode = child.wait()
            child.restore()
        status = exit_status_of(returncode)
        self._finish(trace_path, returncode, quiet=True)
        if stopped:
            _say(f"lazyviz: stopped the script when the UI quit (status {status}); "
                 f"the trace keeps what it recorded: {trace_path}")
        else:
            _say(_summary_text(trace_path, status) or f"lazyviz: script exited {status}; trace: {trace_path}")
        _say(f"  output: {output_path}")
        return status

    @staticmethod
    def _check_script(script: str) -> None:
        path = Path(script)
        if not path.is_file():
            raise CliError(f"can't open file {script!r}: no such file")
        try:
            ast.parse(path.read_bytes(), filename=script)
        except SyntaxError as error:
            raise CliError(f"{script}:{error.lineno}: {error.msg}") from None
        except (OSError, ValueError) as error:
            raise CliError(f"can't read {script!r}: {error}") from None

    @staticmethod
    def _ensure_hook(backend: str) -> None:
        if backend != "ts":
            return
        from lazyviz.backends import BackendError
        from lazyviz.backends.ts import hook_build_dir, hook_is_built, load_hook

        if hook_is_built():
            return
        _say(f"lazyviz: building the execution hook for this torch (once, about a minute) in {hook_build_dir()}")
        try:
            load_hook()
        except BackendError as error:
            raise CliError(str(error), 130 if "interrupted" in str(error) else 2) from None
        except KeyboardInterrupt:
            raise CliError("interrupted while building the execution hook; it is built on the next run", 130) \
                from None

    @staticmethod
    def _run_plain(command: list[str], output: object = None) -> int:
        """The script shares our terminal and process group: Ctrl-C reaches it directly.
        Returns its raw return code (negative: killed by that signal)."""
        from lazyviz._supervisor import Supervised

        child = Supervised(command, stdout=output, stderr=output)
        try:
            return child.wait()
        finally:
            child.restore()

    @staticmethod
    def _finish(trace_path: Path, returncode: int, quiet: bool = False) -> int:
        from lazyviz._supervisor import exit_status_of, record_ending

        record_ending(trace_path, returncode)
        status = exit_status_of(returncode)
        if not quiet:
            text = _summary_text(trace_path, status)
            if text:
                _say(text)
        return status


def _summary_text(trace_path: Path, status: int) -> str:
    """The end-of-run summary, or one line when there is nothing to summarise."""
    from lazyviz.export.report import text_report
    from lazyviz.trace import TraceError, open as open_trace

    if not trace_path.exists():
        return ""  # the tracer never started; it said why
    try:
        with open_trace(trace_path) as trace:
            run, executions, ir_texts = trace.run, trace.executions(), trace.ir_texts()
    except TraceError as error:
        return f"lazyviz: cannot read the trace: {error}"
    if not run.argv:
        return ""
    if not executions:
        return (f"lazyviz: {run.script} ran no lazy-tensor graph (nothing on device '{run.device}'), "
                f"{run.state}; trace: {trace_path}")
    return text_report(run, executions, ir_texts, trace_path)


def _default_rank_folder(target: str) -> Path:
    """One folder shared by the ranks of one torchrun job (they have different pids)."""
    stem = Path(target).stem if target.endswith(".py") else target.rsplit(".", 1)[-1]
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    job = run_id if run_id and run_id != "none" and run_id.replace("-", "").isalnum() else str(os.getppid())
    return Path.cwd() / f"lazyviz-{stem}.{job}"


def _run_finished(trace_path: Path) -> bool:
    from lazyviz.trace import TraceError, open as open_trace

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


class ViewCommand:
    """Open the UI on a saved trace, or on one still being written."""

    name = "view"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("trace", metavar="TRACE")

    def run(self, options: argparse.Namespace) -> int:
        from lazyviz.trace import TraceError

        path, ranks = Path(options.trace), None
        if path.is_dir():  # a multi-process run: rank 0 first, [ and ] switch
            ranks = {rank: trace.path for rank, trace in _open_ranks(options.trace).items()}
            path = next(iter(ranks.values()))
        trace = _open_trace(str(path))
        try:  # one clear line now for damage the UI would meet in its first screen
            trace.run, trace.executions(0, 2000), trace.ir_texts()
        except TraceError as error:
            raise CliError(str(error)) from None
        finally:
            trace.close()
        from tui.app import build_app

        build_app(path, ranks=ranks).run()
        return 0


class ReportCommand:
    """Print what a trace shows: the summary, or the versioned JSON report."""

    name = "report"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("trace", metavar="TRACE")
        parser.add_argument("--format", choices=("text", "json", "html"), default=None,
                            help="default: from -o's extension (.json, .html), else text")
        parser.add_argument("-o", "--output", help="write to this file instead of standard output")
        _add_force(parser, "the -o file (never a trace)")

    def run(self, options: argparse.Namespace) -> int:
        from lazyviz.export.report import json_report, text_report
        from lazyviz.trace import TraceError

        suffix = Path(options.output or "").suffix.lower()
        options.format = options.format or {".json": "json", ".html": "html", ".htm": "html"}.get(suffix, "text")
        if Path(options.trace).is_dir():
            return self._ranks(options)
        trace = _open_trace(options.trace)
        try:
            run, executions = trace.run, trace.executions()
            if options.format == "html":
                from lazyviz.export.html import html_report

                text = html_report(run, executions, trace.graphs())
            elif options.format == "json":
                text = json.dumps(json_report(run, executions, trace.ir_texts()), indent=1) + "\n"
            else:
                text = text_report(run, executions, trace.ir_texts(), trace.path)
        except TraceError as error:
            raise CliError(str(error)) from None
        _write_output(text, options, options.output, inputs=(options.trace,), for_people=options.format == "text")
        return 0

    @staticmethod
    def _ranks(options: argparse.Namespace) -> int:
        from lazyviz.analysis.ranks import find_divergence
        from lazyviz.export.report import REPORT_FORMAT, REPORT_VERSION, json_report, text_report
        from lazyviz.trace import TraceError

        if options.format == "html":
            raise CliError("--format html reports one trace: give one rank's file (e.g. "
                           f"{Path(options.trace) / 'rank0.trace'})")
        traces = _open_ranks(options.trace)
        try:
            executions = {rank: trace.executions() for rank, trace in traces.items()}
            ir_texts = {rank: trace.ir_texts() for rank, trace in traces.items()}
            runs = {rank: trace.run for rank, trace in traces.items()}
        except TraceError as error:
            raise CliError(str(error)) from None
        divergence = find_divergence(executions, ir_texts)
        inputs = tuple(str(t.path) for t in traces.values())
        if options.format == "json":
            report = {
                "format": REPORT_FORMAT, "version": REPORT_VERSION,
                "ranks": [{"rank": rank, "trace": str(trace.path),
                           "report": json_report(runs[rank], executions[rank], ir_texts[rank])}
                          for rank, trace in traces.items()],
                "divergence": [] if divergence is None else [{
                    "kind": "divergence", "severity": "error", "step": divergence.step,
                    "message": divergence.message(),
                    "ranks": [{"ranks": ranks, "graphs": list(seq)} for seq, ranks in divergence.groups.items()],
                    "graphs": {str(rank): graph for rank, graph in divergence.graphs.items()},
                    "site": divergence.frame.to_json() if divergence.frame else None,
                    "change": divergence.change, "divergent_steps": divergence.divergent_steps,
                }],
            }
            _write_output(json.dumps(report, indent=1) + "\n", options, options.output, inputs, for_people=False)
            return 0
        parts = [f"lazyviz: {len(traces)} ranks in {options.trace}"]
        if divergence is not None:
            where = f" at {divergence.frame.site}" if divergence.frame else ""
            parts.append(f"  error: {divergence.message()}{where}")
        else:
            parts.append("  ranks ran the same graphs at every common step")
        for rank, trace in traces.items():
            parts.append(f"\n[rank {rank}] " + text_report(runs[rank], executions[rank], ir_texts[rank], trace.path))
        _write_output("\n".join(parts) + "\n", options, options.output, inputs)
        return 0


def _open_ranks(folder: str):
    from lazyviz.trace import TraceError, open_ranks

    try:
        return open_ranks(folder)
    except TraceError as error:
        raise CliError(str(error)) from None


class ExportCommand:
    """Write one execution's graph: SVG or DOT drawing, IR text or backend code."""

    name = "export"
    FORMATS = {".svg": "svg", ".dot": "dot", ".gv": "dot", ".ir": "ir", ".ts": "backend", ".json": "chrome"}

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("trace", metavar="TRACE")
        parser.add_argument("--execution", type=_execution_index, metavar="N",
                            help="execution index (all formats but chrome)")
        parser.add_argument("--format", choices=("svg", "dot", "ir", "backend", "chrome"),
                            help="default: from -o's extension, else svg; chrome: a timeline for Perfetto")
        parser.add_argument("-o", "--output", help="file to write (default: standard output)")
        _add_force(parser, "the -o file (never a trace)")
        parser.add_argument("--diff", action="store_true",
                            help="highlight the nodes that changed since the closest earlier graph")
        parser.add_argument("--around", metavar="NODE", help="draw only the neighbourhood of this node (e.g. %%12)")
        parser.add_argument("--depth", type=_count, default=2, help="edges around --around (default 2)")
        parser.add_argument("--max-nodes", type=_count, default=300,
                            help="collapse larger graphs down to about this many boxes (default 300)")

    def run(self, options: argparse.Namespace) -> int:
        from lazyviz.trace import TraceError

        trace = _open_trace(options.trace)
        try:
            return self._export(trace, options)
        except TraceError as error:
            raise CliError(str(error)) from None

    def _export(self, trace, options: argparse.Namespace) -> int:
        from lazyviz._output import check_output_path, OutputRefused

        inputs = (options.trace,)
        fmt = options.format or self.FORMATS.get(Path(options.output or "").suffix.lower(), "svg")
        if options.output:  # refuse a bad -o before the work, not after it
            try:
                check_output_path(options.output, options.force, inputs)
            except OutputRefused as error:
                raise CliError(str(error)) from None
        if fmt == "chrome":
            from lazyviz.export.chrome import chrome_trace

            _write_output(json.dumps(chrome_trace(trace.run, trace.executions())) + "\n", options, options.output,
                          inputs, for_people=False)
            return 0
        if options.execution is None:
            raise CliError(f"--format {fmt} draws one execution: give --execution N")
        execution = trace.execution(options.execution)
        graph = trace.graph(execution.graph)
        if graph is None:
            raise CliError(f"graph {execution.graph} of execution {execution.index} is not in the trace")
        if fmt == "backend":
            _write_output(graph.backend_text, options, options.output, inputs, for_people=False)
            return 0
        if not graph.ir_text:
            raise CliError(f"{options.trace} has no IR text (recorded with --capture light)")
        if fmt == "ir":
            _write_output(graph.ir_text, options, options.output, inputs, for_people=False)
            return 0
        _write_output(self._drawing(trace, execution, graph.ir_text, fmt, options), options, options.output,
                      inputs, for_people=False)
        return 0

    @staticmethod
    def _drawing(trace, execution, ir_text: str, fmt: str, options: argparse.Namespace) -> str:
        from lazyviz.analysis.ir import IRParseError, parse_ir
        from lazyviz.analysis.recompiles import explain_execution
        from lazyviz.export.graphviz import ExportError, neighbourhood, render_svg, to_dot

        try:
            ir = parse_ir(ir_text)
        except IRParseError as error:
            raise CliError(f"cannot read the IR of graph {execution.graph}: {error}") from None
        title = (f"execution {execution.index}, step {execution.step}: {execution.detail or execution.cause} "
                 f"at {execution.site}\ngraph {execution.graph}, {execution.nodes} nodes, cache {execution.cache}")
        if execution.fallback_ops:
            title += "\nfallbacks: " + ", ".join(execution.fallback_ops)
        highlight: set[str] = set()
        if options.diff:
            explained = explain_execution(trace.executions(), trace.ir_texts(), execution.index)
            if explained is not None and explained.diff is not None:
                highlight = explained.diff.changed_nodes
                title += (f"\nred: {len(highlight)} nodes changed since execution "
                          f"{explained.closest_execution} ({explained.headline()})")
            else:
                title += "\n(no earlier graph to compare with)"
        try:
            keep = neighbourhood(ir, options.around, options.depth) if options.around else None
            dot_text = to_dot(ir, title, highlight, keep, options.max_nodes)
            return render_svg(dot_text) if fmt == "svg" else dot_text
        except ExportError as error:
            raise CliError(str(error)) from None


class CheckCommand:
    """Exit 1 with one line per breach when a run breaks its budget or its baseline."""

    name = "check"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("trace", metavar="TRACE")
        parser.add_argument("--warmup-steps", type=_count, default=2, help="steps that may compile (default 2)")
        parser.add_argument("--max-misses-after", type=_count, metavar="N",
                            help="cache misses allowed after warm-up (default 0)")
        parser.add_argument("--max-executions-per-step", type=_count, metavar="K",
                            help="executions allowed per step after warm-up (default 1)")
        fallbacks = parser.add_mutually_exclusive_group()
        fallbacks.add_argument("--no-fallbacks", action="store_true", help="no op may fall back (the default)")
        fallbacks.add_argument("--allow-fallback", action="append", metavar="OP", default=[],
                               help="this op may fall back (repeat for more; e.g. aten::lerp.Scalar)")
        fallbacks.add_argument("--any-fallbacks", action="store_true", help="do not check fallbacks")
        parser.add_argument("--allow-unfinished", action="store_true",
                            help="check what a trace holds even if its run was killed or its recording stopped")
        parser.add_argument("--baseline", metavar="FILE", help="also fail on graphs, syncs or fallbacks it lacks")
        parser.add_argument("--write-baseline", metavar="FILE", help="record this run's graph set and exit 0")
        _add_force(parser, "the --write-baseline file")
        parser.add_argument("--same-graphs-across-ranks", action="store_true",
                            help="with a folder of rank traces: fail when ranks ran different graphs")

    def run(self, options: argparse.Namespace) -> int:
        from lazyviz.trace import TraceError

        try:
            if Path(options.trace).is_dir():
                return self._ranks(options)
            return self._check(options)
        except TraceError as error:
            raise CliError(str(error)) from None

    def _check(self, options: argparse.Namespace) -> int:
        from lazyviz.analysis.budget import Budget, baseline_of, check_baseline, check_budget
        from lazyviz.analysis.recompiles import explain_recompiles
        from lazyviz.analysis.summary import summarize

        if options.same_graphs_across_ranks:
            raise CliError("--same-graphs-across-ranks needs the folder of rank traces (lazyviz run -o DIR/)")
        trace = _open_trace(options.trace)
        run, executions = trace.run, trace.executions()
        if not executions:
            raise CliError(f"{options.trace} holds no executions")
        if options.write_baseline:
            baseline = baseline_of(run, executions, options.warmup_steps)
            _write_output(json.dumps(baseline, indent=2) + "\n", options, options.write_baseline,
                          (options.trace,), for_people=False)
            print(f"lazyviz: wrote the baseline of {len(baseline['sites'])} sync sites to {options.write_baseline}")
            return 0
        baseline = self._read_baseline(options.baseline) if options.baseline else None
        # With a baseline, only the thresholds given explicitly apply on top of it.
        strict = baseline is None
        if options.any_fallbacks or (not strict and not options.no_fallbacks and not options.allow_fallback):
            allowed = None
        else:
            allowed = frozenset(options.allow_fallback)
        budget = Budget(
            warmup_steps=options.warmup_steps,
            max_misses_after=options.max_misses_after if options.max_misses_after is not None else (0 if strict else None),
            max_executions_per_step=(options.max_executions_per_step if options.max_executions_per_step is not None
                                     else (1 if strict else None)),
            allowed_fallbacks=allowed,
            allow_unfinished=options.allow_unfinished,
        )
        ir_texts = trace.ir_texts()
        recompiles = explain_recompiles(executions, ir_texts, options.warmup_steps)
        breaches = check_budget(run, executions, recompiles, budget, ir_texts)
        if baseline is not None:
            breaches += check_baseline(run, executions, baseline)
        steps = summarize(executions, run.steps).steps
        return self._verdict(breaches, f"{len(executions)} executions, {steps} step{'s' if steps != 1 else ''}")

    @staticmethod
    def _ranks(options: argparse.Namespace) -> int:
        from lazyviz.analysis.ranks import find_divergence

        traces = _open_ranks(options.trace)
        breaches = []
        if not options.allow_unfinished:
            breaches += [f"rank {rank}: the trace is unfinished: {trace.run.state}"
                         for rank, trace in traces.items() if not trace.run.complete]
        if options.same_graphs_across_ranks:
            divergence = find_divergence({r: t.executions() for r, t in traces.items()},
                                         {r: t.ir_texts() for r, t in traces.items()})
            if divergence is not None:
                where = f" at {divergence.frame.site}" if divergence.frame else ""
                breaches.append(divergence.message() + where)
        return CheckCommand._verdict(breaches, f"{len(traces)} ranks ran the same graphs")

    @staticmethod
    def _verdict(breaches: list[str], ok: str) -> int:
        from lazyviz._output import printable

        for breach in breaches:
            print(printable(f"lazyviz check: {breach}"))
        if not breaches:
            print(f"lazyviz check: ok ({ok})")
        return 1 if breaches else 0

    @staticmethod
    def _read_baseline(path: str) -> dict:
        from lazyviz.analysis.budget import BASELINE_VERSION, baseline_problem

        try:
            baseline = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as error:
            raise CliError(f"cannot read baseline {path}: {error.strerror}") from None
        except (ValueError, RecursionError):
            raise CliError(f"{path} is not a lazyviz baseline (not JSON)") from None
        if isinstance(baseline, dict) and isinstance(baseline.get("version"), int) \
                and baseline["version"] > BASELINE_VERSION:
            raise CliError(f"{path} is a newer baseline version than this lazyviz reads; upgrade lazyviz")
        problem = baseline_problem(baseline)
        if problem:
            raise CliError(f"{path} is not a lazyviz baseline: {problem}")
        return baseline


class DiffCommand:
    """Two traces of the same program side by side."""

    name = "diff"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("a", metavar="A")
        parser.add_argument("b", metavar="B")

    def run(self, options: argparse.Namespace) -> int:
        from lazyviz.analysis.compare import compare_runs, diff_text
        from lazyviz.trace import TraceError

        a, b = _open_trace(options.a), _open_trace(options.b)
        try:
            diff = compare_runs(a.run, a.executions(), a.ir_texts(), b.run, b.executions(), b.ir_texts())
        except TraceError as error:
            raise CliError(str(error)) from None
        _write_output(diff_text(diff, options.a, options.b), options)
        return 0


class _Parser(argparse.ArgumentParser):
    """Usage mistakes are one line too, with where to read more."""

    def error(self, message: str) -> NoReturn:
        _say(f"{self.prog}: {message} (see {self.prog} --help)")
        raise SystemExit(2)


COMMANDS = [RunCommand(), ViewCommand(), ReportCommand(), ExportCommand(), CheckCommand(), DiffCommand()]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="lazyviz",
        description="Debug lazy-tensor PyTorch programs: every graph execution, what caused it, what changed.",
    )
    parser.add_argument("--version", action="version", version=f"lazyviz {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    for command in COMMANDS:
        sub = commands.add_parser(command.name, help=(command.__doc__ or "").strip().splitlines()[0])
        command.prepare_parser(sub)
        sub.set_defaults(handler=command)
    return parser


def main(argv: list[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    try:
        return options.handler.run(options)
    except CliError as error:
        _say(f"lazyviz: {' '.join(str(error).split())}")
        return error.exit_status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `lazyviz report t | head`: the reader went away; that is not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as error:  # noqa: BLE001 - a bug of ours: one line, the traceback on request
        if os.environ.get("LAZYVIZ_DEBUG"):
            raise
        _say(f"lazyviz: internal error: {type(error).__name__}: {error} "
             "(a lazyviz bug: please report it; LAZYVIZ_DEBUG=1 shows the traceback)")
        return 70
