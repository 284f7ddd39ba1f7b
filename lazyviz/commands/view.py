"""`lazyviz view`: the UI on a saved trace, a growing one, or a folder of rank traces."""
from __future__ import annotations

import argparse
from pathlib import Path

from lazyviz.commands.base import open_ranks, open_trace


class ViewCommand:
    """Open the UI on a saved trace, or on one still being written."""

    name = "view"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("trace", metavar="TRACE")

    def run(self, options: argparse.Namespace) -> int:
        path, ranks = Path(options.trace), None
        if path.is_dir():  # a multi-process run: rank 0 first, [ and ] switch
            ranks = {rank: trace.path for rank, trace in open_ranks(options.trace).items()}
            path = next(iter(ranks.values()))
        trace = open_trace(str(path))
        try:  # one clear line now for damage the UI would meet in its first screen
            trace.run, trace.executions(0, 2000), trace.ir_texts()
        finally:
            trace.close()
        from lazyviz.tui.app import build_app  # Textual loads only for the UI, not for --no-tui or --help

        build_app(path, ranks=ranks).run()
        return 0


