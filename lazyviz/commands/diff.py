"""`lazyviz diff`: two traces of the same program side by side."""
from __future__ import annotations

import argparse

from lazyviz.analysis.compare import compare_runs, run_diff_text
from lazyviz.commands.base import open_trace, write_output


class DiffCommand:
    """Two traces of the same program side by side."""

    name = "diff"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("a", metavar="A")
        parser.add_argument("b", metavar="B")

    def run(self, options: argparse.Namespace) -> int:
        a, b = open_trace(options.a), open_trace(options.b)
        diff = compare_runs(a.run, a.table(), a.ir_texts(), b.run, b.table(), b.ir_texts())
        write_output(run_diff_text(diff, options.a, options.b), options)
        return 0


