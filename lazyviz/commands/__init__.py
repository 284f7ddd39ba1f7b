"""The `lazyviz` command: one module per subcommand, registered here. Heavy imports
(torch, textual) happen inside the subcommand that needs them, so `lazyviz --help` and
`lazyviz report` stay fast."""
from __future__ import annotations

import argparse
import gc
import os
import sys
from typing import NoReturn

from lazyviz import __version__
from lazyviz.commands.base import Command, say
from lazyviz.commands.check import CheckCommand
from lazyviz.commands.diff import DiffCommand
from lazyviz.commands.export import ExportCommand
from lazyviz.commands.fix import FixCommand
from lazyviz.commands.report import ReportCommand
from lazyviz.commands.run import RunCommand
from lazyviz.commands.view import ViewCommand
from lazyviz.errors import LazyvizError
from lazyviz.trace.reader import close_all


class _Parser(argparse.ArgumentParser):
    """Usage mistakes are one line too, with where to read more."""

    def error(self, message: str) -> NoReturn:
        say(f"{self.prog}: {message} (see {self.prog} --help)")
        raise SystemExit(2)


COMMANDS: list[Command] = [RunCommand(), ViewCommand(), ReportCommand(), ExportCommand(), CheckCommand(), DiffCommand(),
                           FixCommand()]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="lazyviz",
        description="Debug lazy-tensor PyTorch programs: every graph execution, what caused it, what changed.",
    )
    parser.add_argument("--version", action="version", version=f"lazyviz {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    for command in COMMANDS:
        sub = commands.add_parser(command.name, help=(command.__doc__ or "").strip().splitlines()[0])
        command.prepare_parser(sub)
        sub.set_defaults(handler=command)
    return parser


# Reading a trace builds hundreds of thousands of long-lived objects (parsed graphs,
# diffs) and no cycles worth collecting: at the default threshold the cyclic collector
# rescans them all again and again (a quarter of a 1,500-graph report's time). This is
# lazyviz's own process; the traced script runs in lazyviz.record.child, untouched.
GC_THRESHOLD = (100_000, 50, 100)


# Commands that only read traces and print: once their output is out, the process ends
# without freeing what the analysis built one object at a time (a BERT report's 300,000
# parsed nodes took 0.2 s of its 1.5 s to free). Only as the `lazyviz` command (argv None):
# a caller of main() in its own process keeps its teardown.
EXITS_AT_ONCE = frozenset({"report", "check", "diff"})


def _exit_at_once(status: int) -> NoReturn:
    close_all()  # what normal teardown would do for the traces: fold their WAL back in
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:  # `lazyviz report t | head`: the reader went away
            pass
        except OSError:
            pass
    os._exit(status)


def main(argv: list[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    gc.set_threshold(*GC_THRESHOLD)
    if argv is None and options.handler.name in EXITS_AT_ONCE:
        # It ends at once, cycles and all: no collection, not even the one that would scan
        # the whole analysis after it (0.1 s of a BERT report).
        gc.disable()
    try:
        status = options.handler.run(options)
        if argv is None and options.handler.name in EXITS_AT_ONCE:
            _exit_at_once(status)
        return status
    except LazyvizError as error:  # every error a user can cause, caught once
        say(f"lazyviz: {' '.join(str(error).split())}")
        return error.exit_status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `lazyviz report t | head`: the reader went away; that is not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as error:
        if os.environ.get("LAZYVIZ_DEBUG"):
            raise
        say(f"lazyviz: internal error: {type(error).__name__}: {error} "
             "(a lazyviz bug: please report it; LAZYVIZ_DEBUG=1 shows the traceback)")
        return 70
