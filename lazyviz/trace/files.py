"""Trace files: every decision about where one goes (default names, rank folders, the
script's output beside it, numbered names), and owning them safely: what is a lazyviz
trace, claiming a path for a new one (never replacing a user's file, one writer at a
time), and closing one so that a single self-contained file remains.

A claim holds an exclusive `flock` on the trace for the life of the run: a second run
asked to `--force` over a trace that is still being written refuses instead of
destroying it. flock and SQLite's own POSIX locks are independent on Linux.
"""
from __future__ import annotations

import ctypes
import fcntl
import itertools
import os
import sqlite3
import stat
import sys
from collections.abc import Callable
from pathlib import Path

from lazyviz.errors import LazyvizError
from lazyviz.trace.schema import FORMAT

SQLITE_MAGIC = b"SQLite format 3\x00"
# Files that travel with a trace: SQLite's journals, and the script's output in UI mode.
COMPANIONS = ("-wal", "-shm", "-journal", ".out")


def script_stem(target: str) -> str:
    """What a trace is named after: train.py -> "train", -m pkg.train -> "train"."""
    return Path(target).stem if target.endswith(".py") else target.rsplit(".", 1)[-1]


def default_trace_path(target: str) -> Path:
    """`lazyviz run`'s trace without -o: lazyviz-<script>.<pid>.trace here."""
    return Path.cwd() / f"lazyviz-{script_stem(target)}.{os.getpid()}.trace"


def default_rank_folder(target: str) -> Path:
    """Under torchrun without -o: one folder shared by the ranks of one job (they have
    different pids, so the job's id, or their parent's pid, names it)."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    job = run_id if run_id and run_id != "none" and run_id.replace("-", "").isalnum() else str(os.getppid())
    return Path.cwd() / f"lazyviz-{script_stem(target)}.{job}"


def rank_trace(folder: Path, rank: int | str) -> Path:
    return folder / f"rank{rank}.trace"


def launch_folder(trace: Path) -> Path:
    """Where the processes a launcher (torch_xla.launch) started put their rank<R>.trace:
    beside the launching process's trace, named after it."""
    return trace.with_suffix(".ranks") if trace.suffix == ".trace" else Path(f"{trace}.ranks")


def output_path(trace: Path) -> Path:
    """Where the script's own output goes when it is not on the terminal (the live UI,
    torchrun's ranks other than 0): beside the trace, which owns it."""
    return Path(f"{trace}.out")


def free_trace_path(stem: str) -> Path:
    """The API's trace without a path: lazyviz-<stem>.<pid>-<n>.trace here, the first not taken."""
    for n in itertools.count(1):
        path = Path.cwd() / f"lazyviz-{stem}.{os.getpid()}-{n}.trace"
        if not os.path.lexists(path):
            return path
    raise AssertionError("unreachable")


def numbered_path(path: Path, n: int) -> Path:
    """The n-th of a series (a decorated function's calls): path, then path-2, path-3, ..."""
    return path if n == 1 else path.with_name(f"{path.stem}-{n}{path.suffix}")


def new_file(stem: Path, suffix: str) -> Path:
    """stem + suffix, or stem-2 + suffix, ...: the first name not taken."""
    path, number = Path(f"{stem}{suffix}"), 1
    while path.exists():
        number += 1
        path = Path(f"{stem}-{number}{suffix}")
    return path


# Filesystems whose locks and shared memory SQLite's WAL mode cannot trust ("WAL does
# not work over a network filesystem"): statfs's f_type, from linux/magic.h and the
# filesystems' own sources.
NETWORK_FILESYSTEMS = {
    0x6969: "NFS", 0x517B: "SMB", 0xFF534D42: "CIFS", 0xFE534D42: "SMB2", 0x0BD00BD0: "Lustre",
    0x47504653: "GPFS", 0x65735546: "FUSE (sshfs, s3fs, ...)", 0x5346414F: "AFS", 0x00C36400: "CephFS",
    0x01021997: "9P", 0x19830326: "BeeGFS", 0xAAD7AAEA: "PanFS", 0x20030528: "OrangeFS", 0x73757245: "Coda",
}
# LAZYVIZ_JOURNAL=rollback: the network-filesystem mode anywhere (a filesystem not known
# above); =wal: WAL anywhere (a network filesystem you know to be safe, or one host).
JOURNAL_VARIABLE = "LAZYVIZ_JOURNAL"


