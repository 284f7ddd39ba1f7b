"""`lazyviz check`: exit 1 with one line per breach of a budget or a baseline."""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from lazyviz._output import printable
from lazyviz.analysis.budget import BASELINE_VERSION, Budget, baseline_of, baseline_problem, check_baseline, check_budget
from lazyviz.analysis.collectives import run_collectives
from lazyviz.analysis.ranks import find_divergence
from lazyviz.analysis.recompiles import explain_recompiles
from lazyviz.analysis.run import stacks_of, with_hlo
from lazyviz.analysis.summary import summarize
from lazyviz.commands.base import CliError, add_force, count, open_ranks, open_trace, regular_file, write_output
from lazyviz.present import divergence_text


class CheckCommand:
    """Exit 1 with one line per breach when a run breaks its budget or its baseline."""

    name = "check"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("trace", metavar="TRACE")
        parser.add_argument("--warmup-steps", type=count, default=2, help="steps that may compile (default 2)")
        parser.add_argument("--max-misses-after", type=count, metavar="N",
                            help="cache misses allowed after warm-up (default 0)")
        parser.add_argument("--max-executions-per-step", type=count, metavar="K",
                            help="executions allowed per step after warm-up (default 1)")
        parser.add_argument("--max-miss-rate", type=_rate, metavar="R",
                            help="share of executions after warm-up that may be cache misses, 0-1 (default 0.5)")
        fallbacks = parser.add_mutually_exclusive_group()
        fallbacks.add_argument("--no-fallbacks", action="store_true", help="no op may fall back (the default)")
        fallbacks.add_argument("--allow-fallback", action="append", metavar="OP", default=[],
                               help="this op may fall back (repeat for more; e.g. aten::lerp.Scalar)")
        fallbacks.add_argument("--any-fallbacks", action="store_true", help="do not check fallbacks")
        parser.add_argument("--max-collective-bytes-per-step", type=count, metavar="N",
                            help="SPMD: bytes each device may send for collectives in a step after warm-up")
        parser.add_argument("--allow-unasked-collectives", action="store_true",
                            help="SPMD: do not fail on collectives the sharding annotations did not ask for")
        parser.add_argument("--max-peak-rss", type=memory_size, metavar="SIZE",
                            help="the process's peak resident memory allowed, e.g. 2G or 512M (binary units)")
        parser.add_argument("--allow-unfinished", action="store_true",
                            help="check what a trace holds even if its run was killed or its recording stopped")
        parser.add_argument("--baseline", metavar="FILE", help="also fail on graphs, syncs or fallbacks it lacks")
        parser.add_argument("--write-baseline", metavar="FILE", help="record this run's graph set and exit 0")
        add_force(parser, "the --write-baseline file")
        parser.add_argument("--same-graphs-across-ranks", action="store_true",
                            help="with a folder of rank traces: fail when ranks ran different graphs")

    def run(self, options: argparse.Namespace) -> int:
        if Path(options.trace).is_dir():
            return self._ranks(options)
        return self._check(options)

    def _check(self, options: argparse.Namespace) -> int:
        if options.same_graphs_across_ranks:
            raise CliError("--same-graphs-across-ranks needs the folder of rank traces (lazyviz run -o DIR/)")
        trace = open_trace(options.trace)
        run, executions = trace.run, trace.table()
        if not executions:
            raise CliError(f"{options.trace} holds no executions")
        ir_texts = with_hlo(trace.ir_texts(), trace, run)
        collectives = run_collectives(executions, ir_texts.hlo, run.annotations) if ir_texts.has_hlo else []
        if options.write_baseline:
            baseline = baseline_of(run, executions, options.warmup_steps, collectives)
            write_output(json.dumps(baseline, indent=2) + "\n", options, options.write_baseline,
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
            max_miss_rate=options.max_miss_rate if options.max_miss_rate is not None else (0.5 if strict else None),
            max_collective_bytes_per_step=options.max_collective_bytes_per_step,
            unasked_collectives=strict and not options.allow_unasked_collectives,
            max_peak_rss_kb=options.max_peak_rss,
        )
        recompiles = explain_recompiles(executions, ir_texts, options.warmup_steps)
        breaches = check_budget(run, executions, recompiles, budget, ir_texts, stacks_of(trace, run.capabilities.packages))
        if baseline is not None:
            breaches += check_baseline(run, executions, baseline, collectives)
        steps = summarize(executions, run.steps).steps
        return self._verdict(breaches, f"{len(executions)} executions, {steps} step{'s' if steps != 1 else ''}")

    @staticmethod
    def _ranks(options: argparse.Namespace) -> int:
        problems: dict[int, str] = {}
        traces = open_ranks(options.trace, problems)
        breaches = [f"rank {rank}: {problem}" for rank, problem in problems.items()]
        if not options.allow_unfinished:
            breaches += [f"rank {rank}: {trace.run.state}"
                         for rank, trace in traces.items() if not trace.run.complete]
        if options.same_graphs_across_ranks:
            divergence = find_divergence({r: t.table() for r, t in traces.items()},
                                         {r: t.ir_texts() for r, t in traces.items()},
                                         stopped=[r for r, t in traces.items() if not t.run.ended_cleanly])
            if divergence is not None:
                breaches.append(divergence_text(divergence))
        return CheckCommand._verdict(breaches, f"{len(traces)} ranks ran the same graphs")

    @staticmethod
    def _verdict(breaches: list[str], ok: str) -> int:
        for breach in breaches:
            print(printable(f"lazyviz check: {breach}"))
        if not breaches:
            print(f"lazyviz check: ok ({ok})")
        return 1 if breaches else 0

    @staticmethod
    def _read_baseline(path: str) -> dict:
        try:
            baseline = json.loads(regular_file(path, "baseline").read_text(encoding="utf-8"))
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


def memory_size(text: str) -> int:
    """A size with its unit, in KiB: 512M, 2G, 1.5GiB (binary units, as ulimit and free count)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT])(?:i?B)?\s*", text, re.IGNORECASE)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size with a unit (K, M, G or T: 512M, 2G)")
    return round(float(match.group(1)) * 1024 ** "KMGT".index(match.group(2).upper()))


def _rate(text: str) -> float:
    try:
        rate = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= rate <= 1:
        raise argparse.ArgumentTypeError(f"a share from 0 to 1, not {text}")
    return rate
