"""What XlaBackend reads XLA's files and texts with: the settings it makes, the tail
of a file XLA appends to, the HLO dump, a steady sync's record, and the helpers that
name a report's call and line."""
from __future__ import annotations

import contextlib
import importlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

from lazyviz.backends.xla_reports import hlo_signature

# The settings lazyviz makes for XLA's reports (_set_up_reports): taken back for the
# processes a launcher starts (children_untraced).
OUR_SETTINGS = ("PT_XLA_DEBUG_FILE", "PT_XLA_DEBUG_LEVEL", "PT_XLA_DEBUG_MAX_FRAME", "XLA_IR_DEBUG",
                "XLA_SAVE_TENSORS_FILE", "XLA_SAVE_TENSORS_FMT", "XLA_FLAGS")


def framework(package: str, submodule: str = "") -> ModuleType:
    """A module of the torch_xla family: `package` is torch_xla, or a fork that keeps its
    API under a name of its own (its `_XLAC`, `core.xla_model`, `debug.metrics`, ...)."""
    return importlib.import_module(f"{package}.{submodule}" if submodule else package)


def launchers(package: str) -> list[tuple[object, str, str]]:
    """The calls that start processes running the graphs: (owner, attribute, label)."""
    xmp = framework(package, "distributed.xla_multiprocessing")
    return [(framework(package), "launch", f"{package}.launch()"), (xmp, "spawn", "xmp.spawn()")]

_FRAME_LINE = re.compile(r"^[\w ]+Analysis:\s+\S.*? \((.+):\d+\)$")  # "...Analysis:   fn (file:line)"


class Tail:
    """Reads what a file gained since the last read; the file may not exist yet. A
    user's file XLA appends to is read from where it ended when tracing began. One
    read(2) a poll where the file grew by less than the buffer (a text file object
    reads twice to find the end)."""

    # os.read allocates its whole buffer first: under glibc's mmap threshold (128 KiB)
    # it comes from the heap. A sync adds ~700 bytes: a read after it cost 9.4 us with a
    # 1 MiB buffer and 5.5 us with 64 KiB, in a traced loop.
    _CHUNK = 1 << 16

    def __init__(self, path: Path, start: int = 0) -> None:
        self.path = path
        self._fd: int | None = None
        self._partial = b""
        self._back = b""  # read by lazyviz's hook, handed back (put_back): read first
        self._start = start

    @classmethod
    def from_end(cls, path: Path) -> Tail:
        try:
            return cls(path, path.stat().st_size)
        except OSError:
            return cls(path)

    def read(self) -> str:
        if self._fd is None:
            try:
                # Held open across polls to read only what was appended; closed in close().
                self._fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return ""
            os.lseek(self._fd, self._start, os.SEEK_SET)
        data = os.read(self._fd, self._CHUNK)
        if len(data) == self._CHUNK or self._partial or self._back:
            chunks = [self._partial, self._back, data]
            while len(chunks[-1]) == self._CHUNK:
                chunks.append(os.read(self._fd, self._CHUNK))
            data = b"".join(chunks)
            self._back = b""
        # Keep an unfinished last line for the next read (a newline is never inside a
        # character's bytes).
        cut = data.rfind(b"\n") + 1
        self._partial = data[cut:]
        return data[:cut].decode("utf-8", errors="replace")

    def put_back(self, data: bytes) -> None:
        """What lazyviz's hook read from the descriptor and did not take: the next read's start."""
        self._back += data

    def descriptor(self) -> int | None:
        """The descriptor, where everything read from it so far was taken (whole lines, none
        handed back): another reader may go on from there."""
        return self._fd if not self._partial and not self._back else None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class Steady(NamedTuple):
    """A loop's steady sync, as a poll that read its report text handed it on: the sync
    cause it ran under, the repeated row's site (report, cause, detail, key) and the
    counters that moved with it."""

    cause: str | None
    detail: str | None
    site: tuple
    moved: dict[str, int]
    stack: int = 0  # the Python stack XLA wrote it from, as the hook knows it (0: not known)


_OP_TYPE = re.compile(r'op_type="([^"]+)"')  # HLO metadata: the IR op an instruction lowers, "aten__mul"
_IR_OP = re.compile(r" ([\w.]+::[\w.]+)\(")  # "%3 = f32[2]{0} aten::mul(%1, %2)"


