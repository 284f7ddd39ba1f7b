"""The user's own edit, for `lazyviz fix --try --patch`: a unified diff (as `git diff` or
`diff -u` writes it) applied to the script's files, or a copy of one of them edited by
hand. Pure text in, patched texts out; nothing here writes a file. A diff must apply as
written (each hunk's lines where it says, or moved by lines added above it), never
fuzzily: a patch that half applies would prove something else."""
from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lazyviz.errors import LazyvizError
from lazyviz.fix.source import split_lines

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NO_NEWLINE = "\\ No newline at end of file"


class PatchError(LazyvizError):
    """A patch that cannot be applied: one line that says where and why."""


@dataclass
class _Hunk:
    start: int  # the old side's first line, 1-based (0: before the first line)
    old: list[str] = field(default_factory=list)  # lines without their endings
    new: list[str] = field(default_factory=list)
    old_ends_file_without_newline: bool = False
    new_ends_file_without_newline: bool = False


@dataclass
class _FilePatch:
    old_path: str
    new_path: str
    hunks: list[_Hunk] = field(default_factory=list)


def _lines(text: str) -> list[str]:
    """The lines without their endings, cut only at line ends (not at a form feed)."""
    return [line.removesuffix("\n").removesuffix("\r") for line in split_lines(text)]


def is_diff(text: str) -> bool:
    """Does this text read as a unified diff (rather than a source file)?"""
    lines = _lines(text)
    return any(a.startswith("--- ") and b.startswith("+++ ") for a, b in itertools.pairwise(lines)) \
        and any(_HUNK.match(line) for line in lines)


def _path_of(header: str) -> str:
    """The path of a `---`/`+++` line: up to a tab (diff -u puts the date there), or
    quoted as git quotes a name with a quote, backslash or control character."""
    path = header[4:].split("\t", 1)[0].rstrip()
    if len(path) > 1 and path.startswith('"') and path.endswith('"'):
        try:  # C escapes; an octal escape is one byte of the name's UTF-8
            return path[1:-1].encode().decode("unicode_escape").encode("latin-1").decode()
        except (UnicodeDecodeError, UnicodeEncodeError):
            return path[1:-1]
    return path


def parse(text: str) -> list[_FilePatch]:
    files: list[_FilePatch] = []
    lines = _lines(text)
    at = 0
    while at < len(lines):
        line = lines[at]
        if line.startswith("--- ") and at + 1 < len(lines) and lines[at + 1].startswith("+++ "):
            files.append(_FilePatch(_path_of(line), _path_of(lines[at + 1])))
            at += 2
            continue
        match = _HUNK.match(line)
        if match is None:
            at += 1  # "diff --git", "index ...", a mail's words around the diff
            continue
        if not files:
            raise PatchError(f"line {at + 1} starts a hunk before any '--- file' line")
        old_count = int(match.group(2)) if match.group(2) is not None else 1
        new_count = int(match.group(4)) if match.group(4) is not None else 1
        hunk = _Hunk(int(match.group(1)))
        at += 1
        last = ""
        while at < len(lines):
            body = lines[at]
            if body.startswith("\\"):  # "\ No newline at end of file": of the line before it
                hunk.old_ends_file_without_newline |= last in ("-", " ")
                hunk.new_ends_file_without_newline |= last in ("+", " ")
                at += 1
                continue
            if len(hunk.old) >= old_count and len(hunk.new) >= new_count:
                break
            mark, rest = (body[:1], body[1:]) if body else (" ", "")  # an empty context line lost its space
            if mark == " ":
                hunk.old.append(rest)
                hunk.new.append(rest)
            elif mark == "-":
                hunk.old.append(rest)
            elif mark == "+":
                hunk.new.append(rest)
            else:
                break
            last = mark
            at += 1
        if len(hunk.old) != old_count or len(hunk.new) != new_count:
            raise PatchError(f"the hunk at line {match.group(1)} of {files[-1].new_path} is cut short (it says "
                             f"{old_count} lines before and {new_count} after)")
        files[-1].hunks.append(hunk)
    if not files:
        raise PatchError("no file in it: a unified diff has '--- file', '+++ file' and '@@' lines")
    return files


