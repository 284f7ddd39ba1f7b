"""What every command shares: the error they raise, opening a trace or a folder of
rank traces, writing output safely, and the few argument types."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from lazyviz._output import printable
from lazyviz._output import write_output as write
from lazyviz.errors import LazyvizError
from lazyviz.export.report import coloured
from lazyviz.trace import Trace
from lazyviz.trace import open as open_trace_file
from lazyviz.trace import open_ranks as open_rank_traces
from lazyviz.trace.files import fold_wal


class CliError(LazyvizError):
    """A problem the user can fix: one line on stderr, then this exit status."""


class Command(Protocol):
    """One subcommand: its name, its arguments, and what it does (returns the exit status)."""

    name: str

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, options: argparse.Namespace) -> int: ...


def open_trace(path: str | Path) -> Trace:
    if Path(path).is_file() and not Path(path).is_symlink():
        fold_wal(Path(path))  # a run whose disk filled left its last part in -wal
    return open_trace_file(path)


def open_ranks(folder: str | Path, problems: dict[int, str] | None = None) -> dict[int, Trace]:
    return open_rank_traces(folder, problems)


def write_output(text: str | Iterable[str], options: argparse.Namespace, output: str | None = None,
                 inputs: tuple[str, ...] = (), for_people: bool = True) -> None:
    """To stdout, or to -o without overwriting anything the rules forbid."""

    write(text, output, force=getattr(options, "force", False), inputs=inputs, for_people=for_people)


def say(text: str, report: bool = False) -> None:
    """A line for the user on stderr; the terminal may be gone (SIGHUP), which is fine.
    report: a text report, coloured on a terminal (unless NO_COLOR)."""
    if not text:
        return
    text = printable(text)
    if report:
        text = coloured(text, sys.stderr)
    try:
        sys.stderr.write(text + ("" if text.endswith("\n") else "\n"))
        sys.stderr.flush()
    except OSError:
        pass


def _whole_number(what: str, limit: int) -> Callable[[str], int]:
    """An argparse type: a whole number from 0 below limit, named in its error."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        if not 0 <= value < limit:
            raise argparse.ArgumentTypeError(f"{text} is out of range for {what} (0 to {limit - 1})")
        return value

    return parse


execution_index = _whole_number("an execution index", 2**63)
count = _whole_number("a count", 2**31)


def step_count(text: str) -> int:
    """--steps N: at least one step."""
    number = count(text)
    if number < 1:
        raise argparse.ArgumentTypeError(f"--steps needs at least 1 step, not {text}")
    return number


def regular_file(path: str, what: str) -> Path:
    """A file lazyviz is to read, checked to be a regular file first: reading a FIFO
    would wait forever, a folder or a device is never one."""
    found = Path(path)
    if not found.exists():
        raise CliError(f"can't open {what} {path!r}: no such file")
    if not found.is_file():
        raise CliError(f"can't open {what} {path!r}: not a regular file")
    return found


def add_force(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("-f", "--force", action="store_true", help=f"replace {what} if it exists")
