"""Writing what the commands produce: never over a user's file without --force, never
over a trace at all, never half a file; and text from a trace made safe for a terminal."""
from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from lazyviz.errors import LazyvizError
from lazyviz.trace.files import describe, is_lazyviz_trace


class OutputRefused(LazyvizError):
    """One line for the user: why lazyviz will not write there."""


# C0 and C1 control characters but tab and newline: a trace may hold any string (a
# script name, an exception text), and an escape sequence must not reach the terminal raw.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)


def check_output_path(output: str | os.PathLike[str], force: bool, inputs: Iterable[str | os.PathLike[str]] = ()) -> Path:
    """Refuse an output that is one of the inputs, a trace, not a regular file, or that
    exists without --force."""
    path = Path(output)
    for source in inputs:
        try:
            if os.path.lexists(path) and os.path.samefile(path, source):
                raise OutputRefused(f"{path} is the trace being read: write the output elsewhere")
        except OSError:
            continue
    if os.path.lexists(path):
        what = describe(path)
        if path.is_dir() or not path.is_file():
            raise OutputRefused(f"{path} is {what}: not writing over it")
        if is_lazyviz_trace(path.resolve()):  # a link to a trace is the trace
            link = f" (a link to {path.resolve()})" if path.is_symlink() else ""
            raise OutputRefused(f"{path} is a lazyviz trace{link}: lazyviz never writes over a trace")
        if not force:  # a plain file: its name says what it is
            raise OutputRefused(f"{path} exists; use --force to replace it")
    if not path.parent.is_dir():
        raise OutputRefused(f"cannot write {path}: no such directory {path.parent}")
    return path


def write_output(text: str | Iterable[str], output: str | None, *, force: bool = False,
                 inputs: Iterable[str | os.PathLike[str]] = (), for_people: bool = True) -> None:
    """To standard output (escaped when it is for people or a terminal), or to a file,
    which appears whole or not at all. text: the text, or its pieces in order."""
    pieces = [text] if isinstance(text, str) else text
    if output is None:
        escape = for_people or sys.stdout.isatty()
        for piece in pieces:
            sys.stdout.write(printable(piece) if escape else piece)
        return
    path = check_output_path(output, force, inputs)
    try:
        # Closed below, then renamed into place: the output appears whole or not at all.
        handle = tempfile.NamedTemporaryFile(  # noqa: SIM115
            "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False)
    except OSError as error:
        raise OutputRefused(f"cannot write {path}: {error.strerror}") from None
    try:
        with handle:
            for piece in pieces:
                handle.write(piece)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(handle.name, 0o666 & ~mask)
        os.replace(handle.name, path)
    except OSError as error:
        Path(handle.name).unlink(missing_ok=True)
        raise OutputRefused(f"cannot write {path}: {error.strerror}") from None
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise
