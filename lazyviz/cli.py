"""The `lazyviz` command. Heavy imports (torch, textual) happen inside the subcommand
that needs them, so `lazyviz --help` and `lazyviz report` stay fast."""
from __future__ import annotations

import argparse
import ast
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

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


def _write_output(text: str, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as error:
        raise CliError(f"cannot write {output}: {error.strerror}") from None


def _exit_status_of(returncode: int) -> int:
    """A child killed by signal N exits the way a shell reports it: 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


class RunCommand:
    """Run a script on a lazy backend under the tracer."""

    name = "run"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("-o", "--output", help="trace file to write (default: lazyviz-<script>.<pid>.trace)")
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
        parser.add_argument("target", metavar="SCRIPT | MODULE", help="the script (or, with -m, the module) to run")
        parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")

    def run(self, options: argparse.Namespace) -> int:
        from lazyviz._source import top_level_imports
        from lazyviz.tracer import default_trace_path

        if not options.module:
            self._check_script(options.target)
        if options.backend is None:
            imported = top_level_imports(options.target, options.module) or set()
            options.backend = "xla" if "torch_xla" in imported else "ts"
        rank = os.environ.get("RANK", "0")
        trace_path = Path(options.output or default_trace_path(options.target)).resolve()
        if options.output and (trace_path.is_dir() or options.output.endswith(os.sep)):
            # One trace per rank in a folder: the torchrun case.
            trace_path.mkdir(parents=True, exist_ok=True)
            trace_path = trace_path / f"rank{rank}.trace"
        if not trace_path.parent.is_dir():
            raise CliError(f"cannot write {trace_path}: no such directory {trace_path.parent}")
        self._ensure_hook(options.backend)

        command = [sys.executable, "-m", "lazyviz._child", "--trace", str(trace_path),
                   "--capture", options.capture, "--backend", options.backend]
        if options.module:
            command.append("--module")
        command += ["--", options.target, *options.args]
        if rank != "0":
            # Under torchrun, rank 0 talks to the terminal; the others write beside their traces.
            with open(f"{trace_path}.out", "wb") as output:
                return self._run_plain(command, output)
        if options.no_tui or not (sys.stdout.isatty() and sys.stdin.isatty()):
            return self._finish(trace_path, self._run_plain(command))
        return self._run_with_ui(command, trace_path)

    @staticmethod
    def _run_with_ui(command: list[str], trace_path: Path) -> int:
        """The script runs in its own session with its output going to a file beside the
        trace (shown in the Output tab), so nothing it prints lands over the UI."""
        from tui.app import build_app

        output_path = Path(f"{trace_path}.out")
        with output_path.open("wb") as output:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        try:
            build_app(trace_path, process, output_path).run()
        finally:
            if _run_finished(trace_path):
                _wait_quietly(process)  # the script is done, only tearing down: don't interrupt it
            stopped = process.poll() is None
            if stopped:
                _stop(process)
        status = _exit_status_of(process.wait())
        if stopped:
            print(f"lazyviz: stopped the script when the UI quit (status {status}); "
                  f"the trace keeps what it recorded: {trace_path}", file=sys.stderr)
        else:
            print(f"lazyviz: script exited {status}; trace: {trace_path}; output: {output_path}", file=sys.stderr)
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
        from lazyviz.backends.ts import hook_is_built, load_hook

        if hook_is_built():
            return
        print("lazyviz: building the execution hook for this torch (once, about a minute)...", file=sys.stderr)
        try:
            load_hook()
        except BackendError as error:
            raise CliError(str(error)) from None

    @staticmethod
    def _run_plain(command: list[str], output: object = None) -> int:
        # Ctrl-C goes to the whole foreground group: the script handles it as it would
        # untraced, and we stay alive to report on the trace it leaves.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            return _exit_status_of(subprocess.call(command, stdout=output, stderr=output))
        finally:
            signal.signal(signal.SIGINT, previous)

    @staticmethod
    def _finish(trace_path: Path, status: int) -> int:
        from lazyviz.export.report import text_report
        from lazyviz.trace import TraceError, open as open_trace

        try:
            with open_trace(trace_path) as trace:
                run, executions, ir_texts = trace.run, trace.executions(), trace.ir_texts()
        except TraceError:
            return status  # the tracer never started; it said why
        if not run.argv:
            return status
        if not executions:
            print(
                f"lazyviz: {run.script} ran no lazy-tensor graph (nothing on device '{run.device}'); "
                f"nothing to show in {trace_path}",
                file=sys.stderr,
            )
            return status or 3
        sys.stderr.write(text_report(run, executions, ir_texts, trace_path))
        return status


def _run_finished(trace_path: Path) -> bool:
    from lazyviz.trace import TraceError, open as open_trace

    try:
        with open_trace(trace_path) as trace:
            return trace.run.finished
    except TraceError:
        return False


def _wait_quietly(process: subprocess.Popen, grace_s: float = 30.0) -> None:
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        pass


def _stop(process: subprocess.Popen, grace_s: float = 5.0) -> None:
    """Ctrl-C first, so the script ends as it would by hand and its trace is closed
    properly; then SIGKILL if it will not stop."""
    try:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class ViewCommand:
    """Open the UI on a saved trace, or on one still being written."""

    name = "view"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("trace", metavar="TRACE")

    def run(self, options: argparse.Namespace) -> int:
        path, ranks = Path(options.trace), None
        if path.is_dir():  # a multi-process run: rank 0 first, [ and ] switch
            ranks = {rank: trace.path for rank, trace in _open_ranks(options.trace).items()}
            path = next(iter(ranks.values()))
        _open_trace(str(path)).close()  # one clear line if it is not a trace
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

    def run(self, options: argparse.Namespace) -> int:
        from lazyviz.export.report import json_report, text_report

        if Path(options.trace).is_dir():
            return self._ranks(options)
        trace = _open_trace(options.trace)
        run, executions = trace.run, trace.executions()
        suffix = Path(options.output or "").suffix.lower()
        options.format = options.format or {".json": "json", ".html": "html", ".htm": "html"}.get(suffix, "text")
        if options.format == "html":
            from lazyviz.export.html import html_report

            text = html_report(run, executions, trace.graphs())
        elif options.format == "json":
            text = json.dumps(json_report(run, executions, trace.ir_texts()), indent=1) + "\n"
        else:
            text = text_report(run, executions, trace.ir_texts(), trace.path)
        _write_output(text, options.output)
        return 0


    @staticmethod
    def _ranks(options: argparse.Namespace) -> int:
        from lazyviz.analysis.ranks import find_divergence
        from lazyviz.export.report import json_report, text_report

        traces = _open_ranks(options.trace)
        executions = {rank: trace.executions() for rank, trace in traces.items()}
        ir_texts = {rank: trace.ir_texts() for rank, trace in traces.items()}
        divergence = find_divergence(executions, ir_texts)
        if options.format == "json" or (options.format is None and (options.output or "").endswith(".json")):
            report = {
                "format": "lazyviz-report", "version": 1,
                "ranks": [{"rank": rank, "trace": str(trace.path),
                           "report": json_report(trace.run, executions[rank], ir_texts[rank])}
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
            _write_output(json.dumps(report, indent=1) + "\n", options.output)
            return 0
        parts = [f"lazyviz: {len(traces)} ranks in {options.trace}"]
        if divergence is not None:
            where = f" at {divergence.frame.site}" if divergence.frame else ""
            parts.append(f"  error: {divergence.message()}{where}")
        else:
            parts.append("  ranks ran the same graphs at every common step")
        for rank, trace in traces.items():
            parts.append(f"\n[rank {rank}] " + text_report(trace.run, executions[rank], ir_texts[rank], trace.path))
        _write_output("\n".join(parts) + "\n", options.output)
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
        parser.add_argument("--execution", type=int, metavar="N", help="execution index (all formats but chrome)")
        parser.add_argument("--format", choices=("svg", "dot", "ir", "backend", "chrome"),
                            help="default: from -o's extension, else svg; chrome: a timeline for Perfetto")
        parser.add_argument("-o", "--output", help="file to write (default: standard output)")
        parser.add_argument("--diff", action="store_true",
                            help="highlight the nodes that changed since the closest earlier graph")
        parser.add_argument("--around", metavar="NODE", help="draw only the neighbourhood of this node (e.g. %%12)")
        parser.add_argument("--depth", type=int, default=2, help="edges around --around (default 2)")
        parser.add_argument("--max-nodes", type=int, default=300,
                            help="collapse larger graphs down to about this many boxes (default 300)")

    def run(self, options: argparse.Namespace) -> int:
        from lazyviz.trace import TraceError

        trace = _open_trace(options.trace)
        fmt = options.format or self.FORMATS.get(Path(options.output or "").suffix.lower(), "svg")
        if fmt == "chrome":
            from lazyviz.export.chrome import chrome_trace

            _write_output(json.dumps(chrome_trace(trace.run, trace.executions())) + "\n", options.output)
            return 0
        if options.execution is None:
            raise CliError(f"--format {fmt} draws one execution: give --execution N")
        try:
            execution = trace.execution(options.execution)
        except TraceError as error:
            raise CliError(str(error)) from None
        graph = trace.graph(execution.graph)
        if graph is None:
            raise CliError(f"graph {execution.graph} of execution {execution.index} is not in the trace")
        if fmt == "backend":
            _write_output(graph.backend_text, options.output)
            return 0
        if not graph.ir_text:
            raise CliError(f"{options.trace} has no IR text (recorded with --capture light)")
        if fmt == "ir":
            _write_output(graph.ir_text, options.output)
            return 0
        _write_output(self._drawing(trace, execution, graph.ir_text, fmt, options), options.output)
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
        parser.add_argument("--warmup-steps", type=int, default=2, help="steps that may compile (default 2)")
        parser.add_argument("--max-misses-after", type=int, metavar="N",
                            help="cache misses allowed after warm-up (default 0)")
        parser.add_argument("--max-executions-per-step", type=int, metavar="K",
                            help="executions allowed per step after warm-up (default 1)")
        fallbacks = parser.add_mutually_exclusive_group()
        fallbacks.add_argument("--no-fallbacks", action="store_true", help="no op may fall back (the default)")
        fallbacks.add_argument("--allow-fallback", action="append", metavar="OP", default=[],
                               help="this op may fall back (repeat for more; e.g. aten::lerp.Scalar)")
        fallbacks.add_argument("--any-fallbacks", action="store_true", help="do not check fallbacks")
        parser.add_argument("--baseline", metavar="FILE", help="also fail on graphs, syncs or fallbacks it lacks")
        parser.add_argument("--write-baseline", metavar="FILE", help="record this run's graph set and exit 0")
        parser.add_argument("--same-graphs-across-ranks", action="store_true",
                            help="with a folder of rank traces: fail when ranks ran different graphs")

    def run(self, options: argparse.Namespace) -> int:
        from lazyviz.analysis.budget import Budget, baseline_of, check_baseline, check_budget
        from lazyviz.analysis.recompiles import explain_recompiles

        if Path(options.trace).is_dir():
            return self._ranks(options)
        if options.same_graphs_across_ranks:
            raise CliError("--same-graphs-across-ranks needs the folder of rank traces (lazyviz run -o DIR/)")
        trace = _open_trace(options.trace)
        run, executions = trace.run, trace.executions()
        if not executions:
            raise CliError(f"{options.trace} holds no executions")
        if options.write_baseline:
            baseline = baseline_of(run, executions, options.warmup_steps)
            _write_output(json.dumps(baseline, indent=2) + "\n", options.write_baseline)
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
        )
        recompiles = explain_recompiles(executions, trace.ir_texts(), options.warmup_steps)
        breaches = check_budget(run, executions, recompiles, budget)
        if baseline is not None:
            breaches += check_baseline(run, executions, baseline)
        return self._verdict(breaches, f"{len(executions)} executions, {run.steps} steps")

    @staticmethod
    def _ranks(options: argparse.Namespace) -> int:
        from lazyviz.analysis.ranks import find_divergence

        traces = _open_ranks(options.trace)
        breaches = []
        if options.same_graphs_across_ranks:
            divergence = find_divergence({r: t.executions() for r, t in traces.items()},
                                         {r: t.ir_texts() for r, t in traces.items()})
            if divergence is not None:
                where = f" at {divergence.frame.site}" if divergence.frame else ""
                breaches.append(divergence.message() + where)
        return CheckCommand._verdict(breaches, f"{len(traces)} ranks ran the same graphs")

    @staticmethod
    def _verdict(breaches: list[str], ok: str) -> int:
        for breach in breaches:
            print(f"lazyviz check: {breach}")
        if not breaches:
            print(f"lazyviz check: ok ({ok})")
        return 1 if breaches else 0

    @staticmethod
    def _read_baseline(path: str) -> dict:
        from lazyviz.analysis.budget import BASELINE_FORMAT, BASELINE_VERSION

        try:
            baseline = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as error:
            raise CliError(f"cannot read baseline {path}: {error.strerror}") from None
        except ValueError:
            raise CliError(f"{path} is not a lazyviz baseline (not JSON)") from None
        if not isinstance(baseline, dict) or baseline.get("format") != BASELINE_FORMAT:
            raise CliError(f"{path} is not a lazyviz baseline")
        if baseline.get("version", 0) > BASELINE_VERSION:
            raise CliError(f"{path} is a newer baseline version than this lazyviz reads; upgrade lazyviz")
        return baseline


class DiffCommand:
    """Two traces of the same program side by side."""

    name = "diff"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("a", metavar="A")
        parser.add_argument("b", metavar="B")

    def run(self, options: argparse.Namespace) -> int:
        from lazyviz.analysis.compare import compare_runs, diff_text

        a, b = _open_trace(options.a), _open_trace(options.b)
        diff = compare_runs(a.run, a.executions(), a.ir_texts(), b.run, b.executions(), b.ir_texts())
        sys.stdout.write(diff_text(diff, options.a, options.b))
        return 0


COMMANDS = [RunCommand(), ViewCommand(), ReportCommand(), ExportCommand(), CheckCommand(), DiffCommand()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lazyviz",
        description="Debug lazy-tensor PyTorch programs: every graph execution, what caused it, what changed.",
    )
    parser.add_argument("--version", action="version", version=f"lazyviz {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
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
        print(f"lazyviz: {error}", file=sys.stderr)
        return error.exit_status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `lazyviz report t | head`: the reader went away; that is not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