class HloDump:
    """XLA's compiler dump (XLA_FLAGS --xla_dump_to): for each graph it
    compiles, a module's HLO before and after XLA's optimizations, in files named
    module_0007.SyncTensorsGraph.123.*. A module is matched with a Compilation Analysis
    by its entry's parameter and output counts (XLA's "Number of Graph Inputs/Outputs"),
    in the order XLA compiled them, and with the graph's IR where it is known: every op
    its HLO lowers must be one of the IR's. On CPU XLA also writes each kernel's LLVM IR
    and object code, hundreds of files a compile: a module's files go once it is read,
    with the modules before it that nothing claimed (a thread per device excepted: there
    another thread's module may be mid-compile)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._signatures: dict[str, tuple[int, int]] = {}  # "module_0007" -> (inputs, outputs)
        # Each node's line as its reference (source_line=1000000007) where lazyviz's getter
        # gave nodes theirs (the hook's decode_locations); as it is else.
        self.decode: Callable[[str], str] = str

    def take(self, counts: tuple[int, int] | None, ir_text: str, compiled: bool, sweep: bool) -> tuple[str, str]:
        """The HLO XLA compiled for this graph (before its optimizations where compiling
        failed), with a line that says which, and the module before XLA's optimizations
        (the graph where no IR is recorded); ("", "") where no module fits. Without counts
        (a graph XLA wrote no analysis for) its IR tells, else the first module nothing
        claimed: a graph with a report is handed on before those without."""
        self._scan()
        for module in sorted(self._signatures):
            if counts in (None, self._signatures[module]) and self._lowers(module, ir_text):
                break
        else:
            return "", ""
        after = next(self.folder.glob(f"{module}.*after_optimizations.txt"), None)
        before = next(self.folder.glob(f"{module}.*before_optimizations.txt"), None)
        try:
            before_text = before.read_text(encoding="utf-8", errors="replace") if before else ""
            if after and compiled:
                text = after.read_text(encoding="utf-8", errors="replace")
                head = "# the HLO XLA compiled, after its optimizations"
            else:
                text, head = before_text, "# the HLO of the graph, before XLA's optimizations"
        except OSError:
            text, before_text = "", ""
        text, before_text = self.decode(text), self.decode(before_text)
        self._remove(module, sweep)
        return (f"{head}\n{text}" if text else ""), before_text

    def _lowers(self, module: str, ir_text: str) -> bool:
        before = next(self.folder.glob(f"{module}.*before_optimizations.txt"), None)
        if not ir_text or before is None:
            return True
        try:
            lowered = {op.replace("__", "::", 1) for op in _OP_TYPE.findall(before.read_text(errors="replace"))}
        except OSError:
            return False
        return lowered <= set(_IR_OP.findall(ir_text))

    def _scan(self) -> None:
        for path in self.folder.glob("module_*.before_optimizations.txt"):
            module = path.name.split(".", 1)[0]
            if module not in self._signatures:
                try:
                    with open(path, encoding="utf-8", errors="replace") as lines:
                        signature = hlo_signature(lines)
                except OSError:
                    continue
                if signature is not None:  # else not all written yet: read again next time
                    self._signatures[module] = signature

    def _remove(self, module: str, sweep: bool) -> None:
        """This module's files; with sweep, those of every module before it too."""
        for path in self.folder.glob("module_*" if sweep else f"{module}.*"):
            name = path.name.split(".", 1)[0]
            if name == module or (sweep and name < module):
                self._signatures.pop(name, None)
                with contextlib.suppress(OSError):
                    path.unlink()


_LAZYVIZ_DIR = str(Path(__file__).resolve().parents[1])


def echoed(text: str, level: int) -> str:
    """Of what XLA wrote to lazyviz's analysis file, what it would have printed on
    stderr at the user's level: an unexpected execution inside a compiled function
    always, everything but the execution analyses from 1, all from 2; without the
    frames of lazyviz's sync-site wrappers and runner, which untraced are not there."""
    lines = []
    dropped = False  # frames of ours in this block: XLA's "too many frames" mark is ours too
    blank = ""  # a blank line goes with the block after it
    for line in text.splitlines(keepends=True):
        if not line.strip():
            blank = line
            continue
        if level < 1 and not line.startswith("Unexpected Execution Analysis: "):
            blank = ""
            continue
        if level < 2 and line.startswith("Execution Analysis: "):
            blank = ""
            continue
        lines.append(blank)
        blank = ""
        frame = _FRAME_LINE.match(line)
        if frame and (frame.group(1).startswith(_LAZYVIZ_DIR) or frame.group(1) == "<frozen runpy>"):
            dropped = True
            continue
        if line.rstrip().endswith(" .........."):
            if dropped:
                continue
        elif not frame:
            dropped = False
        lines.append(line)
    return "".join(lines)


