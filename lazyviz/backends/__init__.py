"""The few calls a debugger needs from a lazy backend, and the registry of adapters.

Names follow PyTorch's `BackendImplInterface` where they correspond. Only modules in
this package touch torch's private lazy APIs.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from lazyviz.errors import LazyvizError
from lazyviz.trace.model import Capabilities


class BackendError(LazyvizError):
    """A backend cannot be set up here (missing package, compiler, ...)."""


@dataclass(frozen=True)
class CompiledGraph:
    """What the backend tells once per compile-cache miss."""

    graph_id: str
    nodes: int
    ir_text: str  # empty when IR capture is off
    backend_text: str
    compile_ms: float
    # Not compiled here: loaded from a persistent compile cache (an earlier run compiled it).
    # Its execution is a cache hit.
    loaded: bool = False


@dataclass(frozen=True)
class SyncSite:
    """A Python-visible function that syncs lazy tensors, and the cause it stands for."""

    owner: object
    attribute: str
    cause: str
    label: str  # how a user names the call: "Tensor.item()", "mark_step()"
    # Library functions that call this step-ending site in the middle of a step, by name,
    # with how a user names what synced there: that sync is cause "other" and ends no step.
    mid_step: Mapping[str, str] = field(default_factory=dict)
    # It runs the step closures after a step's sync: a sync inside a closure is the
    # closure's own (cause item for its .item()), not the step's.
    runs_closures: bool = False
    # Of a closure runner: whether any closure waits to run (None: assume one does). With
    # none the call runs unwrapped: a polling backend's polls around it would find nothing.
    closures_waiting: Callable[[], bool] | None = None
    # Not a sync: a call during which the backend may run graphs it reports without a
    # frame (autograd's thread in backward); polled around, they get this call's line.
    polls_around: bool = False
    # Not a sync: it starts processes that run the graphs (torch_xla.launch). They start
    # with the user's own environment (LazyBackend.children_untraced), each traced apart.
    starts_processes: bool = False


def device_flag(owner: object, device: str) -> str | None:
    """The tensor class's own flag for the device (Tensor.is_xla), where `owner` is a
    class that has one: one C getter, where `.device.type` makes a torch.device at every
    read (0.7 us). None where it has none."""
    flag = sys.intern(f"is_{device}")
    return flag if isinstance(owner, type) and hasattr(owner, flag) else None


class SyncCause(threading.local):
    """The sync-site call running on this thread, as sync sites written in Python keep it:
    threads syncing at once each keep theirs."""

    cause: str | None = None
    detail: str | None = None
    in_closure: bool = False  # step closures are running: their syncs are their own
    closures_from: int | None = None  # the execution count when the running sync's closures began


# A Python frame as (file, line, function).
Frame = tuple[str, int, str]

class Recorded(NamedTuple):
    """What the tracer answers a backend that reported an execution."""

    index: int  # the execution's index (-1 when lazyviz failed to record it)
    kind: int = -1  # its row's kind id, when numbered now (a repeat's, a fallback's)
    repeat: bool = False  # later hits from this site are this row again: repeat it as `kind`
    fallback: bool = False  # a fallback op's execution: the next one from this site may follow it


class ExecutionHook(Protocol):
    """What a backend calls once per graph execution."""

    def __call__(self, key: int, graph: CompiledGraph | None, execute_ms: float, counters: Mapping[str, int],
                 backend_stack: list[Frame] | None = None, site: Hashable | None = None,
                 ends: tuple[float, float | None] | None = None, follows: int | None = None,
                 error: str | None = None) -> Recorded:
        """key: the backend's id for the compiled computation; graph: what its compile
        produced, on its first execution only; counters: those that moved since the
        previous execution, by how much; backend_stack: where the backend saw it,
        innermost first, when it reports after the fact (None: the caller's stack);
        site: a signature of the calling stack (every frame's code object and
        instruction, and the running test), equal only for the same stack, when the
        backend can compute it cheaply (a backend that repeats rows acts on the
        answer's kind and repeat: see record_repeats); ends: (when it ended, when the previous execution ended or
        None for the first), on the tracer's clock, when the backend times them;
        follows: for a backend that repeats rows, the kind of the previous execution
        when it was a fallback's from this same site, else -1; error: the backend's
        message when the graph failed to compile or run (the script then gets the
        backend's exception, as untraced)."""
        ...


class CodeClassifier(Protocol):
    """What a code object's frames are to a source-line walk: (kind, the file's name in
    the trace); kind is USER_FRAME, OTHER_FRAME (walk on outward) or STOP_FRAME."""

    def __call__(self, filename: str, name: str) -> tuple[int, str]: ...


USER_FRAME, OTHER_FRAME, STOP_FRAME = 0, 1, 2


class ExecuteTimeHook(Protocol):
    """For backends that learn an execution's execute time after reporting it."""

    def __call__(self, index: int, execute_ms: float) -> None: ...


class LazyBackend(ABC):
    name: str
    device: str
    # The top-level packages of the backend's framework (its registry line's): their frames
    # are never the user's, nor a library's.
    packages: tuple[str, ...] = ("torch",)
    # True for backends that learn of executions by reading the backend's own reports:
    # the tracer then calls poll() around every sync site and at the end.
    polls: bool = False
    # What fixes call the step's sync and a step closure on this backend.
    names: dict[str, str] = {"mark_step": "mark_step()", "step_closure": "a step closure"}
    # A step ends when a step-ending sync (cause "mark_step") returns. On XLA,
    # `torch_xla.step()` syncs on entry with nothing to run: there only a sync that ran
    # a graph ends a step.
    empty_sync_ends_step: bool = True
    # True where the backend's reporting is set up at import time (XLA's debug files):
    # then lazyviz.trace can record only one trace per process.
    one_trace_per_process: bool = False
    # In a process a launcher started (torch_xla.launch): the backend was imported and
    # initialised by the launcher, and may still be set up as long as it ran no graph.
    after_launch: bool = False
    # Threads running the same steps, one per device (a launched process's): their
    # executions and compiles interleave.
    replicas: int = 1

    def __init__(self, capture_ir: bool = True) -> None:
        self.capture_ir = capture_ir
        # Threads inside a sync site's call now, with its cause, detail and calling line
        # (the tracer's Python wrappers keep it): a polling backend's counters and reports
        # may hold another thread's execution.
        self.syncing: dict[int, tuple[str | None, str | None, tuple[str, int] | None]] = {}

    @abstractmethod
    def init(self) -> None:
        """Initialise the backend once; the user's own init call must still work."""

    def counters_since_last_execution(self) -> dict[str, int]:
        """The counters that moved after the last execution reported (a fallback the
        script ran before it ended or raised, which no execution will carry)."""
        return {}

    def counters_read_elsewhere(self, carried: bool) -> dict[str, int]:
        """On the trace writer's thread, while the backend repeats rows: counters it reads
        off the script's thread (how many copies) that moved since they were last read,
        for the last row taken now to carry (`carried`: one was taken); with none, the
        backend gives them to the next execution it hands on, and returns none."""
        return {}

    def own_errors(self) -> list[str]:
        """lazyviz's own failures the backend kept from the script (one line each)."""
        return []

    def differences(self) -> list[str]:
        """What tracing changed in what the backend itself shows the user (its dumps, its
        debug output), each in one sentence with how to get the untraced behaviour."""
        return []

    @abstractmethod
    def install_hook(self, on_execution: ExecutionHook, on_execute_time: ExecuteTimeHook) -> None:
        """Call `on_execution` after every graph execution (or at the next poll);
        counter deltas count from this call on. `on_execute_time` fills in an execute
        time that was not known when the execution was reported."""

    def record_source_lines(self, classify: CodeClassifier | None) -> None:  # noqa: B027 - optional
        """Tag every IR node with the user's line that built it (None: stop)."""

    def piece_calls(self) -> list[tuple[object, str]]:
        """Calls that return several tensors and, where their op falls back, hand them back
        on the host while they still say the device (owner, attribute): the tracer notes
        the line of each that does, since the op that raises later is elsewhere."""
        return []

    def lost_piece(self, tensor: object) -> bool:
        """Whether a tensor a piece call returned says the device but is not on it."""
        return False

    def annotation_calls(self) -> list[tuple[object, str]]:
        """Calls that ask for a tensor's sharding (SPMD's mark_sharding), as (owner,
        attribute): the tracer notes what each asked for, and the line that asked."""
        return []

    def describe_annotation(self, args: tuple, kwargs: dict) -> dict | None:
        """What an annotation call asked for: Annotation's fields but its frame, as plain
        values; None where it cannot say."""
        return None

    def poll(self, final: bool = False) -> None:  # noqa: B027 - optional: only polling backends override it
        """Report executions seen since the last poll; final: the script has ended,
        wait for the device and report everything."""

    def failed_executions(self) -> list[int]:
        """After a sync site raised from inside the backend: the executions (indices the
        execution hook answered) that failed to compile or run. Backends whose hook
        passes the error with the execution itself (TorchScript) leave this empty."""
        return []

    def children_untraced(self, launcher: str, args: tuple, kwargs: dict) -> contextlib.AbstractContextManager[None]:
        """While a call (the launcher labelled `launcher`, with its arguments) starts
        processes: the environment they inherit as untraced (the settings lazyviz made
        for this process's backend taken back meanwhile)."""
        return contextlib.nullcontext()

    def sync_state(self) -> SyncCause:
        """Where this thread's running sync site is read (`.cause`, `.detail`): the one
        the backend's own wrappers (wrap_sync_site) keep, or one for Python wrappers."""
        return SyncCause()

    def wrap_sync_site(self, original: Callable, site: SyncSite, counts: object, ends_step: bool,
                       slow: Callable, on_raise: Callable[[Exception], None]) -> Callable | None:
        """A wrapper of a call that syncs (`site`'s original), where the backend has a
        cheaper one than the tracer's Python function `slow` (which costs a frame per call):
        while it runs, this thread's sync_state() reads (cause, detail), unless an outer
        sync site's call already set them; a step-ending one (ends_step) counts a step in
        counts[1] when it returns (see empty_sync_ends_step). It acts only while counts is
        the array given to record_repeats, and otherwise passes the call on. A closure
        runner (site.runs_closures) suspends the cause while it runs: a sync inside is "...
        in a step closure" and ends no step. It may hand the calls it does not handle to
        `slow`; on_raise: the tracer's, for a sync that raised. None: no such wrapper."""
        return None

    def record_repeats(self, counts: object, started: float) -> Callable[[], list[tuple]] | None:
        """Repeat rows without the tracer, where the backend can: a cache hit from a site
        (stack, sync cause, and the fallback it follows) for which the tracer answered
        `repeat` is appended as a row of that kind (ROW_FIELDS), numbered and stepped
        from counts (an array('q', [executions, steps completed]) the tracer shares),
        timed on the tracer's clock that started at `started`. Returns what takes the rows repeated since its last
        call, or None where the backend cannot (the tracer then sees every execution).
        counts None: stop."""
        return None

    @abstractmethod
    def set_hook_enabled(self, enabled: bool) -> None:
        """Stop or resume reporting (lazyviz's own teardown must not be recorded)."""

    @abstractmethod
    def counters(self) -> dict[str, int]:
        """All counters of the lazy core, by name."""

    @abstractmethod
    def sync_sites(self) -> list[SyncSite]:
        """Python functions whose calls force an execution, to name the cause."""

    @abstractmethod
    def framework_paths(self) -> list[str]:
        """Directories whose frames are never the user's frame."""

    def capabilities(self) -> Capabilities:
        """What this backend can give and how its calls are spelled, recorded with the run
        once it is set up: what reads the trace asks these, not the backend's name."""
        return Capabilities(packages=self.packages)

    @abstractmethod
    def versions(self) -> dict[str, str]:
        """Version strings worth recording with the run (e.g. {"torch": "2.13.0"})."""


@dataclass(frozen=True)
class BackendEntry:
    """What lazyviz knows of a backend before importing it (torch is not imported to
    parse `lazyviz run`'s arguments)."""

    target: str  # "module:Class" of its LazyBackend
    detects: tuple[str, ...]  # modules whose import in a script means this backend
    packages: tuple[str, ...]  # top-level packages of the backend's framework
    prepare: str | None = None  # "module:function" run by `lazyviz run` before the script starts
    options: Mapping[str, str] = field(default_factory=dict)  # its class's keyword arguments (a fork's package)
    # The backend this one is a fork of: a script that imports both (the fork is built on
    # it) is this one's.
    extends: str | None = None


# One line per backend. `--backend` lists these names; without it, a script's imports pick.
# A package outside lazyviz adds its own with an entry point in the group "lazyviz.backends"
# whose object is its BackendEntry (a torch_xla fork: XlaBackend with its package's name).
BACKENDS: dict[str, BackendEntry] = {
    "ts": BackendEntry("lazyviz.backends.ts:TorchScriptBackend", ("torch._lazy",), ("torch",),
                       prepare="lazyviz.backends.ts:prepare"),
    "xla": BackendEntry("lazyviz.backends.xla:XlaBackend", ("torch_xla",), ("torch", "torch_xla")),
}
DEFAULT_BACKEND = "ts"
ENTRY_POINTS = "lazyviz.backends"


@functools.cache
def backends() -> dict[str, BackendEntry]:
    """The registry's backends, and those installed packages add (ENTRY_POINTS); one that
    does not load is left out, as pytest leaves out a broken plugin's entry, with a line
    on stderr."""
    from importlib.metadata import entry_points

    found = dict(BACKENDS)
    for point in entry_points(group=ENTRY_POINTS):
        try:
            entry = point.load()
        except Exception as error:  # a package's broken entry must not stop lazyviz
            print(f"lazyviz: backend {point.name!r} from {point.value} does not load: {error}", file=sys.stderr)
            continue
        if isinstance(entry, BackendEntry) and point.name not in BACKENDS:
            found[point.name] = entry
    return found


def _load(target: str) -> object:
    import importlib

    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def get_backend(name: str, capture_ir: bool = True) -> LazyBackend:
    entry = backends().get(name)
    if entry is None:
        raise BackendError(f"unknown backend {name!r} (known: {', '.join(backends())})")
    backend = _load(entry.target)(capture_ir, **entry.options)  # type: ignore[operator]
    # A parametrised class serves several registry lines: each names its own.
    backend.name, backend.packages = name, entry.packages
    return backend  # type: ignore[no-any-return]


def prepare_backend(name: str) -> None:
    """What must happen before the script starts (the TorchScript hook's build)."""
    entry = backends()[name]
    if entry.prepare is not None:
        _load(entry.prepare)()  # type: ignore[operator]


def _imports(entry: BackendEntry, modules: Iterable[str]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for module in modules for prefix in entry.detects)


def detect_backend(imported: set[str] | None, environ: Mapping[str, str] | None = None,
                   installed: Callable[[str], bool] | None = None) -> str:
    """The backend a script's imported modules name; else PyTorch/XLA where torch_xla is
    installed and PJRT_DEVICE is set (a library imports it for the script: transformers'
    Trainer trains on XLA then); else the default."""
    registry = backends()
    found = [name for name, entry in registry.items() if imported and _imports(entry, imported)]
    found = [name for name in found if not any(registry[other].extends == name for other in found)]
    if len(found) > 1:
        named = " and ".join(f"{registry[n].detects[0]} ({n})" for n in found)
        raise BackendError(f"the script imports {named}: pass --backend {' or --backend '.join(found)}")
    if found:
        return found[0]
    environ = os.environ if environ is None else environ
    installed = installed or (lambda module: importlib.util.find_spec(module) is not None)
    if environ.get("PJRT_DEVICE") and installed("torch_xla"):
        return "xla"
    return DEFAULT_BACKEND


def imported_backend(modules: Iterable[str]) -> str:
    """The backend of a process that imported `modules` (sys.modules, for lazyviz.trace
    started without a backend): one besides the default whose package is imported, a
    fork before what it extends; else the default."""
    registry = backends()
    modules = set(modules)
    found = [name for name, entry in registry.items() if name != DEFAULT_BACKEND and _imports(entry, modules)]
    found = [name for name in found if not any(registry[other].extends == name for other in found)]
    return found[0] if found else DEFAULT_BACKEND


def imports_a_framework(imported: set[str]) -> bool:
    """Whether these top-level imports hold a backend's framework: the built-in backends'
    packages answer first (torch, nearly always); only otherwise are the installed
    packages' entry points read (50 ms)."""
    built_in = {package for entry in BACKENDS.values() for package in entry.packages}
    return bool(imported & built_in) or any(imported & set(entry.packages) for entry in backends().values())