def filesystem_type(folder: Path) -> int | None:
    """statfs(2)'s f_type of the filesystem holding folder; None where it cannot be read
    (not Linux, or the call failed)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(256)  # struct statfs: f_type is its first field, a long
    if libc.statfs(os.fsencode(folder), buffer) != 0:
        return None
    return ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF


def network_filesystem(folder: Path, statfs: Callable[[Path], int | None] = filesystem_type) -> str | None:
    """The name of the network filesystem holding folder, or None for a local one."""
    magic = statfs(folder)
    return None if magic is None else NETWORK_FILESYSTEMS.get(magic)


def journal_for(path: Path, statfs: Callable[[Path], int | None] = filesystem_type) -> tuple[str, str | None]:
    """The journal a new trace at path uses, and why when it is not WAL: WAL (readers
    never block the writer) on a local disk; a rollback journal on a network filesystem,
    where WAL's shared memory is not shared between hosts and its locks are not kept."""
    asked = os.environ.get(JOURNAL_VARIABLE, "").lower()
    if asked == "wal":
        return "wal", None
    if asked == "rollback":
        return "delete", f"{JOURNAL_VARIABLE}=rollback: the trace uses a rollback journal, not WAL"
    name = network_filesystem(path.parent, statfs)
    if name is None:
        return "wal", None
    return "delete", (f"{path.parent} is on {name}, a network filesystem: the trace uses a rollback journal, "
                      "not WAL (which such filesystems do not support); a live view may wait on the writer's commits")


class TracePathError(LazyvizError):
    """A path lazyviz must not write a trace to; the message is one line for the user."""


def describe(path: Path) -> str:
    """What is at a path, in a user's words (for refusals)."""
    try:
        mode = path.lstat().st_mode
    except OSError:
        return "nothing"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if not stat.S_ISREG(mode):
        return "a device, socket or pipe"
    if is_lazyviz_trace(path):
        return "a lazyviz trace"
    return "a file that is not a lazyviz trace"


def read_only_uri(path: Path, header: bytes) -> str:
    """A read-only SQLite URI for a trace that creates nothing beside it. A trace whose
    header says WAL but that has no -wal or -shm has no writer (one keeps its -wal
    until it closes), and SQLite would create both to read it: read it as immutable.
    So too where the folder is read-only and nobody can be writing."""
    uri = path.resolve().as_uri() + "?mode=ro"  # pathlib's URI: '#', '?', '%' stay in the name
    writer_files = os.path.exists(f"{path}-wal") or os.path.exists(f"{path}-shm")
    says_wal = len(header) >= 20 and 2 in header[18:20]
    if (says_wal and not writer_files) or (not os.access(path.resolve().parent, os.W_OK)
                                           and not os.path.exists(f"{path}-wal")):
        uri += "&immutable=1"
    return uri


def is_lazyviz_trace(path: Path) -> bool:
    """A regular SQLite file whose meta table says it is ours. Reads, never writes."""
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            return False
        with open(path, "rb") as handle:
            header = handle.read(20)
            if header[:len(SQLITE_MAGIC)] != SQLITE_MAGIC:
                return False
        db = sqlite3.connect(read_only_uri(path, header), uri=True)
        try:
            row = db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        finally:
            db.close()
        return row is not None and row[0] == FORMAT
    except (OSError, sqlite3.Error, ValueError):
        return False


