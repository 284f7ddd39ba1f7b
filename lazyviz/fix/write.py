"""`lazyviz fix --write`: the edits into the user's own files, each whole or not at all,
only where every file is as the trace recorded it."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from lazyviz.errors import LazyvizError
from lazyviz.fix.source import STAND_INS, file_hash


class WriteRefused(LazyvizError):
    """A file is not as the trace recorded it (or the trace has no record of it): nothing written."""


def write_patched(patched: Mapping[str, str], hashes: Mapping[str, str]) -> list[str]:
    """Each file replaced by its patched text, whole or not at all, only where every file
    still has the SHA-256 the trace recorded (`hashes`); lazyviz's own new file of
    stand-ins made, never over one that appeared meanwhile. Returns what it wrote, each
    as "path" or "path (new)"; raises WriteRefused before writing any file."""
    files = sorted(patched)
    made = {f for f in files if not os.path.exists(f) and os.path.basename(f) == STAND_INS}
    unknown = [f for f in files if f not in hashes and f not in made]
    if unknown:
        raise WriteRefused(f"the trace has no record of {unknown[0]} as it was when recorded, so lazyviz cannot "
                           "tell it is unchanged: apply the diff yourself")
    for file in files:  # all checked before any is written
        if file not in made and file_hash(file) != hashes[file]:
            raise WriteRefused(f"{file} changed since the trace was recorded: run it again")
    written = []
    for file in files:
        text = patched[file]
        if file in made:
            with open(file, "x", encoding="utf-8", newline="") as out:
                out.write(text)
            written.append(f"{file} (new)")
            continue
        mode = os.stat(file).st_mode & 0o7777
        handle, temporary = tempfile.mkstemp(dir=os.path.dirname(file), prefix=".lazyviz-fix-")
        try:
            with os.fdopen(handle, "w", encoding="utf-8", newline="") as out:
                out.write(text)
            os.chmod(temporary, mode)
            os.replace(temporary, file)  # whole or not at all
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        written.append(file)
    return written
