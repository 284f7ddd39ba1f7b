"""Jupyter and IPython: `%load_ext lazyviz`, then

    %%lazyviz [-o run.trace] [--capture full|light] [--backend ts|xla] [--force] [--no-source-lines]

on a cell traces that cell and shows a summary under it (findings first), and
`%lazyviz report run.trace` shows a saved trace the same way."""
from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from lazyviz.analysis.run import Run
from lazyviz.errors import LazyvizError
from lazyviz.export.notebook import summary_html
from lazyviz.record.recorder import Recorder
from lazyviz.trace import open as open_trace

USAGE = ("%%lazyviz [-o TRACE] [--capture full|light] [--backend ts|xla] [--force] [--no-source-lines]  (on a cell), "
         "or %lazyviz report TRACE")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, as IPython shows a UsageError
        raise LazyvizError(f"{message}; usage: {USAGE}")


def _cell_options(line: str) -> argparse.Namespace:
    parser = _Parser(prog="%%lazyviz", add_help=False)
    parser.add_argument("-o", "--output", default=None)
    parser.add_argument("--capture", choices=("full", "light"), default="full")
    parser.add_argument("--backend", default=None)
    parser.add_argument("-f", "--force", action="store_true")
    parser.add_argument("--no-source-lines", dest="source_lines", action="store_false")
    return parser.parse_args(shlex.split(line))


def lazyviz_magic(line: str, cell: str | None = None) -> None:
    from IPython import get_ipython
    from IPython.core.error import UsageError

    shell = get_ipython()
    try:
        if cell is None:
            _line_magic(line)
        else:
            _trace_cell(shell, _cell_options(line), cell)
    except LazyvizError as error:
        raise UsageError(f"lazyviz: {error}") from None


def _line_magic(line: str) -> None:
    from IPython.display import HTML, display


    words = shlex.split(line)
    if len(words) != 2 or words[0] != "report":
        raise LazyvizError(f"usage: {USAGE}")
    with open_trace(words[1]) as trace:
        display(HTML(summary_html(Run(trace))))


def _trace_cell(shell: Any, options: argparse.Namespace, cell: str) -> None:
    from IPython.display import display


    number = _running_cell_number(shell)
    # A blank first line keeps the cell's own line numbers (line 1 is %%lazyviz).
    source = "\n" + shell.transform_cell(cell)
    filename = shell.compile.cache(source, number, raw_code="\n" + cell)  # named "In [N]" in the trace
    code = shell.compile(source, filename, "exec")
    recorder = Recorder(options.output, capture=options.capture, backend=options.backend, force=options.force,
                        source_lines=options.source_lines, source="notebook")
    try:
        with recorder:
            exec(code, shell.user_global_ns, shell.user_ns)
    finally:
        if recorder.recorded:  # also when the cell raised: the summary shows what was recorded
            display(recorder)


def _running_cell_number(shell: Any) -> int:
    """The number IPython shows for the cell being run ("In [N]"): the one it compiled the
    cell under (`%%lazyviz` runs from that code), found up the stack. execution_count is
    N while the cell runs on IPython 8 and already N+1 on IPython 9."""
    numbers = getattr(shell.compile, "_filename_map", {})
    frame = sys._getframe(1)
    while frame is not None:
        number = numbers.get(frame.f_code.co_filename)
        if isinstance(number, int):
            return number
        frame = frame.f_back
    return int(shell.execution_count)


def register(shell: Any) -> None:
    shell.register_magic_function(lazyviz_magic, magic_kind="line_cell", magic_name="lazyviz")
