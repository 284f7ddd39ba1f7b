"""`lazyviz diff`: two traces of the same program side by side."""
from __future__ import annotations

import argparse

from lazyviz.analysis.collectives import Row, collective_rows, run_collectives
from lazyviz.analysis.compare import compare_runs, run_diff_text
from lazyviz.analysis.run import with_hlo
from lazyviz.analysis.summary import summarize
from lazyviz.commands.base import open_trace, write_output
from lazyviz.trace.reader import Trace


class DiffCommand:
    """Two traces of the same program side by side."""

    name = "diff"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("a", metavar="A")
        parser.add_argument("b", metavar="B")

    def run(self, options: argparse.Namespace) -> int:
        a, b = open_trace(options.a), open_trace(options.b)
        diff = compare_runs(a.run, a.table(), a.ir_texts(), b.run, b.table(), b.ir_texts(),
                            _collectives(a), _collectives(b))
        write_output(run_diff_text(diff, options.a, options.b), options)
        return 0




def _collectives(trace: Trace) -> list[Row]:
    """A run's collectives (PyTorch/XLA SPMD), [] where it records no HLO."""
    run, table = trace.run, trace.table()
    graphs = with_hlo({}, trace, run)
    if not graphs.has_hlo:
        return []
    return collective_rows(run_collectives(table, graphs.hlo, run.annotations), summarize(table, run.steps).steps)