class TraceClaim:
    """A new, empty trace file at `path`, created by us and locked while we hold it."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # drops the flock
            self._fd = -1


def claim_trace_path(path: Path, force: bool = False, force_hint: str = "--force") -> TraceClaim:
    """Create an empty trace file at path and lock it. An existing path is refused unless
    force, and even then only a lazyviz trace that no other run holds is replaced.
    force_hint: how the caller's user asks for force ("--force", "force=True")."""
    path = Path(path)
    taken = [Path(f"{path}{suffix}") for suffix in ("", *COMPANIONS) if os.path.lexists(f"{path}{suffix}")]
    if taken:
        what = describe(path) if os.path.lexists(path) else describe(taken[0])
        if not force:
            raise TracePathError(f"{taken[0]} exists ({what}); use {force_hint} to replace a lazyviz trace")
        if not os.path.lexists(path) or not is_lazyviz_trace(path):
            raise TracePathError(f"{taken[0]} is {what}: lazyviz replaces only its own traces, even with {force_hint}")
        _refuse_if_locked(path)
        for old in taken:
            old.unlink(missing_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
    except FileExistsError:
        raise TracePathError(f"{path} appeared while lazyviz was starting (another run?); not touching it") from None
    except OSError as error:
        raise TracePathError(f"cannot create {path}: {error.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise TracePathError(f"{path} is held by another lazyviz run") from None
    return TraceClaim(path, fd)


def _refuse_if_locked(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise TracePathError(f"cannot open {path}: {error.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise TracePathError(f"{path} is being written by another lazyviz run; not replacing it") from None
    finally:
        os.close(fd)


def held_apart(path: Path) -> str | None:
    """One line naming the files that hold a trace whose WAL could not be folded back
    (a full disk at its last checkpoint); None when the trace is one file."""
    held = [f"{path.name}{suffix}" for suffix in ("-wal", "-shm") if os.path.exists(f"{path}{suffix}")]
    if not any(name.endswith("-wal") for name in held):
        return None
    return (f"lazyviz: the trace is {path} with {' and '.join(held)} beside it: keep them together (the file "
            f"alone is damaged); `lazyviz report {path}` folds them into one file once the disk has room")


def fold_wal(path: Path) -> None:
    """Fold a finished trace's WAL back into the file (a run whose disk filled, whose
    last checkpoint had no room): only when no run holds it and its folder is writable.
    Best effort, silent: the reader reads the WAL either way."""
    if not os.path.exists(f"{path}-wal") or not os.access(path.parent, os.W_OK):
        return
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a writer holds it while it runs
    except OSError:
        os.close(fd)
        return
    try:
        finish_trace(path, {})
    finally:
        os.close(fd)


def add_run_fields(path: Path, fields: dict[str, str]) -> str | None:
    """Run fields learned after the run (`lazyviz fix --try`'s measurement), written into
    a finished trace lazyviz made. Best effort: returns the problem, if any."""
    try:
        db = sqlite3.connect(path, isolation_level=None, timeout=2.0)
    except (OSError, sqlite3.Error) as error:
        return str(error)
    try:
        _store_run_fields(db, fields)
        return None
    except sqlite3.Error as error:
        return str(error)
    finally:
        db.close()


def _store_run_fields(db: sqlite3.Connection, fields: dict[str, str]) -> None:
    db.execute("BEGIN IMMEDIATE")
    db.executemany("INSERT OR REPLACE INTO run VALUES (?, ?)", list(fields.items()))
    db.execute("COMMIT")


def finish_trace(path: Path, fields: dict[str, str]) -> str | None:
    """After the traced process ended: record what only the parent saw (how it ended)
    where the process could not, and fold the WAL into the file so one self-contained
    file remains. An empty file (the process never started its trace) is removed: we
    created it. Best effort: returns the problem, if any, for the summary."""
    try:
        if path.stat().st_size == 0 and not os.path.exists(f"{path}-wal"):
            path.unlink()
            return "the traced process wrote nothing"
        db = sqlite3.connect(path, isolation_level=None, timeout=2.0)
    except (OSError, sqlite3.Error) as error:
        return str(error)
    try:
        ended = db.execute("SELECT 1 FROM run WHERE key = 'exit_status'").fetchone()
        if fields and ended is None:
            _store_run_fields(db, fields)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("PRAGMA journal_mode=DELETE")
        return None
    except sqlite3.Error as error:
        return str(error)
    finally:
        db.close()
