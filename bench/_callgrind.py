"""Counting instructions with valgrind's callgrind, only in the part a bench measures: a
small C library whose one call turns collection on (zeroing the counts) or off (dumping
them, labelled). The measured process loads it from $LAZYVIZ_BENCH_COLLECT."""
from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

LABEL = "measured"
COLLECT_C = f"""#include <valgrind/callgrind.h>
void lazyviz_bench_collect(int on) {{
  if (on) {{ CALLGRIND_ZERO_STATS; CALLGRIND_TOGGLE_COLLECT; }}
  else {{ CALLGRIND_TOGGLE_COLLECT; CALLGRIND_DUMP_STATS_AT("{LABEL}"); }}
}}
"""


KEEP_HELP = "keep callgrind's files in this new folder (for callgrind_annotate)"


@contextlib.contextmanager
def files_folder(keep: str | None) -> Iterator[Path]:
    """Where a bench's callgrind files go: a temporary folder, or `keep` (a new folder the
    bench makes, never one already there) to read them after with callgrind_annotate."""
    if keep is None:
        with tempfile.TemporaryDirectory() as name:
            yield Path(name)
        return
    folder = Path(keep)
    try:
        folder.mkdir(parents=True)
    except FileExistsError:
        sys.exit(f"bench: {folder} already exists: --keep makes a new folder")
    yield folder


def build(folder: Path) -> Path:
    """The collection switch, built in folder; exits where valgrind or a compiler is missing."""
    if shutil.which("valgrind") is None or shutil.which("cc") is None:
        sys.exit("bench: --instructions needs valgrind and a C compiler (apt-get install valgrind gcc)")
    (folder / "collect.c").write_text(COLLECT_C)
    library = folder / "libcollect.so"
    built = subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(library), str(folder / "collect.c")],
                           capture_output=True, text=True)
    if built.returncode != 0:
        sys.exit(f"bench: cannot build the collection switch (valgrind's headers?):\n{built.stderr}")
    return library


def switch() -> Callable[[int], None] | None:
    """In the measured process: the switch, where the bench runs it under callgrind."""
    path = os.environ.get("LAZYVIZ_BENCH_COLLECT")
    return ctypes.CDLL(path).lazyviz_bench_collect if path else None


def count(command: list[str], library: Path, out: Path, done: str) -> tuple[int, str]:
    """Run command under callgrind (its children followed); the instructions the thread
    that switched collection on ran in the last part it measured (a process may switch
    it on and off more than once: a warm-up first). Other threads are not counted: their
    collection stays off (lazyviz's writer: bench/cpu_per_step.py measures it). done: what
    its stdout says once it measured. Returns the count and that stdout."""
    out.mkdir()
    result = subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no", "--separate-threads=yes",
                             "--trace-children=yes", f"--callgrind-out-file={out}/%p.out", *command],
                            capture_output=True, text=True, env={**os.environ, "LAZYVIZ_BENCH_COLLECT": str(library)})
    if result.returncode != 0 or done not in result.stdout:
        sys.exit(f"bench: {' '.join(command[:4])} ... under callgrind failed:\n{result.stderr[-3000:]}")
    parts = []
    for dump in out.iterdir():
        text = dump.read_text(errors="replace")
        if f"Trigger: Client Request: {LABEL}" not in text:
            continue
        part, summary = re.search(r"^part: (\d+)", text, re.MULTILINE), re.search(r"^summary: (\d+)", text, re.MULTILINE)
        parts.append((int(part.group(1)) if part else 0, int(summary.group(1)) if summary else 0))
    if not parts:
        sys.exit(f"bench: {' '.join(command[:4])} ... measured nothing under callgrind")
    return max(parts)[1], result.stdout
