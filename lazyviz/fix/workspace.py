"""Where a trial's sides run: a copy of the script's folder (never the user's files), set
beside mirrors of what it reads above that folder, so that its paths relative to where
the user ran it reach the same files (pytorch/examples read `../data`, PyTorch-GAN
`../../data/mnist`), and the copy's lines mapped back to the original's through the edits
(a crash is compared by the statement that raised, not by a line number an edit moved)."""
from __future__ import annotations

import ast
import difflib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePath

from lazyviz.errors import LazyvizError
from lazyviz.trace.model import RunInfo

MAX_COPY_BYTES = 1 << 30  # a folder bigger than this is not copied: say so instead
SKIPPED = shutil.ignore_patterns(".git", "__pycache__", "*.trace", "*.trace-wal", "*.trace-shm", "*.trace.out",
                                 ".venv*", "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache")
# Paths above the copied folder are reached at most this many levels up (`../../data`).
MAX_LEVELS_UP = 3
# Links made for one path at most; past it a folder is linked whole (its files read the
# same, but a file the script creates there lands in the user's folder, not the copy's).
MAX_LINKS = 20_000


@contextmanager
def work_folder(keep: bool = False) -> Iterator[Path]:
    """A temporary folder for a trial's copies and traces: removed after, unless kept."""
    work = Path(tempfile.mkdtemp(prefix="lazyviz-fix-"))
    try:
        yield work
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def copy_root(info: RunInfo, files: list[str]) -> Path:
    """The folder to copy: the script's, or the one holding it and every patched file."""
    # A module (-m) is found from the folder it was run in: that folder is the project.
    start = Path(info.cwd) if info.module else Path(info.cwd, info.script).resolve().parent
    folders = [str(start), *(os.path.dirname(f) for f in files)]
    return Path(os.path.commonpath(folders))


def _size(folder: Path, limit: int) -> int:
    total = 0
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not SKIPPED(root, [d])]
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
            if total > limit:
                return total
    return total


def paths_above(root: Path, cwd: Path, argv: Sequence[str]) -> list[Path]:
    """What the script may read above the copied folder: each relative path that climbs out
    of it (`'../data'` in its source, an argparse default, `--data ../data` on its command
    line), resolved from where the user ran it, by its first entry outside the folder
    (`../data/wikitext-2` -> the folder's sibling `data`). Only those are mirrored."""
    texts = [*argv, *(part for arg in argv for part in arg.split("=")[1:])]
    for file in sorted(root.rglob("*.py"))[:500]:
        try:
            tree = ast.parse(file.read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue
        texts += [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    found: dict[Path, None] = {}
    for text in texts:
        if not text.startswith(".." + os.sep) or len(text) > 4096 or "\n" in text:
            continue
        target = Path(os.path.normpath(cwd / text))
        if target == root or root in target.parents or len(PurePath(text).parts) - 1 > MAX_LEVELS_UP + 4:
            continue
        top = Path(os.path.commonpath([root, target]))
        if len(root.relative_to(top).parts) > MAX_LEVELS_UP or top == Path(top.anchor):
            continue
        entry = top / target.relative_to(top).parts[0]
        if entry.exists():
            found[entry] = None
    return list(found)


def make_copy(root: Path, into: Path, above: Sequence[Path] = ()) -> Path:
    """`root` copied under `into`, at the same place under the folder it shares with the
    paths `above` it the script reads (`into/examples/word_language_model` beside
    `into/examples/data`), each of those a folder of links to the user's files: reads
    reach the same data, and a file the script creates there lands in the mirror.
    Returns the copy."""
    if _size(root, MAX_COPY_BYTES) > MAX_COPY_BYTES:
        raise LazyvizError(f"{root} holds more than {MAX_COPY_BYTES >> 20} MB: --try copies the script's folder; "
                           "move the script to a smaller folder, or apply the diff to a copy by hand")
    top = Path(os.path.commonpath([root, *above])) if above else root
    copy = into.joinpath(top.name, root.relative_to(top)) if top != root else into / root.name
    shutil.copytree(root, copy, symlinks=True, ignore=SKIPPED)
    for entry in above:
        target = into.joinpath(top.name, entry.relative_to(top))
        target.parent.mkdir(parents=True, exist_ok=True)
        _link(entry, target, [MAX_LINKS])
    return copy


def _entries(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except OSError:
        return []


def _link(source: Path, target: Path, budget: list[int]) -> None:
    """A folder as a real folder of links (while the budget lasts), anything else as a link."""
    if target.exists() or target.is_symlink():
        return
    if budget[0] <= 0 or source.is_symlink() or not source.is_dir():
        budget[0] -= 1
        try:
            target.symlink_to(source, target_is_directory=source.is_dir())
        except OSError:
            pass
        return
    try:
        target.mkdir()
    except OSError:
        return
    for entry in _entries(source):
        _link(entry, target / entry.name, budget)


def in_copy(path: Path, root: Path, copy: Path) -> Path:
    return copy / path.relative_to(root)


def import_root(file: Path, top: Path) -> Path:
    """The folder a module is imported from: the one above its package's folders (each
    with an __init__.py), never above `top`."""
    folder = file.parent
    while folder != top and top in folder.parents and (folder / "__init__.py").exists():
        folder = folder.parent
    return folder


def import_path(copy: Path, edited: Sequence[str], script_folder: Path) -> str:
    """PYTHONPATH for a copy's run: the copy's import roots of the edited modules first.
    A package the user installed with `pip install -e .` (minGPT's `mingpt`), or reached
    through their PYTHONPATH, is imported from their folder, not the copy: without this
    the copy's run ran the original's code and the edit was never tried."""
    roots = dict.fromkeys(import_root(copy / name, copy) for name in edited if name.endswith(".py"))
    roots.pop(script_folder, None)  # the script's own folder is sys.path[0] already
    given = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join([*map(str, roots), *([given] if given else [])])


def original_line(original: str, patched: str, line: int) -> int | None:
    """The original's line for a line of the patched text: the same statement where the
    edit kept it or rewrote it in place (a call wrapped on its line), None for a line the
    edit added (its helper, an import)."""
    matcher = difflib.SequenceMatcher(None, original.splitlines(), patched.splitlines(), autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if j1 <= line - 1 < j2:
            if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
                return i1 + line - j1
            return None
    return None
