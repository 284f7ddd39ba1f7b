"""PyTorch/XLA (`torch_xla`, device `xla`), read through XLA's own debug reports.

torch_xla runs graphs through its own executor, not torch's backend registry, so
the TorchScript hook cannot see them. Instead lazyviz turns on what XLA already
writes and reads it at every sync site (checked on torch_xla 2.9):

- `PT_XLA_DEBUG_LEVEL=2` with `PT_XLA_DEBUG_FILE`: one "Execution Analysis" per
  execution and one "Compilation Analysis" per compile, each with the graph hash and
  the Python frames that triggered it. Cheap: no IR is formatted.
- both take the compiler's dump (`XLA_FLAGS=--xla_dump_to`): each compiled graph's HLO,
  written once per compile.
- full capture writes each graph's IR from that HLO (`hlo_as_ir`), and turns XLA_IR_DEBUG
  on with lazyviz's frame getter, so the HLO's metadata names the user's line of each op.
  Where the HLO cannot be had (the user's own --xla_dump_to, a process a launcher
  started), it reads XLA's IR dump instead (`XLA_SAVE_TENSORS_FILE`, formatted at every
  sync: 3x slower), as it does the user's own dump where they set one.
- `CompileTime` and `ExecuteTime` metrics carry one sample per compile and per
  execution. Execution is asynchronous: an execute time usually arrives at the next
  poll and is filled in then.
- a loop's steady sync (the same analysis text once more, one more cache hit, the same
  counters moved) is polled and handed on by lazyviz's C++ hook where it loads
  (hook/xla_steady.h); the polls here settle what it handed on, and arm it again.

XLA reads these settings when it first needs them (at import for XLA_IR_DEBUG), so
`init()` sets them up before torch_xla is imported; or, in a process a launcher started
(torch_xla.launch imported torch_xla and started the runtime there), before its first graph.
"""
from __future__ import annotations

import contextlib
import functools
import linecache
import math
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator, MutableMapping, MutableSequence
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

from lazyviz.backends import (
    BackendError,
    CodeClassifier,
    CompiledGraph,
    ExecuteTimeHook,
    ExecutionHook,
    LazyBackend,
    SyncCause,
    SyncSite,
    device_flag,
)
from lazyviz.backends._sites import collective_sites, tensor_sync_sites
from lazyviz.backends.ts import REPEATED_ROW, load_hook
from lazyviz.backends.xla_reports import GraphDumpParser, Report, ReportParser, hlo_entry_size, hlo_signature
from lazyviz.hlo_text import hlo_as_ir

# The settings lazyviz makes for XLA's reports (_set_up_reports): taken back for the
# processes a launcher starts (children_untraced).
OUR_SETTINGS = ("PT_XLA_DEBUG_FILE", "PT_XLA_DEBUG_LEVEL", "PT_XLA_DEBUG_MAX_FRAME", "XLA_IR_DEBUG",
                "XLA_SAVE_TENSORS_FILE", "XLA_SAVE_TENSORS_FMT", "XLA_FLAGS")
# The frames an analysis of lazyviz's own names: XLA's 8 end inside the library where a
# library syncs (transformers' mask code, 10-20 frames below the user's `model(ids)`).
_ANALYSIS_FRAMES = "256"


def launchers() -> list[tuple[object, str, str]]:
    """The calls that start processes running the graphs: (owner, attribute, label)."""
    import torch_xla
    import torch_xla.distributed.xla_multiprocessing as xmp

    return [(torch_xla, "launch", "torch_xla.launch()"), (xmp, "spawn", "xmp.spawn()")]

_NS_PER_MS = 1e6
# XLA's metric of the bytes of each host<->device copy -> lazyviz's names for how many
# copies and how many bytes. Each copy adds one sample (PJRT and IFRT clients, beside
# one to TransferTo/FromDeviceTime, which a failed copy adds alone), so one metric
# gives both. Reading a metric converts the last 1,024 samples it keeps: 35 us a read.
_TRANSFER_METRICS = (("OutboundData", "TransferToDevice", "TransferToDeviceBytes"),
                     ("InboundData", "TransferFromDevice", "TransferFromDeviceBytes"))
_TRANSFER_NAMES = tuple(name for _metric, *names in _TRANSFER_METRICS for name in names)
# XLA counts these on the device's thread once a graph has run, so a poll right after a
# sync may or may not see its graph's: read with the copies (full capture), not at each
# execution, where they made a loop's every sync look different from the last.
_RAN_NAMES = ("ExecuteComputation", "ExecuteReplicated", "CreateDataHandles")
_READ_EACH_SECOND = (*_TRANSFER_NAMES, *_RAN_NAMES)
_EXECUTE_READ_S = 0.05  # XLA's execute times are read at most this often (see _execute_times_due)
_AWAITING_MOST = 256  # or once this many executions wait for theirs
_TRANSFERS_READ_S = 1.0  # and its copies' metrics and its counters' names (full capture; see _all_counters)
_STEADY_KEPT = 64  # report texts kept as steady syncs (a loop has a few)
_MAX_REPEATS = 100_000  # sites whose hits repeat a row (_report_execution); more take the slow path
_HOST_READ = "trying to access tensor value"  # XLA's cause for a sync that reads values on the host
_FRAME_LINE = re.compile(r"^[\w ]+Analysis:\s+\S.*? \((.+):\d+\)$")  # "...Analysis:   fn (file:line)"


class _Tail:
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
    def from_end(cls, path: Path) -> _Tail:
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


class _Steady(NamedTuple):
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


class _HloDump:
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


def _device_contexts(xm: ModuleType) -> dict | None:
    """Where torch_xla 2.9 keeps each device's step closures (xm._run_step_closures runs
    those of the thread's device); None where it keeps them elsewhere."""
    contexts = getattr(xm, "_DEVICE_CONTEXTS", None)
    return contexts if isinstance(contexts, dict) else None


def _closures_waiting(xm: ModuleType) -> Callable[[], bool] | None:
    """Whether any device's step closures wait to run. None where torch_xla keeps them
    elsewhere: the tracer then takes it that some always wait."""
    contexts = _device_contexts(xm)
    if contexts is None:
        return None

    def waiting() -> bool:
        return any(getattr(context, "step_closures", None) or getattr(context, "async_step_closures", None)
                   for context in list(contexts.values()))

    return waiting


