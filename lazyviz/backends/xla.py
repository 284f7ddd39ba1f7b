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
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, MutableMapping
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
    xla_dynamo,
    xla_spmd,
)
from lazyviz.backends._sites import collective_sites, tensor_sync_sites
from lazyviz.backends.ts import load_hook
from lazyviz.backends.xla_counters import XlaCounters
from lazyviz.backends.xla_hand_on import XlaHandOn
from lazyviz.backends.xla_io import OUR_SETTINGS, HloDump, Tail, framework, launchers
from lazyviz.backends.xla_polls import XlaPolls
from lazyviz.backends.xla_read import XlaReads
from lazyviz.trace.model import COMPILED_CALL, Capabilities

# The frames an analysis of lazyviz's own names: XLA's 8 end inside the library where a
# library syncs (transformers' mask code, 10-20 frames below the user's `model(ids)`).
_ANALYSIS_FRAMES = "256"


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
    if launcher.endswith(".launch()"):
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


class XlaBackend(LazyBackend):
    """The torch_xla family: torch_xla itself, or a fork that keeps its API under another
    package name (`package`) and device type (`device`), each a line of the registry."""

    name = "xla"
    device = "xla"
    packages = ("torch", "torch_xla")
    polls = True
    empty_sync_ends_step = False
    one_trace_per_process = True

    def __init__(self, capture_ir: bool = True, package: str = "torch_xla", device: str = "xla") -> None:
        super().__init__(capture_ir)
        self.package, self.device = package, device
        self.names = {"mark_step": f"{package}.sync()", "step_closure": "xm.add_step_closure",
                      "compile": f"{package}.compile"}
        self._folder = Path(tempfile.mkdtemp(prefix="lazyviz-xla-"))
        self._enabled = False
        # Its parts: XLA's counters, what XLA wrote (set up by _set_up), and from
        # install_hook, the hand-on of each execution and the polls that drive it.
        self._xla_counters = XlaCounters(capture_ir, package)
        self._reads = XlaReads(Tail(self._folder / "analysis.txt"))
        self._hand_on: XlaHandOn | None = None
        self._polls: XlaPolls | None = None
        self._hlo: HloDump | None = None  # the compiler's dump of each graph's HLO
        self._ir_from_hlo = False  # full capture: each graph's IR written from its HLO (hlo_as_ir)
        self._lines_hook: ModuleType | None = None  # lazyviz's hook, for its frame getter
        self._notes: list[str] = []  # how the user's own XLA debug output differs from untraced
        self._users_settings: dict[str, str | None] = {}  # what lazyviz changed in the environment: the user's values
        self._user_ir_debug = False
        self._sync = SyncCause()  # the sync-site call running on each thread, as the tracer's wrappers set it
        self._hook: ModuleType | BackendError | None = None  # lazyviz's C++ hook, loaded, or why not

    # -- set-up -------------------------------------------------------------------
    def init(self) -> None:
        # As XLA reads it: "true", or a number other than 0.
        value = os.environ.get("XLA_IR_DEBUG", "")
        self._user_ir_debug = value == "true" or (value.lstrip("-").isdigit() and int(value) != 0)
        imported = self.package in sys.modules
        if imported and not self.after_launch:
            shutil.rmtree(self._folder, ignore_errors=True)
            raise BackendError(f"{self.package} was imported before lazyviz could set XLA's debug reports up")
        if imported and any(self._xla_counters.xla_counts()):
            shutil.rmtree(self._folder, ignore_errors=True)
            raise BackendError("this process ran XLA graphs before lazyviz could set XLA's debug reports up")
        self._set_up_reports(os.environ)
        try:
            xla = framework(self.package)
            framework(self.package, "debug.metrics")
        except ImportError as error:
            shutil.rmtree(self._folder, ignore_errors=True)  # nothing will read it
            install = ("install torch and torch-xla of the same version, e.g. pip install torch==2.9.0 torch-xla==2.9.0"
                       if self.package == "torch_xla" else f"install {self.package} and the torch it was built for")
            raise BackendError(f"cannot import {self.package} ({error}); {install}") from None
        if imported and self.capture_ir and "XLA_IR_DEBUG" in self._users_settings:
            # XLA_IR_DEBUG, set by lazyviz, is read at import: turned on where XLA reads it since.
            xla._XLAC._set_ir_debug(True)

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
            self._reads.read_users_file(Tail.from_end(Path(user_file)))
            if user_level < 2:
                self._notes.append(f"PT_XLA_DEBUG_FILE ({user_file}) also holds XLA's execution analyses, which "
                                   "lazyviz reads (PT_XLA_DEBUG_LEVEL=2); run untraced for the file as you set it")
        else:
            env["PT_XLA_DEBUG_FILE"] = str(self._folder / "analysis.txt")
            # What XLA would have printed on stderr at the user's level, lazyviz prints there.
            self._reads.echo_at(user_level)
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
            self._hlo = HloDump(self._folder / "hlo")
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
            self._reads.read_dump(self._folder / "graphs.txt")
        elif env.get("XLA_SAVE_TENSORS_FMT", "text") == "text":
            # XLA appends to a dump that is there: read only what this run adds.
            self._reads.read_dump(Path(user_dump), appended=True)
            self._notes.append(f"your XLA_SAVE_TENSORS_FILE ({user_dump}) is read for the IR and kept"
                               + ("; its nodes carry locations (XLA_IR_DEBUG=1)" if env["XLA_IR_DEBUG"] == "1"
                                  and not self._user_ir_debug else ""))
        else:
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

    def own_errors(self) -> list[str]:
        return list(self._polls.errors) if self._polls is not None else []

    def counters_read_elsewhere(self, carried: bool) -> dict[str, int]:
        return self._polls.read_elsewhere(carried) if self._polls is not None else {}

    def install_hook(self, on_execution: ExecutionHook, on_execute_time: ExecuteTimeHook) -> None:
        self._xla_counters.start()
        self._hand_on = XlaHandOn(self._reads, self._xla_counters, self._hlo, self._ir_from_hlo, self.replicas,
                                  self._sync, self.syncing, on_execution)
        self._polls = XlaPolls(self._reads, self._xla_counters, self._hand_on, self.capture_ir, self.replicas,
                               self.after_launch, self._sync, self.syncing, on_execute_time, self._load_hook,
                               self._notes)
        self._enabled = True

    def record_source_lines(self, classify: CodeClassifier | None) -> None:
        """XLA_IR_DEBUG asks torch's frame getter for every node's frames, and it walks and
        formats the whole Python stack each time (1.3x on the transformer sample alone).
        lazyviz's execution hook has the getter it uses on TorchScript, which stops at
        the user's innermost frame: each node's location is then the user's line, not a
        line inside torch (its HLO metadata too). XLA's analyses take their frames from
        torch's own walk, not from the getter. Not where the user's own tensors dump is
        read: theirs keeps torch's frames, as untraced."""
        if self._reads.dump is not None and self._reads.dump.parent != self._folder:
            return
        torch_xla = framework(self.package)

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
        # The user's own HLO dump (--xla_dump_to; lazyviz then takes none) names the lines.
        self._lines_hook.set_source_lines(classify, reads_ltc_dump=False, node_refs=self._hlo is not None)
        # Nodes keep a reference to their line, put back as the line where a graph is read.
        self._reads.decode = hook.decode_locations
        if self._hlo is not None:
            self._hlo.decode = hook.decode_locations

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
        if self._polls is not None:
            self._polls.set_enabled(enabled)
        if not enabled:
            if self._polls is not None:
                self._polls.disarm()  # the descriptor the C hook reads is closed below
            self.record_source_lines(None)
            self._reads.close()
            shutil.rmtree(self._folder, ignore_errors=True)

    # -- polling: the part that does it ------------------------------------------------
    def poll(self, final: bool = False) -> None:
        if self._polls is not None:
            self._polls.poll(final)

    def failed_executions(self) -> list[int]:
        return self._polls.failed_executions() if self._polls is not None else []

    def record_repeats(self, counts: object, started: float) -> Callable[[], list[tuple]] | None:
        return self._polls.record_repeats(counts, started) if self._polls is not None else None

    def sync_state(self) -> SyncCause:
        return self._sync

    def wrap_sync_site(self, original: Callable, site: SyncSite, counts: object, ends_step: bool,
                       slow: Callable, on_raise: Callable[[Exception], None]) -> Callable | None:
        """The hook's sync site where the hook hands the steady syncs on (the common call
        without a frame: xla_sync_sites.h); the rare calls go to `slow`."""
        if site.attribute == xla_dynamo.RUN_CALL and self._polls is not None:
            return self._unlooked_run(slow, self._polls)
        if site.attribute == xla_dynamo.WARM_UP_CALL and self._polls is not None:
            return self._unran_lookups(original, self._polls, self._xla_counters)
        fast = self._polls.fast if self._polls is not None else None
        if fast is None:
            return None
        xm = framework(self.package, "core.xla_model")
        flag = device_flag(site.owner, self.device)
        contexts = _device_contexts(xm) if site.runs_closures else None
        wrapper = fast.xla_wrap_sync_site(original, slow, site.cause, site.label, counts, ends_step,
                                                self.empty_sync_ends_step, site.runs_closures,
                                                dict(site.mid_step) or None, flag, on_raise, contexts)
        return functools.update_wrapper(wrapper, original)  # type: ignore[no-any-return]


    @staticmethod
    def _unlooked_run(slow: Callable, polls: XlaPolls) -> Callable:
        """The wrapped run of a graph that XLA does not look up (torch.compile's bridge):
        its polls read the reports all the same."""

        def run(*args: object, **kwargs: object) -> object:
            polls.unlooked_runs += 1
            try:
                return slow(*args, **kwargs)
            finally:
                polls.unlooked_runs -= 1

        return functools.update_wrapper(run, slow)

    @staticmethod
    def _unran_lookups(original: Callable, polls: XlaPolls, counters: XlaCounters) -> Callable:
        """The bridge's compile ahead of a run: the cache lookups it makes run nothing."""

        def warm_up(*args: object, **kwargs: object) -> object:
            before = counters.lookups()
            try:
                return original(*args, **kwargs)
            finally:
                polls.unran_lookups += max(counters.lookups() - before, 0)

        return functools.update_wrapper(warm_up, original)

    def sync_sites(self) -> list[SyncSite]:
        import torch

        torch_xla, xm = framework(self.package), framework(self.package, "core.xla_model")
        # `import torch_xla.torch_xla as m` binds the package (it has an attribute of that name).
        module = sys.modules.get(f"{torch_xla.__name__}.torch_xla")
        sync = self.names["mark_step"]
        # A step ends at the step-ending call the user makes or a library makes for them:
        # torch_xla.sync(), xm.optimizer_step(barrier=True), torch_xla.step()'s exit, the
        # parallel loader's per-batch sync, the end of a torch_xla.compile'd function; all
        # but the first call the module's own sync(). Not where compile() runs the ops
        # pending before the compiled function.
        pending = {"_clear_pending_ops_before_compile": f"{self.package}.compile() (ops pending before it)",
                   **xla_dynamo.TRACING_SYNCS}
        return [
            SyncSite(xm, "optimizer_step", "mark_step", "xm.optimizer_step()"),
            SyncSite(xm, "mark_step", "mark_step", "xm.mark_step()"),
            SyncSite(torch_xla, "sync", "mark_step", sync, mid_step=xla_dynamo.TRACING_SYNCS),
            *([SyncSite(module, "sync", "mark_step", sync, mid_step=pending)] if module is not None else []),
            SyncSite(torch_xla._XLAC, "_xla_step_marker", "mark_step", "mark_step()"),
            SyncSite(xm, "_run_step_closures", "mark_step", "step closures", runs_closures=True,
                     closures_waiting=_closures_waiting(xm)),
            # torch.compile(backend="openxla"): its bridge runs a compiled graph without a
            # cache lookup, and compiles one ahead of its run with one (xla_dynamo).
            *([SyncSite(torch_xla._XLAC, xla_dynamo.RUN_CALL, "compiled", COMPILED_CALL)]
              if hasattr(torch_xla._XLAC, xla_dynamo.RUN_CALL) else []),
            *([SyncSite(torch_xla._XLAC, xla_dynamo.WARM_UP_CALL, "other", "torch.compile's XLA bridge compiling")]
              if hasattr(torch_xla._XLAC, xla_dynamo.WARM_UP_CALL) else []),
            # Eager mode's ops run without an analysis: what ran before a change of the
            # mode is polled under the mode it ran in (xla_eager).
            *([SyncSite(torch_xla._XLAC, "_set_use_eager_mode", "other", "eager_mode()", polls_around=True)]
              if hasattr(torch_xla._XLAC, "_set_use_eager_mode") else []),
            # Autograd's thread runs backward's fallbacks without a Python frame.
            SyncSite(torch.autograd, "backward", "other", "backward()", polls_around=True),
            # Library calls that sync in the middle of a step, each a sync of its own.
            SyncSite(xm, "broadcast_master_param", "other", "xm.broadcast_master_param()"),
            SyncSite(xm, "mesh_reduce", "other", "xm.mesh_reduce()"),
            # Not syncs: they start the processes that run the graphs.
            *(SyncSite(owner, name, "other", label, starts_processes=True) for owner, name, label in launchers(self.package)),
            # Not Tensor.to: it builds device_data nodes, and XLA_IR_DEBUG records the
            # innermost Python frame as their location, which would be our wrapper.
            *(site for site in tensor_sync_sites() if site.attribute != "to"),
            *collective_sites(),
        ]

    def annotation_calls(self) -> list[tuple[object, str]]:
        return xla_spmd.annotation_calls(self.package)

    def describe_annotation(self, args: tuple, kwargs: dict) -> dict | None:
        return xla_spmd.describe_annotation(self.package, args, kwargs)

    def framework_paths(self) -> list[str]:
        import typing_extensions

        # A fork's own package, and torch_xla's where the fork is built on it (its registry
        # line names both). typing_extensions: torch_xla's @deprecated wrapper sits between
        # the user and sync().
        found = [importlib.util.find_spec(package) for package in self.packages]
        return [*(str(Path(spec.origin).parent) for spec in found if spec is not None and spec.origin),
                typing_extensions.__file__]

    def capabilities(self) -> Capabilities:
        package = self.package
        return Capabilities(hlo=True, compiled_memory=True, packages=self.packages,
                            step_call=(f"{package}.sync", package),
                            closure_call=(f"{package}.core.xla_model.add_step_closure", f"{package}.core.xla_model"),
                            where_lowers=True)

    def versions(self) -> dict[str, str]:
        import torch

        return {"torch": torch.__version__.split("+")[0], self.package: framework(self.package).__version__,
                "pjrt_device": os.environ.get("PJRT_DEVICE", "")}
