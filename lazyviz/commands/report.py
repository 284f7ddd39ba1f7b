"""`lazyviz report`: the findings and summary of a trace (or a folder of rank traces),
in any of the report renderers (lazyviz.export.REPORT_FORMATS)."""
from __future__ import annotations

import argparse
import json
import sys
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
        ranks = {rank: Run(trace) for rank, trace in open_ranks(options.trace).items()}
        divergence = find_divergence({r: d.executions for r, d in ranks.items()},
                                     {r: d.ir_texts for r, d in ranks.items()})
        inputs = tuple(str(d.path) for d in ranks.values())
        if fmt == "json":
            text = json.dumps(ranks_json_report(ranks, divergence), indent=1) + "\n"
        else:
            text = ranks_text_report(options.trace, ranks, divergence)
        write_output(text, options, options.output, inputs, for_people=fmt == "text")
        return 0
