"""`lazyviz report`: the findings and summary of a trace (or a folder of rank traces),
in any of the report renderers (lazyviz.export.REPORT_FORMATS)."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

from lazyviz._output import printable
from lazyviz.analysis.ranks import find_divergence
from lazyviz.analysis.run import Run
from lazyviz.commands.base import CliError, add_force, open_ranks, open_trace, write_output
from lazyviz.export import REPORT_FORMATS, RenderOptions, renderer_for
from lazyviz.export.report import coloured, ranks_json_report, ranks_text_report


class ReportCommand:
    """Print what a trace shows: the summary, or the versioned JSON report."""

    name = "report"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("trace", metavar="TRACE", help="a trace, or a folder of rank traces (torchrun)")
        parser.add_argument("--format", choices=tuple(REPORT_FORMATS), default=None,
                            help="default: from -o's extension (.json, .md, .html), else text")
        parser.add_argument("-o", "--output", help="write to this file instead of standard output")
        parser.add_argument("--all", action="store_true", dest="all_findings",
                            help="text: every finding, not the worst few groups")
        add_force(parser, "the -o file (never a trace)")

    def run(self, options: argparse.Namespace) -> int:
        renderer = renderer_for(REPORT_FORMATS, options.format, options.output, "text")
        if Path(options.trace).is_dir():
            return self._ranks(options, renderer.name)
        run, render = Run(open_trace(options.trace)), RenderOptions(all_findings=options.all_findings)
        if options.output is None and renderer.name == "text":

            text = renderer.render(run, render)
            sys.stdout.write(coloured(printable(text), sys.stdout))  # colour on a terminal, unless NO_COLOR
            return 0
        write_output(renderer.stream(run, render), options, options.output, inputs=(options.trace,),
                     for_people=renderer.for_people)
        return 0

    @staticmethod
    def _ranks(options: argparse.Namespace, fmt: str) -> int:
        if fmt not in ("text", "json"):
            raise CliError(f"--format {fmt} reports one trace: give one rank's file (e.g. "
                           f"{Path(options.trace) / 'rank0.trace'})")
        problems: dict[int, str] = {}  # ranks whose trace cannot be read: said, the others reported
        ranks = {rank: Run(trace) for rank, trace in open_ranks(options.trace, problems).items()}
        divergence = find_divergence({r: run.executions for r, run in ranks.items()},
                                     {r: run.ir_texts for r, run in ranks.items()},
                                     stopped=[r for r, run in ranks.items() if not run.info.ended_cleanly])
        inputs = tuple(str(d.path) for d in ranks.values())
        if fmt == "json":
            text: str | Iterator[str] = ranks_json_report(ranks, divergence, problems)
        else:
            text = ranks_text_report(options.trace, ranks, divergence, problems)
        write_output(text, options, options.output, inputs, for_people=fmt == "text")
        return 0
