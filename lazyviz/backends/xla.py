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
import os
import shutil
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterator, MutableMapping, MutableSequence
from pathlib import Path
from types import ModuleType

from lazyviz.backends import (
    BackendError,
    CodeClassifier,
    ExecuteTimeHook,
    ExecutionHook,
    LazyBackend,
    SyncCause,
    SyncSite,
    device_flag,
    xla_spmd,
)
from lazyviz.backends._sites import collective_sites, tensor_sync_sites
from lazyviz.backends.ts import load_hook
from lazyviz.backends.xla_counters import XlaCounters
from lazyviz.backends.xla_hand_on import XlaHandOn
from lazyviz.backends.xla_io import (
    _ANALYSIS_FRAMES,
    OUR_SETTINGS,
    _closures_waiting,
    _debug_level,
    _device_contexts,
    _HloDump,
    _runs_here,
    _set_environment,
    _Steady,
    _Tail,
    launchers,
)
from lazyviz.backends.xla_polls import XlaPolls
from lazyviz.backends.xla_reports import GraphDumpParser, Report, ReportParser


class XlaBackend(XlaPolls, XlaHandOn, LazyBackend):
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
        self._xla_counters = XlaCounters(capture_ir)  # XLA's counters and metrics, as last read
        self._awaiting_execute: deque[int] = deque()  # executions without an execute time yet
        self._execute_read_at = 0.0  # perf_counter() of the last read of ExecuteTime
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
        if imported and any(self._xla_counters.xla_counts()):
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

    def counters(self) -> dict[str, int]:
        """XLA's counters, and its host<->device copies (counted as metrics) as counters of
        lazyviz's naming (analysis.summary.TRANSFERS): how many, and their bytes."""
        return self._xla_counters.counters()

    def counters_since_last_execution(self) -> dict[str, int]:
        if not self.capture_ir or not self._enabled:
            return {}
        return self._xla_counters.since_last_execution()

    def install_hook(self, on_execution: ExecutionHook, on_execute_time: ExecuteTimeHook) -> None:
        self._on_execution, self._on_execute_time = on_execution, on_execute_time
        self._xla_counters.start()
        self._executed, self._compiled = self._xla_counters.xla_counts()
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

    def annotation_calls(self) -> list[tuple[object, str]]:
        return xla_spmd.annotation_calls()

    def describe_annotation(self, args: tuple, kwargs: dict) -> dict | None:
        return xla_spmd.describe_annotation(args, kwargs)

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
