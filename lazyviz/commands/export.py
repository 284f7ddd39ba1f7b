"""`lazyviz export`: one execution's graph (SVG, DOT, IR, backend code) or the run's
timeline, with the renderers of lazyviz.export.EXPORT_FORMATS."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lazyviz._output import check_output_path
from lazyviz.analysis.run import Run
from lazyviz.commands.base import add_force, count, execution_index, open_trace, say, write_output
from lazyviz.export import EXPORT_FORMATS, RenderOptions, renderer_for
from lazyviz.trace.files import new_file


class ExportCommand:
    """Write one execution's graph: SVG or DOT drawing, IR text or backend code."""

    name = "export"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("trace", metavar="TRACE")
        parser.add_argument("--execution", type=execution_index, metavar="N",
                            help="execution index (all formats but chrome)")
        parser.add_argument("--format", choices=tuple(EXPORT_FORMATS),
                            help="default: from -o's extension, else svg; chrome: a timeline for Perfetto")
        parser.add_argument("-o", "--output", help="file to write (default: standard output; svg and chrome "
                                                   "on a terminal: a new file beside the trace)")
        add_force(parser, "the -o file (never a trace)")
        parser.add_argument("--diff", action="store_true",
                            help="highlight the nodes that changed since the closest earlier graph")
        parser.add_argument("--around", metavar="NODE", help="draw only the neighbourhood of this node (e.g. %%12)")
        parser.add_argument("--depth", type=count, default=2, help="edges around --around (default 2)")
        parser.add_argument("--label", choices=("op", "source"), default="op",
                            help="source: each box also names the line of the script that built it")
        parser.add_argument("--max-nodes", type=count, default=300,
                            help="collapse larger graphs down to about this many boxes (default 300)")

    def run(self, options: argparse.Namespace) -> int:
        renderer = renderer_for(EXPORT_FORMATS, options.format, options.output, "svg")
        inputs = (options.trace,)
        if options.output:  # refuse a bad -o before the work, not after it
            check_output_path(options.output, options.force, inputs)
        render = RenderOptions(options.execution, options.diff, options.around, options.depth, options.max_nodes,
                               options.label)
        text = renderer.render(Run(open_trace(options.trace)), render)
        if not options.output and renderer.name in _DRAWINGS and sys.stdout.isatty():
            # A drawing is no use as text on a terminal: a new file beside the trace, as the UI's `s`.
            which = f"execution-{options.execution}" if options.execution is not None else "graph"
            path = new_file(Path(options.trace).with_name(f"{Path(options.trace).name}.{which}"), f".{renderer.name}")
            write_output(text, options, str(path), inputs)
            say(f"lazyviz: wrote {path} (-o FILE names it; piped, it goes to standard output)")
            return 0
        write_output(text, options, options.output, inputs, for_people=renderer.for_people)
        return 0


_DRAWINGS = ("svg", "chrome")  # formats for a viewer, not for reading in a terminal