def _resolve(candidates: list[str], cwd: Path, folder: Path, exists: Callable[[Path], bool]) -> Path | None:
    """The file a diff's path names, as git's a/ b/ prefixes or a path from the run's folder."""
    for name in candidates:
        if name == "/dev/null":
            continue
        path = Path(name)
        options = [path] if path.is_absolute() else [cwd / path, folder / path]
        if not path.is_absolute() and len(path.parts) > 1:
            stripped = Path(*path.parts[1:])  # -p1: "a/train.py"
            options += [cwd / stripped, folder / stripped]
        for option in options:
            if exists(option):
                return Path(os.path.normpath(option))
    return None


def _apply_hunks(text: str, patch: _FilePatch, shown: str) -> str:
    ending = "\r\n" if "\r\n" in text else "\n"
    lines = _lines(text)
    ends_with_newline = text.endswith(("\n", "\r"))
    delta = 0  # how far the hunks before moved the lines (theirs, and where they were found)
    for number, hunk in enumerate(patch.hunks, 1):
        expected = (hunk.start - 1 if hunk.old else hunk.start) + delta
        found = _find(lines, hunk.old, max(expected, 0))
        if found is None:
            raise PatchError(f"{shown}: hunk {number} (at line {hunk.start}) does not apply: its lines are not "
                             "in the file as it was recorded")
        lines[found:found + len(hunk.old)] = hunk.new
        delta += found - expected + len(hunk.new) - len(hunk.old)
        if found + len(hunk.new) == len(lines):  # it reaches the end: the diff says how the file ends
            ends_with_newline = not hunk.new_ends_file_without_newline
    return ending.join(lines) + (ending if lines and ends_with_newline else "")


def _find(lines: list[str], block: list[str], start: int) -> int | None:
    """Where block's lines are, at start or the nearest place to it (an earlier hunk of
    someone else's may have moved them); None if nowhere."""
    if not block:
        return min(start, len(lines))
    for distance in range(len(lines) + 1):
        for at in ((start,) if distance == 0 else (start - distance, start + distance)):
            if 0 <= at <= len(lines) - len(block) and lines[at:at + len(block)] == block:
                return at
        if start - distance < 0 and start + distance > len(lines):
            break
    return None


def patched_texts(patch_text: str, cwd: Path, folder: Path, read: Callable[[Path], str]) -> dict[str, str]:
    """{file: its text with the patch applied} for every file the patch changes, all
    inside `folder` (the script's); `read` gives a file's text as recorded."""
    def exists(path: Path) -> bool:
        return path.is_file()

    texts: dict[str, str] = {}
    for patch in parse(patch_text):
        shown = patch.new_path if patch.new_path != "/dev/null" else patch.old_path
        if patch.new_path == "/dev/null":
            raise PatchError(f"{patch.old_path}: the patch deletes it; --patch proves edits to files, not deletions")
        if patch.old_path == "/dev/null":  # a new file: where the script's folder would hold it
            name = Path(patch.new_path)
            if not name.is_absolute() and len(name.parts) > 1 and name.parts[0] in ("a", "b"):
                name = Path(*name.parts[1:])
            target = Path(os.path.normpath(name if name.is_absolute() else cwd / name))
            text = ""
        else:
            resolved = _resolve([patch.old_path, patch.new_path], cwd, folder, exists)
            if resolved is None:
                raise PatchError(f"{shown}: no such file from {cwd} or {folder}")
            target = resolved
            text = texts.get(str(target)) or read(target)
        if folder != target and folder not in target.parents:
            raise PatchError(f"{shown}: outside the script's folder ({folder}); --patch edits only what --try copies")
        texts[str(target)] = _apply_hunks(text, patch, shown)
    return texts


def edited_copy(path: Path, folder: Path) -> str:
    """The file of the script's folder that an edited copy stands for: the one of the same
    name (the script's own first)."""
    same = [p for p in sorted(folder.rglob(path.name)) if p.is_file() and ".git" not in p.parts]
    if not same:
        raise PatchError(f"{path} is neither a unified diff nor a copy of a file in the script's folder ({folder}) "
                         "by name")
    if len(same) > 1 and not any(p.parent == folder for p in same):
        raise PatchError(f"{path}: {len(same)} files of that name in {folder}; give a unified diff instead")
    return str(next((p for p in same if p.parent == folder), same[0]))