def _runs_here(launcher: str, args: tuple, kwargs: dict) -> bool:
    """Whether a launcher call runs the function in the calling process (torch_xla 2.9):
    `launch(fn, args, start_method, debug_single_process)` with debug_single_process or
    under torchrun, `xmp.spawn(fn, args, nprocs, ...)` with nprocs=1."""
    if launcher == "torch_xla.launch()":
        import torch.distributed as dist

        return bool(kwargs.get("debug_single_process", args[3] if len(args) > 3 else False)) \
            or dist.is_torchelastic_launched()
    return kwargs.get("nprocs", args[2] if len(args) > 2 else None) == 1


def _set_environment(values: dict[str, str | None]) -> None:
    """Set each variable (None: unset it)."""
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _debug_level(env: MutableMapping[str, str]) -> int:
    """PT_XLA_DEBUG_LEVEL as XLA reads it: PT_XLA_DEBUG=1 alone means every level."""
    try:
        level = int(env.get("PT_XLA_DEBUG_LEVEL", "-1"))
    except ValueError:
        level = -1
    if level == -1:
        return 100 if env.get("PT_XLA_DEBUG", "").lower() in ("1", "true", "yes") else 0
    return level


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


def _count(report: Report, what: str) -> int:
    """XLA's "Number of Graph Inputs/Outputs" of a graph it compiled; -1 if it gave none."""
    try:
        return int(report.field(f"Number of Graph {what}"))
    except ValueError:
        return -1


def _read_call(frames: list[tuple[str, int, str]]) -> str:
    """What read values on the host at the user's line XLA names: `.to(...)` where the
    line says so (the one such call lazyviz does not wrap), else a read in general."""
    for file, line, _function in frames:
        if not file.startswith(_LAZYVIZ_DIR) and "site-packages" not in file:
            return "Tensor.to()" if ".to(" in linecache.getline(file, line) else "a read of tensor values"
    return "a read of tensor values"


def _user_line(frames: list[tuple[str, int, str]]) -> tuple[str, int] | None:
    """The innermost line outside the frameworks and lazyviz of XLA's report's frames."""
    return next(((file, line) for file, line, _ in frames
                 if not file.startswith(_LAZYVIZ_DIR) and "site-packages" not in file), None)


def _on_this_thread(user: tuple[str, int] | None) -> bool:
    """Is this line on this thread's stack now?"""
    frame = sys._getframe(1)
    while frame is not None:
        if (frame.f_code.co_filename, frame.f_lineno) == user:
            return True
        frame = frame.f_back
    return user is None


class XlaBackend(LazyBackend):
    name = "xla"
    device = "xla"
    polls = True
    names = {"mark_step": "torch_xla.sync()", "step_closure": "xm.add_step_closure"}
    empty_sync_ends_step = False
    one_trace_per_process = True

    def __init__(self, capture_ir: bool = True) -> None:
        super().__init__(capture_ir)
        self._folder = Path(tempfile.mkdtemp(prefix="lazyviz-xla-"))
        self._on_execution: ExecutionHook | None = None
        self._on_execute_time: ExecuteTimeHook | None = None
        self._enabled = False
        self._reports = _Tail(self._folder / "analysis.txt")
        self._graphs: _Tail | None = None
        self._dump: Path | None = None  # the tensors dump lazyviz reads (full capture)
        self._hlo: _HloDump | None = None  # the compiler's dump of each graph's HLO
        self._ir_from_hlo = False  # full capture: each graph's IR written from its HLO (hlo_as_ir)
        self._lines_hook: ModuleType | None = None  # lazyviz's hook, for its frame getter
        self._echo: int | None = None  # the user's debug level, when lazyviz prints XLA's analyses on stderr
        self._notes: list[str] = []  # how the user's own XLA debug output differs from untraced
        self._users_settings: dict[str, str | None] = {}  # what lazyviz changed in the environment: the user's values
        self._user_ir_debug = False
        self._dump_sizes: dict[Path, int] = {}
        self._report_parser = ReportParser()
        self._graph_parser = GraphDumpParser()
        self._pending: deque[Report] = deque()  # execution reports not yet handed on
        self._compiles: deque[Report] = deque()  # compile reports awaiting their execution
        self._ir: dict[str, str] = {}  # graph hash -> IR text, from the tensors dump
        self._compile_ms: deque[float] = deque()
        self._compile_samples = 0
        self._execute_samples = 0
        self._awaiting_execute: deque[int] = deque()  # executions without an execute time yet
        self._execute_read_at = 0.0  # perf_counter() of the last read of ExecuteTime
        self._transfers_read_at = 0.0  # and of the copies' metrics
        self._counters: dict[str, int] = {}
        self._counter_value: Callable[[str], int | None] = lambda name: 0  # XLA's, from install_hook
        self._fallback_ops: list[str] = []  # XLA's counters of the ops that fell back, as last listed
        self._counter_names: list[str] = []  # and all its counters (full capture), as last listed
        self._last_index: int | None = None  # the last execution handed on
        # Executions and compiles as XLA counts them (CachedCompile + UncachedCompile, one
        # per execution; UncachedCompile): more than its reports say are frameless ones.
        self._executed = 0
        self._compiled = 0
        self._compile_reports = 0  # Compilation Analyses read, and those handed on
        self._compile_reports_seen = 0
        self._frameless_seen = 0
        self._frameless_graphs: dict[tuple, str] = {}  # light capture: Python stack -> graph last compiled there
        self._last_compile: Report | None = None  # the last compile report, until an execution follows it
        self._unexpected: Report | None = None  # a sync inside torch_xla.compile(full_graph=True)
        # Threads that sync (a launcher's thread per device) poll one at a time: the reports
        # and counters are the process's.
        self._polling = threading.RLock()
        self._sync = SyncCause()  # the sync-site call running on each thread, as the tracer's wrappers set it
        self._line_causes: dict[tuple[str, int] | None, tuple[str, str | None]] = {}  # a thread per device: by line
        # Repeated rows (record_repeats): a cache hit the tracer has seen from the same
        # report, cause and graph, with the same counters moving, is a row appended here.
        self._repeats: dict[tuple, tuple[int, dict[str, int]]] | None = None  # site -> (kind, counters moved)
        self._rows: list[list] = []  # ROW_FIELDS, a list while its execute time may still come
        self._row_at: dict[int, list] = {}  # index -> its row, until the writer takes it
        self._rows_lock = threading.Lock()  # the writer's thread takes the rows
        self._shared_counts: MutableSequence[int] = [0, 0]  # the tracer's [executions, steps]
        self._started = 0.0
        self._last_end: float | None = None  # the previous execution's end, on the tracer's clock
        self._after_fallback = False  # the last row the tracer made was a fallback's: no repeats
        # A loop's steady syncs (_Steady) by the report text a poll read: one report, a
        # cache hit. A poll that reads the same text again, sees one more lookup of XLA's
        # and the same counters move, hands it on as the same row without the parser. By
        # text: a decode loop alternates a sync's report with a read's.
        self._steady: dict[str, _Steady] = {}
        self._handed: _Steady | None = None  # what _hand_on last handed on that could repeat
        self._counters_read: dict[str, int] | None = None  # read by a steady check that failed: the poll's
        # lazyviz's hook (its C part), where it loads: between two polls here, it hands
        # the steady syncs on itself (hook/xla_steady.h); each poll here first settles
        # what it handed on (_settle), and arms it again after (_arm).
        self._hook: ModuleType | BackendError | None = None  # loaded, or why not
        self._fast: ModuleType | None = None
        self._fast_texts: dict[str, _Steady] = {}  # the _steady texts it has, as it has them
        self._fast_tried = -1  # the size of _repeats when the texts it lacks were last tried
        self._steady_changed = False  # a text of _steady handed on anew since

    # -- set-up -------------------------------------------------------------------
    def init(self) -> None:
        # As XLA reads it: "true", or a number other than 0.
        value = os.environ.get("XLA_IR_DEBUG", "")
        self._user_ir_debug = value == "true" or (value.lstrip("-").isdigit() and int(value) != 0)
        imported = "torch_xla" in sys.modules
        if imported and not self.after_launch:
            shutil.rmtree(self._folder, ignore_errors=True)
            raise BackendError("torch_xla was imported before lazyviz could set XLA's debug reports up")
        if imported and any(self._xla_counts()):
            shutil.rmtree(self._folder, ignore_errors=True)
            raise BackendError("this process ran XLA graphs before lazyviz could set XLA's debug reports up")
        self._set_up_reports(os.environ)
        try:
            import torch_xla
            import torch_xla.debug.metrics
        except ImportError as error:
            shutil.rmtree(self._folder, ignore_errors=True)  # nothing will read it
            raise BackendError(
                f"cannot import torch_xla ({error}); install torch and torch-xla of the same "
                "version, e.g. pip install torch==2.9.0 torch-xla==2.9.0"
            ) from None
        if imported and self.capture_ir and "XLA_IR_DEBUG" in self._users_settings:
            # XLA_IR_DEBUG, set by lazyviz, is read at import: turned on where XLA reads it since.
            torch_xla._XLAC._set_ir_debug(True)

    def _set_up_reports(self, env: MutableMapping[str, str]) -> None:
        """Turn on the reports lazyviz reads, keeping what the user asked XLA for: their
        analysis file and tensors dump are read where they are (and stay theirs); the
        analyses their level would print on stderr are passed on to stderr."""
        before = {name: env.get(name) for name in OUR_SETTINGS}
        try:
            self._set_up(env)
        finally:
            self._users_settings = {name: value for name, value in before.items() if env.get(name) != value}

    @contextlib.contextmanager
    def children_untraced(self, launcher: str, args: tuple, kwargs: dict) -> Iterator[None]:
        """Processes started meanwhile (torch_xla.launch, xmp.spawn) import torch_xla with
        the user's own settings: with ours they would write their analyses into this
        process's report file, and lazyviz would read them as its own. Each sets up its
        own reports, if traced, before its first graph. A call that runs the function in
        this process starts none, and XLA reads its settings inside it: ours stay."""
        if _runs_here(launcher, args, kwargs):
            yield
            return
        ours = {name: os.environ.get(name) for name in self._users_settings}
        _set_environment(self._users_settings)
        try:
            yield
        finally:
            _set_environment(ours)

    def _set_up(self, env: MutableMapping[str, str]) -> None:
        user_level = _debug_level(env)
        user_file = env.get("PT_XLA_DEBUG_FILE", "")
        if user_file:
            self._reports = _Tail.from_end(Path(user_file))
            if user_level < 2:
                self._notes.append(f"PT_XLA_DEBUG_FILE ({user_file}) also holds XLA's execution analyses, which "
                                   "lazyviz reads (PT_XLA_DEBUG_LEVEL=2); run untraced for the file as you set it")
        else:
            env["PT_XLA_DEBUG_FILE"] = str(self._folder / "analysis.txt")
            # What XLA would have printed on stderr at the user's level, lazyviz prints there.
            self._echo = user_level
            if user_level < 1:  # none printed: the analyses can name the user's line below a library's
                env.setdefault("PT_XLA_DEBUG_MAX_FRAME", _ANALYSIS_FRAMES)
            else:
                self._notes.append("XLA's analyses on stderr (PT_XLA_DEBUG_LEVEL) pass through lazyviz, printed at "
                                   "the next sync site; their computation hashes differ where lazyviz records node "
                                   "lines (in the HLO XLA hashes), and with a thread per device a cause line may "
                                   "name a read where untraced it names the sync (lazyviz's Python frames there)")
        if user_level < 2:
            env["PT_XLA_DEBUG_LEVEL"] = "2"
        flags = env.get("XLA_FLAGS", "")
        if "--xla_dump_to" in flags:
            self._notes.append("no HLO recorded: your XLA_FLAGS --xla_dump_to is kept as you set it")
        else:
            # Per compile, not per sync: the HLO costs nothing once the graphs are compiled,
            # so light capture has it too (what changed in a recompile, without the IR).
            self._hlo = _HloDump(self._folder / "hlo")
            env["XLA_FLAGS"] = " ".join(filter(None, [
                flags, f"--xla_dump_to={self._hlo.folder}", "--xla_dump_hlo_as_text", "--xla_dump_hlo_pass_re=^$"]))
        if not self.capture_ir:
            return
        user_dump = env.get("XLA_SAVE_TENSORS_FILE", "")
        if not user_dump and self._hlo is not None and not self.after_launch:
            # Each graph from the HLO XLA dumps once per compile: its own IR dump formats
            # every graph at every sync (3x the run's time on its own). The HLO's metadata
            # names the lines record_source_lines gives the nodes.
            self._ir_from_hlo = True
            return
        if "XLA_IR_DEBUG" not in env:
            env["XLA_IR_DEBUG"] = "1"
        if not user_dump:
            env["XLA_SAVE_TENSORS_FILE"] = str(self._folder / "graphs.txt")
            env["XLA_SAVE_TENSORS_FMT"] = "text"
            self._dump = self._folder / "graphs.txt"
        elif env.get("XLA_SAVE_TENSORS_FMT", "text") == "text":
            self._dump = Path(user_dump)
            # XLA appends to a dump that is there: read only what this run adds.
            self._dump_sizes = {path: path.stat().st_size for path in self._dump.parent.glob(self._dump.name + "*")}
            self._notes.append(f"your XLA_SAVE_TENSORS_FILE ({user_dump}) is read for the IR and kept"
                               + ("; its nodes carry locations (XLA_IR_DEBUG=1)" if env["XLA_IR_DEBUG"] == "1"
                                  and not self._user_ir_debug else ""))
        else:
            self._dump = None
            self._notes.append(f"no IR recorded: your XLA_SAVE_TENSORS_FILE ({user_dump}) is kept in the format you "
                               f"set ({env['XLA_SAVE_TENSORS_FMT']}), and lazyviz reads only text")

    def differences(self) -> list[str]:
        return list(self._notes)

    def install_hook(self, on_execution: ExecutionHook, on_execute_time: ExecuteTimeHook) -> None:
        import torch_xla

        self._on_execution, self._on_execute_time = on_execution, on_execute_time
        self._counter_value = torch_xla._XLAC._xla_counter_value

        self._counters = self.counters() if self.capture_ir else self._watched_counters()
        self._compile_samples = self._new_samples("CompileTime", 0)[0]
        self._execute_samples = self._new_samples("ExecuteTime", 0)[0]
        self._executed, self._compiled = self._xla_counts()
        self._enabled = True

    def record_source_lines(self, classify: CodeClassifier | None) -> None:
        """XLA_IR_DEBUG asks torch's frame getter for every node's frames, and it walks and
        formats the whole Python stack each time (1.3x on the transformer sample alone).
        lazyviz's execution hook has the getter it uses on TorchScript, which stops at
        the user's innermost frame: each node's location is then the user's line, not a
        line inside torch (its HLO metadata too). XLA's analyses take their frames from
        torch's own walk, not from the getter. Not where the user's own tensors dump is
        read: theirs keeps torch's frames, as untraced."""
        if self._dump is not None and self._dump.parent != self._folder:
            return
        import torch_xla

        if classify is None:
            if self._lines_hook is not None:
                self._lines_hook.set_source_lines(None)  # torch's getter back, XLA_IR_DEBUG off
                self._lines_hook = None
            elif self._ir_from_hlo:
                torch_xla._XLAC._set_ir_debug(False)  # turned on below, without the hook
            if self._user_ir_debug:
                torch_xla._XLAC._set_ir_debug(True)  # theirs: on as untraced
            return
        hook = self._load_hook()
        if isinstance(hook, BackendError):
            self._notes.append(f"node locations from torch's frame getter, slower: {hook}")
            if self._ir_from_hlo:
                torch_xla._XLAC._set_ir_debug(True)
            return
        self._lines_hook = hook
        # It turns XLA_IR_DEBUG on (the flag XLA reads at each node), and off at the end.
        self._lines_hook.set_source_lines(classify, reads_ltc_dump=False)

    def _load_hook(self) -> ModuleType | BackendError:
        """lazyviz's C++ hook (built once per torch), loaded once; or why it cannot be."""
        if self._hook is None:
            try:
                self._hook = load_hook()
            except BackendError as error:
                self._hook = error
        return self._hook

    def set_hook_enabled(self, enabled: bool) -> None:
        self._enabled = enabled
        if not enabled:
            if self._fast is not None:
                self._fast.xla_settle()  # disarmed: the descriptor it reads is closed below
            self.record_source_lines(None)
            self._reports.close()
            if self._graphs is not None:
                self._graphs.close()
            shutil.rmtree(self._folder, ignore_errors=True)

    # -- polling ------------------------------------------------------------------
    def poll(self, final: bool = False) -> None:
        if not self._enabled:
            return
        fast = self._fast
        if fast is not None:
            if not final and fast.xla_poll():  # nothing new, or the steady sync once more
                return
            with self._polling:
                self._settle()
                if final or self._pending or self._reports.descriptor() is None or self._lookups() != self._executed:
                    self._poll(final)
                elif self._awaiting_execute and self._execute_times_due():
                    self._take_execute_times()
                self._arm()
            return
        if not final and not self._pending and self._lookups() == self._executed:
            # Nothing ran since the last poll (the poll before a sync, a step's closures):
            # XLA writes an execution's analysis before it counts the execution's cache
            # lookup. Most polls end here, without the lock (a stale look only polls again).
            if self._awaiting_execute and self._execute_times_due():
                with self._polling:
                    self._take_execute_times()
            return
        with self._polling:
            self._poll(final)

    def _settle(self) -> None:
        """What lazyviz's hook handed on since it was armed, as if this poll had (it
        disarms): XLA's lookups, the executions awaiting their time, the last one, the
        counters; and the report text it read and did not take, read first."""
        assert self._fast is not None
        settled = self._fast.xla_settle()
        if settled is None:
            return
        count, first, last_end, unread, values = settled
        if unread:
            self._reports.put_back(unread)
        if count:
            self._executed += count
            self._awaiting_execute.extend(range(first, first + count))
            self._last_index, self._last_end = first + count - 1, last_end
            self._counters.update(values)

    def _arm(self) -> None:
        """After a poll here, the polls after it are lazyviz's hook's, as long as they are
        the steady syncs: only where nothing is half handed on (a report read and not
        handed on, a compile awaiting its execution, an open block, a fallback's row)."""
        assert self._fast is not None
        descriptor = self._reports.descriptor()
        if (not self._steady or descriptor is None or self._pending or self._compiles or self._repeats is None
                or self._last_compile is not None or self._unexpected is not None or self._after_fallback
                or not self._report_parser.idle):
            return
        if self._steady_changed or len(self._repeats) != self._fast_tried:
            # A text is the hook's once the tracer said its row repeats, as _steady has it
            # now (a counter XLA made since may move with it).
            self._steady_changed, self._fast_tried = False, len(self._repeats)
            for text, steady in self._steady.items():
                if self._fast_texts.get(text) is steady:
                    continue
                found = self._repeats.get(steady.site)
                if found is not None and found[1] == steady.moved:
                    self._fast.xla_add_text(text.encode(), steady.cause, steady.detail, found[0], steady.moved,
                                            steady.stack, steady.site[0].graph_hash)
                    self._fast_texts[text] = steady
        # The copies' metrics, read here once a second (full capture), are not the hook's.
        transfers_due = self._transfers_read_at + _TRANSFERS_READ_S if self.capture_ir else math.inf
        counters = {name: value for name, value in self._counters.items() if name not in _READ_EACH_SECOND}
        self._fast.xla_arm(descriptor, self._executed, self._compiled, counters, len(self._fallback_ops),
                           self._last_end, transfers_due, self._execute_read_at + _EXECUTE_READ_S,
                           len(self._awaiting_execute))

    def _poll(self, final: bool) -> None:
        if final:
            import torch_xla.core.xla_model as xm

            try:  # the last execute times; a broken runtime must not break the exit
                xm.wait_device_ops()
            except Exception:
                pass
        text = self._reports.read()
        steady = self._steady.get(text) if text and not final else None
        if steady is None or not self._steady_again(steady):
            self._read_reports(text)
            handed = self._poll_read(final, text)
            self._counters_read = None
            if not handed:
                return
        if self._awaiting_execute and (final or self._execute_times_due()):
            self._take_execute_times()

    def _poll_read(self, final: bool, text: str) -> bool:
        """Hand on what the reports just read, and what XLA ran without one; False where
        that is left to another thread's poll."""
        if self.capture_ir:
            self._read_graphs()
        if not final and self.syncing and threading.get_ident() not in self.syncing:
            # Another thread is inside a sync (a launcher's thread per device): what ran is
            # handed on by that thread's own poll, with its cause, not this one's.
            return False
        executed, compiled = self._xla_counts()
        frameless = executed - self._executed - len(self._pending)
        if frameless > 0 and len(self.syncing) > 1:
            # Another thread is inside a sync: what XLA counted beyond the reports may be
            # its execution, whose report is not written yet. Left for a later poll.
            executed -= frameless
            compiled = self._compiled
            frameless = 0
        if self._pending or frameless > 0:
            if compiled != self._compiled or self._compile_reports != self._compile_reports_seen:
                self._take_compile_times()
            reports = len(self._pending)
            self._handed = None
            self._hand_on_pending(max(frameless, 0), compiled - self._compiled, final)
            # One cache hit that can repeat, alone in what was read (and no tensors dump
            # to read: it names each sync's graph).
            if (reports == 1 and frameless == 0 and compiled == self._compiled and self._handed is not None
                    and not final and self._dump is None and not self._compiles and self._last_compile is None
                    and self._unexpected is None and (self._echo is None or self._echo < 1)
                    and self._report_parser.idle):
                if len(self._steady) >= _STEADY_KEPT:
                    self._steady.clear()
                    if self._fast is not None:
                        self._fast.xla_clear_texts()
                        self._fast_texts.clear()
                # The stack XLA wrote it from, where from a sync site of the hook's: the same
                # stack's steady sync needs no analysis written again (hook/xla_quiet.h). A
                # text the hook gave back (XLA wrote none) keeps the stack it had.
                stack = self._fast.xla_analysed(self._handed.site[0].graph_hash, executed) if self._fast else 0
                known = self._steady.get(text)
                self._steady[text] = self._handed._replace(stack=stack or (known.stack if known else 0))
                self._steady_changed = True
        self._executed, self._compiled = executed, compiled
        return True

    def _steady_again(self, steady: _Steady) -> bool:
        """The steady sync once more: the same report text, one more cache hit of XLA's,
        the same counters moved, under the same sync cause; then handed on as the last
        one was (what _poll_read would do with it), and True."""
        syncing = self.syncing
        if syncing and (len(syncing) > 1 or threading.get_ident() not in syncing):
            return False
        sync = self._sync
        if (sync.cause != steady.cause or sync.detail != steady.detail or self._pending or self._compiles
                or self._last_compile is not None or self._unexpected is not None
                or not self._report_parser.idle):
            return False
        counter = self._counter_value
        compiled = counter("UncachedCompile") or 0
        executed = (counter("CachedCompile") or 0) + compiled
        if executed != self._executed + 1 or compiled != self._compiled:
            return False
        counters = self._all_counters(False, False) if self.capture_ir else self._watched_counters()
        if counters != self._counters or steady.moved:
            before = self._counters
            moved = {name: value - before.get(name, 0) for name, value in counters.items()
                     if value != before.get(name, 0)}
            if moved != steady.moved:
                self._counters_read = counters  # read once: the transfers' reads are timed
                return False
            self._counters = counters
        self._executed = executed
        sync.cause, sync.detail = steady.site[1], steady.site[2]  # as _hand_on names it
        try:
            index = self._report_execution(steady.site[3], None, steady.moved, steady.site[0].frames, steady.site)
        finally:
            sync.cause, sync.detail = steady.cause, steady.detail
        self._awaiting_execute.append(index)
        self._last_index = index
        return True

    def _execute_times_due(self) -> bool:
        """Reading XLA's ExecuteTime converts every sample it keeps (35 us once it holds
        1,024): at most every 50 ms, or sooner once 256 executions wait, long before XLA
        drops a sample not yet read. The times come a window later, as they reach the
        trace anyway (the writer commits every 0.1 s)."""
        now = time.perf_counter()
        if len(self._awaiting_execute) < _AWAITING_MOST and now - self._execute_read_at < _EXECUTE_READ_S:
            return False
        self._execute_read_at = now
        return True

    def _xla_counts(self) -> tuple[int, int]:
        """(executions, compiles) as XLA counts them: every execution looks its graph up."""
        import torch_xla

        value = torch_xla._XLAC._xla_counter_value
        uncached = value("UncachedCompile") or 0
        return (value("CachedCompile") or 0) + uncached, uncached

    def _lookups(self) -> int:
        """_xla_counts()'s executions alone, at the least cost: every poll asks."""
        value = self._counter_value
        return (value("CachedCompile") or 0) + (value("UncachedCompile") or 0)

    def _watched_counters(self) -> dict[str, int]:
        """The counters light capture keeps: the ops that fell back (`aten::`), one value
        each. XLA lists those (the fallback's counters that are not zero) for a fraction
        of what listing all its counters costs."""
        import torch_xla

        ops = torch_xla._XLAC._get_executed_fallback_ops()
        if len(ops) != len(self._fallback_ops):  # a first fallback of an op (XLA never drops one)
            self._fallback_ops = list(ops)
        value = self._counter_value
        return {name: value(name) or 0 for name in self._fallback_ops}

    def _all_counters(self, final: bool, compiled: bool) -> dict[str, int]:
        """Full capture: every counter of XLA's. Listing their names costs more than
        reading them (10 us): the names are listed again after a compile (new ops, new
        graph), when an op first falls back, and at most a second after any other new
        counter. Reading a copies' metric converts every sample XLA keeps (35 us once it
        holds 1,024, each copy one): they are read once a second too, and at the end,
        with the counters XLA counts when a graph has run (_RAN_NAMES). What moved in
        between goes with the execution handed on then: the run's totals are exact, and
        one execution carries what the counters not yet listed, the copies and the runs
        counted in the second before it."""
        import torch_xla

        now = time.perf_counter()
        due = final or now - self._transfers_read_at >= _TRANSFERS_READ_S
        watched = self._watched_counters()
        if due or compiled or not self._counter_names or any(name not in self._counters for name in watched):
            self._counter_names = list(torch_xla._XLAC._xla_counter_names())
        value = self._counter_value
        names = self._counter_names
        counters = dict(zip(names, map(value, names)))  # a C loop: every sync reads them all
        if None in counters.values():  # a counter XLA no longer has
            counters = {name: count or 0 for name, count in counters.items()}
        if due:
            self._transfers_read_at = now
            counters.update(self._transfer_counts())
        else:  # not read this time: as they were
            counters.update({name: self._counters[name] for name in _READ_EACH_SECOND if name in self._counters})
        return counters

    def counters_since_last_execution(self) -> dict[str, int]:
        """Full capture: the copies and runs XLA counted since they were last read (after
        the poll with final=True: the run's last ones, no execution left to carry them)."""
        if not self.capture_ir or not self._enabled:
            return {}
        value = self._counter_value
        counts = self._transfer_counts()
        counts.update({name: count for name in _RAN_NAMES if (count := value(name)) is not None})
        moved = {name: value - self._counters.get(name, 0) for name, value in counts.items()
                 if value != self._counters.get(name, 0)}
        self._counters.update(counts)
        return moved

    def _hand_on_pending(self, frameless: int, compiles: int, final: bool = False) -> None:
        """The executions XLA reported since the last poll, then those it ran without a
        Python frame (no report: autograd's thread), which come after them as far as
        lazyviz can tell."""
        counters = self._counters_read
        if counters is None or final or compiles:
            counters = self._all_counters(final, compiles > 0) if self.capture_ir else self._watched_counters()
        moved = {name: value - self._counters.get(name, 0) for name, value in counters.items()
                 if value != self._counters.get(name, 0)}
        self._counters = counters
        # Backward ops that fell back ran on autograd's thread: the frameless executions'.
        backward = {name: n for name, n in moved.items() if frameless and name.endswith("_backward")}
        moved = {name: n for name, n in moved.items() if name not in backward}
        reported_compiles = self._compile_reports - self._compile_reports_seen
        self._compile_reports_seen = self._compile_reports
        # The counters that moved go with the first execution of the batch.
        while self._pending:
            self._hand_on(self._pending.popleft(), moved)
            moved = {}
        frameless_compiles = max(compiles - reported_compiles, 0)
        for number in range(frameless):
            self._hand_on_frameless({**moved, **backward} if number == 0 else {}, number < frameless_compiles)

    def _hand_on_frameless(self, counters: dict[str, int], compiled: bool) -> None:
        """An execution XLA counted without a report: its graph is known from the tensors
        dump (full capture); in light capture, a cache hit is taken to be the graph last
        compiled without a frame from the same Python stack."""
        # The Python stack now: the backward() call a poll point reports it from (else the
        # sync that found it), so it gets a user's line.
        stack, frame = [], sys._getframe(1)
        while frame is not None:
            stack.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
            frame = frame.f_back
        frameless = self._graph_parser.frameless
        graph_hash = frameless.popleft() if frameless else ""
        self._frameless_seen += 1
        where = tuple(stack)
        if graph_hash:
            graph_id = graph_hash[:16]
        elif compiled:
            graph_id = self._frameless_graphs[where] = f"frameless-{self._frameless_seen}"
        else:
            graph_id = self._frameless_graphs.get(where, f"frameless-{self._frameless_seen}")
        graph = None
        if compiled:
            ir_text = self._ir.get(graph_hash, "")
            backend_text = ("(XLA wrote no analysis: this graph ran on a thread without Python frames, "
                            "such as autograd's in backward)")
            size = 0
            if self._hlo is not None:
                hlo, before = self._hlo.take(None, ir_text, compiled=True, sweep=False)
                backend_text += f"\n\n{hlo}" if hlo else ""
                ir_text, size = self._graph_of(ir_text, before)
            graph = CompiledGraph(
                graph_id=graph_id, nodes=ir_text.count("\n  %") or size, ir_text=ir_text, backend_text=backend_text,
                compile_ms=self._compile_ms.popleft() if self._compile_ms else 0.0,
            )
        key = int(graph_id, 16) if graph_hash else (1 << 62) | zlib.crc32(graph_id.encode())
        index = self._report_execution(key, graph, counters, stack, None)
        self._awaiting_execute.append(index)
        self._last_index = index

    def failed_executions(self) -> list[int]:
        """A graph that failed to compile left a Compilation Analysis and no execution: it
        is handed on now, as an execution that never ran. A graph that failed to run was
        handed on at its sync; the error surfaces at the next read of its results, so it
        is the last execution."""
        with self._polling:  # threads: one at a time
            if self._fast is not None:
                self._settle()
            self._read_reports()
            if self._unexpected is not None:
                # A sync inside a compiled function that forbids them: XLA refused to run it.
                report, self._unexpected = self._unexpected, None
                self._executed += 1  # XLA counted its cache lookup: not a frameless execution
                self.poll()
                return [self._hand_on(report, {}, ran=False)]
            if self._last_compile is not None:
                report, self._last_compile = self._last_compile, None
                # XLA counted its cache lookup as an execution: not a frameless one.
                self._executed += 1
                self.poll()  # the executions reported before it
                self._take_compile_times()  # XLA times a compile that failed too
                return [self._hand_on(report, {}, ran=False)]
            self.poll()
            return [self._last_index] if self._last_index is not None else []

    def _hand_on(self, report: Report, counters: dict[str, int], ran: bool = True) -> int:
        graph_hash = report.graph_hash
        graph = None
        at = next((i for i, c in enumerate(self._compiles) if c.graph_hash == graph_hash), None)
        if at is not None:
            if self.replicas > 1:
                # Device threads compile at their own pace: a compile before this one may be
                # another thread's, whose execution is still to come.
                compile_report = self._compiles[at]
                del self._compiles[at]
                compile_ms = self._compile_ms[at] if at < len(self._compile_ms) else 0.0
                if at < len(self._compile_ms):
                    del self._compile_ms[at]
            else:
                # A compile that never ran (a cache warm-up) is dropped with its time.
                while (compile_report := self._compiles.popleft()).graph_hash != graph_hash:
                    if self._compile_ms:
                        self._compile_ms.popleft()
                compile_ms = self._compile_ms.popleft() if self._compile_ms else 0.0
            ir_text = self._ir.get(graph_hash, "")
            backend_text, size = "\n".join(compile_report.lines), 0
            if self._hlo is not None:
                counts = _count(compile_report, "Inputs"), _count(compile_report, "Outputs")
                hlo, before = self._hlo.take(counts, ir_text, compiled=ran, sweep=self.replicas == 1)
                backend_text += f"\n\n{hlo}" if hlo else ""
                ir_text, size = self._graph_of(ir_text, before)
            graph = CompiledGraph(
                graph_id=graph_hash[:16],
                nodes=ir_text.count("\n  %") or size,
                ir_text=ir_text,
                backend_text=backend_text,
                compile_ms=compile_ms,
            )
        assert self._on_execution is not None
        sync = self._sync
        outer = sync.cause, sync.detail
        if self.replicas > 1:
            # A thread per device: this thread may hand on another's execution. Its cause is
            # that of the sync its thread is in at the line XLA names, else the last one seen
            # there (threads run the same code).
            user = _user_line(report.frames)
            if sync.cause is None or not _on_this_thread(user):
                sync.cause, sync.detail = next(
                    ((cause, detail) for cause, detail, line in list(self.syncing.values()) if line == user),
                    self._line_causes.get(user, ("other", None)))
            self._line_causes[user] = sync.cause, sync.detail
        # A read of values no sync site of ours saw (`.to("cpu")`, left unwrapped: see
        # sync_sites): XLA says it was one. An op that fell back (aten::equal) says more.
        elif (sync.cause is None and _HOST_READ in report.cause
                and not any(name.startswith("aten::") for name in counters)):
            sync.cause, sync.detail = "cpu", _read_call(report.frames)
        elif sync.cause is not None and (name := report.field("Graph Name")):
            # The name torch_xla.compile gave the graph (the function's, or name=...).
            base, pending = name.removesuffix("_clear_pending"), name.endswith("_clear_pending")
            sync.detail = f"torch_xla.compile({base})" + (" (ops pending before it)" if pending else "")
        try:
            key = int(graph_hash[:16] or "0", 16)
            # The report's object stands for its text: the parser hands a loop's same text back as the same one.
            site = (report, sync.cause, sync.detail, key) if ran and graph is None and self.replicas == 1 else None
            index = self._report_execution(key, graph, counters, report.frames, site)
            if site is not None:
                self._handed = _Steady(outer[0], outer[1], site, counters)
        finally:
            sync.cause, sync.detail = outer
        if ran:  # a graph that never ran gets no ExecuteTime sample
            self._awaiting_execute.append(index)
            self._last_index = index
        return index

    def _report_execution(self, key: int, graph: CompiledGraph | None, counters: dict[str, int],
                          frames: list[tuple[str, int, str]], site: tuple | None) -> int:
        """Hand an execution to the tracer, or repeat the row the tracer made for the same
        site (see record_repeats); its index. The execute time comes with XLA's
        ExecuteTime sample, usually by the next poll."""
        end = time.perf_counter()
        repeats = self._repeats
        if repeats is not None and site is not None and not self._after_fallback:
            found = repeats.get(site)
            if found is not None and found[1] == counters:
                counts = self._shared_counts
                index = counts[0]
                counts[0] = index + 1
                trace_ms = (end - self._last_end) * 1000 if self._last_end is not None else 0.0
                self._last_end = end
                row = [index, counts[1], found[0], 0.0, max(trace_ms, 0.0), 0.0, 0.0, (end - self._started) * 1000]
                with self._rows_lock:
                    self._rows.append(row)
                    self._row_at[index] = row
                return index
        previous, self._last_end = self._last_end, end
        assert self._on_execution is not None
        recorded = self._on_execution(key, graph, 0.0, counters, frames, site=site, ends=(end, previous))
        # The tracer then takes the next execution from the same call to be the fallback's.
        self._after_fallback = recorded.fallback
        if (recorded.repeat and recorded.kind >= 0 and repeats is not None and site is not None
                and len(repeats) < _MAX_REPEATS):
            repeats[site] = (recorded.kind, dict(counters))
        return recorded.index

    def record_repeats(self, counts: object, started: float) -> Callable[[], list[tuple]] | None:
        if counts is None:
            self._repeats = None
            if self._fast is not None:
                self._fast.xla_start(None, 0.0, 0.0, None, None, None, None, None)
                self._fast = None
            return None
        assert isinstance(counts, MutableSequence)
        self._shared_counts, self._started, self._repeats = counts, started, {}
        self._fast = self._fast_polls(counts, started)

        def take_rows() -> list[tuple]:
            with self._rows_lock:
                rows, self._rows = self._rows, []
                self._row_at.clear()
            taken = [tuple(row) for row in rows]
            fast = self._fast
            if fast is not None and (hooks := fast.xla_take_rows()):
                taken += REPEATED_ROW.iter_unpack(hooks)
                taken.sort()  # by index: the writer writes them in order
            return taken

        return take_rows

    def _fast_polls(self, counts: MutableSequence[int], started: float) -> ModuleType | None:
        """lazyviz's hook, handing the steady syncs on (see _arm); None where it cannot load,
        or where threads per device sync at once (each poll is their match-up)."""
        import torch_xla

        hook = self._load_hook() if self.replicas == 1 and not self.after_launch else None
        if not isinstance(hook, ModuleType):
            if hook is not None:
                self._notes.append(f"each sync polled in Python, slower: {hook}")
            return None
        try:
            hook.xla_start(counts, started, time.perf_counter(), self._sync, self.syncing,
                           torch_xla._XLAC._get_executed_fallback_ops, torch_xla._XLAC._xla_counter_value,
                           self.poll)
        except Exception as error:  # lazyviz's own: the polls here do it all, slower
            self._notes.append(f"each sync polled in Python, slower: {type(error).__name__}: {error}")
            return None
        # Where the analyses are lazyviz's own (not the user's file, nor execution analyses
        # on stderr), a steady sync's is left out: it would only repeat a text lazyviz has.
        hook.xla_quiet(self._echo is not None and self._echo < 2)
        return hook

    def _graph_of(self, ir_text: str, hlo: str) -> tuple[str, int]:
        """The graph's IR (XLA's, else written from its HLO in full capture) and its size:
        without either (light capture), its HLO's instructions, so a graph that grows at
        every sync (no torch_xla.sync() in the loop) is seen by its size."""
        if not ir_text and self._ir_from_hlo:
            ir_text = hlo_as_ir(hlo)
        return ir_text, hlo_entry_size(hlo)

    def _read_reports(self, text: str | None = None) -> None:
        if text is None:
            text = self._reports.read()
        # At level 0 XLA prints only an unexpected execution: most texts hold none.
        if self._echo is not None and text and (self._echo >= 1 or "Unexpected Execution Analysis: " in text):
            shown = echoed(text, self._echo)
            if shown:
                sys.stderr.write(shown)
                sys.stderr.flush()
        for report in self._report_parser.feed(text):
            if report.kind == "Execution":
                self._pending.append(report)
                self._last_compile = None
            elif report.kind == "Compilation":
                self._compiles.append(report)
                self._last_compile = report
                self._compile_reports += 1
            elif report.kind == "Unexpected Execution":  # XLA raises at once: it never ran
                self._unexpected = report
            elif report.kind == "Post Compilation" and self._compiles:
                self._compiles[-1].add_lines(["", *report.lines])

    def _read_graphs(self) -> None:
        if self._graphs is None:
            if self._dump is None:
                return
            # XLA appends the device ordinal to the name it was given.
            found = sorted(self._dump.parent.glob(self._dump.name + "*"))
            if not found:
                return
            self._graphs = _Tail(found[0], self._dump_sizes.get(found[0], 0))
        self._ir.update(self._graph_parser.feed(self._graphs.read()))

    def _new_samples(self, name: str, seen: int) -> tuple[int, list[float]]:
        """(samples ever taken, the values of those after the first `seen`, in ms) of an
        XLA metric. Only the new ones are converted: XLA keeps the last 1,000, and
        converting them all at every sync cost a tiny step 20 us."""
        import torch_xla.debug.metrics as metrics

        data = metrics.metric_data(name)
        if not data:
            return 0, []
        count, _total, samples = data
        new = min(count - seen, len(samples))
        return count, [value / _NS_PER_MS for _timestamp, value in samples[len(samples) - new:]] if new > 0 else []

    def _take_compile_times(self) -> None:
        self._compile_samples, values = self._new_samples("CompileTime", self._compile_samples)
        self._compile_ms.extend(values)

    def _take_execute_times(self) -> None:
        self._execute_samples, values = self._new_samples("ExecuteTime", self._execute_samples)
        assert self._on_execute_time is not None
        for execute_ms in values:
            if not self._awaiting_execute:
                break
            index = self._awaiting_execute.popleft()
            with self._rows_lock:
                row = self._row_at.get(index)
                if row is not None:  # a repeated row the writer has not taken: timed in place
                    row[3], row[6] = row[5] + execute_ms, execute_ms  # sync_ms, execute_ms
            if row is None and not (self._fast is not None and self._fast.xla_time_row(index, execute_ms)):
                self._on_execute_time(index, execute_ms)

    def sync_state(self) -> SyncCause:
        return self._sync

    def wrap_sync_site(self, original: Callable, site: SyncSite, counts: object, ends_step: bool,
                       slow: Callable, on_raise: Callable[[Exception], None]) -> Callable | None:
        """The hook's sync site where the hook hands the steady syncs on (the common call
        without a frame: xla_sync_sites.h); the rare calls go to `slow`."""
        if self._fast is None:
            return None
        import torch_xla.core.xla_model as xm

        flag = device_flag(site.owner, self.device)
        contexts = _device_contexts(xm) if site.runs_closures else None
        wrapper = self._fast.xla_wrap_sync_site(original, slow, site.cause, site.label, counts, ends_step,
                                                self.empty_sync_ends_step, site.runs_closures,
                                                dict(site.mid_step) or None, flag, on_raise, contexts)
        return functools.update_wrapper(wrapper, original)  # type: ignore[no-any-return]

    # -- what the tracer asks ----------------------------------------------------------
    def counters(self) -> dict[str, int]:
        """XLA's counters, and its host<->device copies (counted as metrics) as counters of
        lazyviz's naming (analysis.summary.TRANSFERS): how many, and their bytes."""
        return {**self._counter_values(), **self._transfer_counts()}

    def _counter_values(self) -> dict[str, int]:
        import torch_xla

        value = self._counter_value
        return {name: value(name) or 0 for name in torch_xla._XLAC._xla_counter_names()}

    def _transfer_counts(self) -> dict[str, int]:
        import torch_xla

        counters = {}
        for metric, copies, size in _TRANSFER_METRICS:
            data = torch_xla._XLAC._xla_metric_data(metric)
            if data:
                counters[copies], counters[size] = data[0], int(data[1])
        return counters

    def sync_sites(self) -> list[SyncSite]:
        import torch
        import torch_xla
        import torch_xla.core.xla_model as xm

        # `import torch_xla.torch_xla as m` binds the package (it has an attribute of that name).
        module = sys.modules["torch_xla.torch_xla"]
        # A step ends at the step-ending call the user makes or a library makes for them:
        # torch_xla.sync(), xm.optimizer_step(barrier=True), torch_xla.step()'s exit, the
        # parallel loader's per-batch sync, the end of a torch_xla.compile'd function; all
        # but the first call the module's own sync(). Not where compile() runs the ops
        # pending before the compiled function.
        pending = {"_clear_pending_ops_before_compile": "torch_xla.compile() (ops pending before it)"}
        return [
            SyncSite(xm, "optimizer_step", "mark_step", "xm.optimizer_step()"),
            SyncSite(xm, "mark_step", "mark_step", "xm.mark_step()"),
            SyncSite(torch_xla, "sync", "mark_step", "torch_xla.sync()"),
            SyncSite(module, "sync", "mark_step", "torch_xla.sync()", mid_step=pending),
            SyncSite(torch_xla._XLAC, "_xla_step_marker", "mark_step", "mark_step()"),
            SyncSite(xm, "_run_step_closures", "mark_step", "step closures", runs_closures=True,
                     closures_waiting=_closures_waiting(xm)),
            # Autograd's thread runs backward's fallbacks without a Python frame.
            SyncSite(torch.autograd, "backward", "other", "backward()", polls_around=True),
            # Library calls that sync in the middle of a step, each a sync of its own.
            SyncSite(xm, "broadcast_master_param", "other", "xm.broadcast_master_param()"),
            SyncSite(xm, "mesh_reduce", "other", "xm.mesh_reduce()"),
            # Not syncs: they start the processes that run the graphs.
            *(SyncSite(owner, name, "other", label, starts_processes=True) for owner, name, label in launchers()),
            # Not Tensor.to: it builds device_data nodes, and XLA_IR_DEBUG records the
            # innermost Python frame as their location, which would be our wrapper.
            *(site for site in tensor_sync_sites() if site.attribute != "to"),
            *collective_sites(),
        ]

    def framework_paths(self) -> list[str]:
        import torch
        import torch_xla
        import typing_extensions

        # typing_extensions: torch_xla's @deprecated wrapper sits between the user and sync().
        return [str(Path(torch.__file__).parent), str(Path(torch_xla.__file__).parent),
                typing_extensions.__file__]

    def versions(self) -> dict[str, str]:
        import torch
        import torch_xla

        return {"torch": torch.__version__.split("+")[0], "torch_xla": torch_xla.__version__,
                "pjrt_device": os.environ.get("PJRT_DEVICE", "")}
