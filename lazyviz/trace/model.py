"""Plain model objects read from a trace: what analysis, the UI and exporters consume."""
from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

from lazyviz.trace.lines import StoredLines

# "bound": what a run ended by `lazyviz run --iterations N` had pending, run by lazyviz at the end.
# "eager": an op run on its own in PyTorch/XLA's eager mode (outside a torch_xla.compile'd function).
# An eager execution's detail: at the line that built its graph (its HLO names it), or,
# without node locations (light capture), at the next call that polled.
EAGER_BUILT = "ops run one at a time (eager mode)"
EAGER_FOUND = "ops run one at a time (eager mode), found at the next sync"
# A compiled call's detail (cause "compiled"), and after it why dynamo traced again.
COMPILED_CALL = 'torch.compile(backend="openxla")'
TRACED_AGAIN = ", traced again: "
# Its bridge running a compiled module's inputs that were still pending, before its graph.
PENDING_INPUTS = "torch.compile's XLA bridge, running the compiled module's pending inputs first"
# "compiled": a graph torch.compile made, run by the compiled module's call (XLA's openxla backend).
CAUSES = ("mark_step", "item", "print", "cpu", "tolist", "bool", "fallback", "other", "bound", "eager", "compiled")
# What traces from before backends named themselves get: torch's TorchScript backend.
TS_NAMES = {"mark_step": "torch._lazy.mark_step()", "step_closure": "torch._lazy.add_step_closure"}


class PeakRss(NamedTuple):
    """The process's peak resident memory (getrusage's high-water mark) when the
    executions up to `execution` (in `step`) were stored."""

    execution: int
    step: int
    kb: int  # KiB


@dataclass(frozen=True)
class Capabilities:
    """What the run's backend can give and how its calls are spelled, recorded with the run
    by the backend itself: what reads a trace asks these, never the backend's name."""

    hlo: bool = False  # each graph's backend text holds the HLO its compiler took
    compiled_memory: bool = False  # ... and the memory its compiler said the program needs
    packages: tuple[str, ...] = ("torch",)  # top-level packages whose frames are the framework's
    step_call: tuple[str, str] = ("torch._lazy.mark_step", "torch._lazy")  # (dotted call, its module)
    closure_call: tuple[str, str] = ("torch._lazy.add_step_closure", "torch._lazy")
    where_lowers: bool = False  # torch.where stays in the graph (TorchScript's falls back)

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, value: object) -> Capabilities | None:
        """The record as written; None where it is not one (the reader then takes the
        backend's from before backends recorded theirs)."""
        if not isinstance(value, dict):
            return None
        kept = {}
        for f in fields(cls):
            given, default = value.get(f.name), getattr(cls(), f.name)
            if isinstance(default, bool):
                kept[f.name] = given if isinstance(given, bool) else default
            elif isinstance(given, list) and all(isinstance(part, str) for part in given) \
                    and (len(given) == len(default) or f.name == "packages"):
                kept[f.name] = tuple(given)
        return cls(**kept)


# What traces from before backends recorded their capabilities get, by the backend's name.
EARLIER_CAPABILITIES = {
    "xla": Capabilities(hlo=True, compiled_memory=True, packages=("torch", "torch_xla"),
                        step_call=("torch_xla.sync", "torch_xla"),
                        closure_call=("torch_xla.core.xla_model.add_step_closure", "torch_xla.core.xla_model"),
                        where_lowers=True),
}


_PACKAGE_DIRS = ("/site-packages/", "/dist-packages/")
_LAZYVIZ = f"{Path(__file__).resolve().parents[1]}/"


@functools.lru_cache(maxsize=16)
def _plumbing(packages: tuple[str, ...]) -> tuple[str, ...]:
    """Frames that are the framework's own plumbing (module calls, tensor methods, the
    backend's sync) or lazyviz's: a sync happened below them, in whatever called them."""
    return (*(f"{where}{package}/" for where in _PACKAGE_DIRS for package in packages), _LAZYVIZ)


def frame_owner(file: str, packages: tuple[str, ...]) -> str | None:
    """Whose code a frame's file is: "" for the framework's `packages` (the run's
    Capabilities.packages: torch, torch_xla) or lazyviz's plumbing; the file under its
    package folder for another installed package ("transformers/masking_utils.py"); None
    for the user's own."""
    if any(part in file for part in _plumbing(packages)):
        return ""
    for where in _PACKAGE_DIRS:
        if where in file:
            return file.rpartition(where)[2]
    return None


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str

    @cached_property  # asked for per execution, again and again; a reader shares one Frame per site
    def site(self) -> str:
        if self.file.startswith("In ["):  # a notebook cell, named as IPython numbers it
            return f"{self.file}, line {self.line}"
        return f"{self.file}:{self.line}"

    def to_json(self) -> dict:
        return {"file": self.file, "line": self.line, "function": self.function}


class SiteAndCache:
    """What an Execution and a Kind (what executions of one kind share) both answer."""

    __slots__ = ()
    frame: Frame | None
    cache: str
    counters: dict[str, int]

    @property
    def site(self) -> str:
        return self.frame.site if self.frame else "?"

    @property
    def is_miss(self) -> bool:
        return self.cache == "miss"

    @property
    def persistent(self) -> str | None:
        """With XLA's persistent compile cache: "loaded" (from it, not compiled), "not_cached"
        (compiled, and written to it), "load_failed" (in it, but XLA could not load it:
        compiled again); None for a graph the process had, or without that cache."""
        counters = self.counters
        if not counters:
            return None
        return next((state for name, state in PERSISTENT_COUNTERS.items() if counters.get(name)), None)


# PyTorch/XLA's persistent compile cache (torch_xla.runtime.initialize_cache): how a graph
# new to the process was had, by the counter XLA moved at its lookup. Recorded in both
# capture modes.
PERSISTENT_COUNTERS = {"PersistentCacheHit": "loaded", "PersistentCacheMiss": "not_cached",
                       "PersistentCacheDeserializeFailure": "load_failed"}


@dataclass(frozen=True, slots=True)  # slots: a long run holds a million of them
class Execution(SiteAndCache):
    index: int
    step: int
    cause: str
    detail: str | None  # the op that fell back, or the call that synced (e.g. "TensorBase.item()")
    frame: Frame | None  # the user frame that caused it; None when no user code was on the stack
    stack_id: int | None
    graph: str
    nodes: int
    cache: str  # "hit" or "miss"
    sync_ms: float  # lowering + compile + execute, as the backend saw it
    trace_ms: float  # Python time building the graph since the previous execution
    compile_ms: float
    execute_ms: float
    start_ms: float  # since the run started
    fallback_ops: dict[str, int] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    call: str | None = None  # what the user's line called that led here: "clip_grad_norm_"
    context: str | None = None  # the test that ran it, under pytest: "tests/test_x.py::test_y"


@dataclass(frozen=True)
class Graph:
    id: str
    nodes: int
    ir_text: str
    backend_text: str
    first_execution: int


class GraphTexts(Mapping[str, str]):
    """graph id -> IR text ("" where none was captured), as a trace holds them: most graphs
    as the ids of their lines into `lines` (each distinct line at its place stored once),
    the rest whole. The analysis parses by line id (a line once, not once per graph); a
    text is joined only when asked for. A live view adds the graphs it reads (update)."""

    def __init__(self, graphs: dict[str, str | Sequence[int]] | None = None, lines: Sequence[str] = ()) -> None:
        self._graphs = graphs if graphs is not None else {}  # id -> its text, or its line ids
        self.lines = lines  # line id -> its text

    def __getitem__(self, graph_id: str) -> str:
        held = self._graphs[graph_id]
        return held if isinstance(held, str) else "\n".join(map(self.lines.__getitem__, held))

    def __contains__(self, graph_id: object) -> bool:
        return graph_id in self._graphs

    def __iter__(self) -> Iterator[str]:
        return iter(self._graphs)

    def __len__(self) -> int:
        return len(self._graphs)

    def line_ids(self, graph_id: str) -> Sequence[int] | None:
        """The graph's lines as ids into `lines`; None where it is held whole (or unknown)."""
        held = self._graphs.get(graph_id)
        return None if held is None or isinstance(held, str) else held

    def size(self) -> int:
        """About the characters the analysis parses, without joining any text: the texts
        held whole, and each stored line once."""
        lines = self.lines.chars if isinstance(self.lines, StoredLines) else sum(map(len, self.lines))
        return lines + sum(len(held) for held in self._graphs.values() if isinstance(held, str))

    def update(self, other: Mapping[str, str]) -> None:  # type: ignore[override]
        """Add other's graphs: another GraphTexts read later from the same trace (its lines
        are these and more), or plain texts."""
        if not isinstance(other, GraphTexts):
            self._graphs.update(other)
            return
        if len(other.lines) >= len(self.lines):
            self.lines = other.lines
        self._graphs.update(other._graphs)

    def only(self, graph_ids: Set[str]) -> GraphTexts:
        """These graphs alone (those held), sharing the lines."""
        return GraphTexts({g: held for g, held in self._graphs.items() if g in graph_ids}, self.lines)


class Annotation(NamedTuple):
    """A sharding the script asked for (PyTorch/XLA SPMD: xs.mark_sharding), as the
    partitioner was given it: the tensor, the partition spec and its mesh."""

    frame: Frame  # the user's line that asked
    shape: tuple[int, ...]  # the whole tensor's
    spec: tuple  # as written: ("model", None); a name, an index, None or a tuple of them per dim
    sharding: str  # XLA's: "{devices=[1,4]0,1,2,3}"
    mesh_shape: tuple[int, ...]
    axis_names: tuple[str, ...]  # the mesh's, else "0", "1", ...
    device_ids: tuple[int, ...]  # the mesh's devices, in its order
    parameter: bool  # a leaf that requires grad (a weight), not a batch or an activation

    def axis_of(self, dim: int) -> tuple[str, ...]:
        """The mesh axes tensor dim `dim` is split over, by name."""
        entry = self.spec[dim] if dim < len(self.spec) else None
        entries = entry if isinstance(entry, (list, tuple)) else (entry,)
        return tuple(self.axis_names[e] if isinstance(e, int) and 0 <= e < len(self.axis_names) else str(e)
                     for e in entries if e is not None)


class Failure(NamedTuple):
    """An execution the backend failed to compile or run: the script got its error."""

    execution: int
    error: str  # the backend's message


def _number(value: object) -> float | None:
    """A number as JSON kept it (bool is not one), else None."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class TrialSide:
    """One side of `lazyviz fix --try` (the original, or the patched copy) as measured
    under the trial's bound. None: not measured (no steps, no collectives)."""

    state: str = ""  # how it ended: "exited 0", "raised RuntimeError", "timed out"
    steps: int = 0
    executions: int = 0
    per_step: float | None = None  # executions per step after warm-up
    misses: int = 0
    recompiles: int | None = None  # after warm-up, where the run has steps
    max_nodes: int = 0
    iterations: int = 0  # optimizer steps, where the run has no steps
    per_iteration: float | None = None
    sync_ms: float = 0.0
    step_ms: float | None = None
    steady_sync_ms: float | None = None  # sync time per iteration after warm-up
    collective_bytes: float | None = None  # per step, SPMD

    # The measures a user compares, each with its label and unit (measured_text's order).
    COMPARED = (("per_step", "executions per step", ""), ("recompiles", "recompiles after warm-up", ""),
                ("max_nodes", "largest graph", " nodes"), ("sync_ms", "sync time", " ms"),
                ("steady_sync_ms", "sync time per iteration after warm-up", " ms"),
                ("collective_bytes", "collective bytes per step", " B"))

    def to_json(self) -> dict:
        def rounded(value: float | None, digits: int | None = 3) -> float | None:
            return None if value is None else round(value, digits)

        return {"state": self.state, "steps": self.steps, "executions": self.executions, "per_step": self.per_step,
                "misses": self.misses, "recompiles": self.recompiles, "max_nodes": self.max_nodes,
                "iterations": self.iterations, "per_iteration": self.per_iteration,
                "sync_ms": round(self.sync_ms, 3), "step_ms": rounded(self.step_ms),
                "steady_sync_ms": rounded(self.steady_sync_ms), "collective_bytes": rounded(self.collective_bytes, None)}

    @classmethod
    def from_json(cls, data: object) -> TrialSide:
        """As the trace kept it; a field of the wrong type reads as not measured."""
        if not isinstance(data, Mapping):
            return cls()

        def whole(name: str) -> int:
            value = data.get(name)
            return value if type(value) is int else 0

        recompiles = data.get("recompiles")
        return cls(str(data.get("state", "")), whole("steps"), whole("executions"), _number(data.get("per_step")),
                   whole("misses"), recompiles if type(recompiles) is int else None, whole("max_nodes"),
                   whole("iterations"), _number(data.get("per_iteration")), _number(data.get("sync_ms")) or 0.0,
                   _number(data.get("step_ms")), _number(data.get("steady_sync_ms")),
                   _number(data.get("collective_bytes")))


@dataclass(frozen=True)
class TrialRecord:
    """What `lazyviz fix --try` measured on a run's script, kept with the run (RunInfo.fix_trial):
    the edits tried, the bound each side ran under, both sides, the findings gone and new,
    and the verdicts on the output and the ending."""

    steps: int  # the bound's count
    bound: str  # as said: "6 steps", "3 optimizer steps"
    edits: tuple[str, ...]
    before: TrialSide
    after: TrialSide
    gone: tuple[str, ...] = ()  # findings the edits removed, each in a few words
    appeared: tuple[str, ...] = ()
    output: str = ""  # the output check's verdict
    ending: str = ""  # how the two ended, compared

    def to_json(self) -> dict:
        return {"steps": self.steps, "bound": self.bound, "edits": list(self.edits), "before": self.before.to_json(),
                "after": self.after.to_json(), "gone": list(self.gone), "appeared": list(self.appeared),
                "output": self.output, "ending": self.ending}

    @classmethod
    def from_json(cls, data: object) -> TrialRecord | None:
        """None where nothing was kept (or what was is not a trial)."""
        if not isinstance(data, Mapping) or not data:
            return None

        def texts(name: str) -> tuple[str, ...]:
            value = data.get(name)
            return tuple(str(item) for item in value) if isinstance(value, list) else ()

        steps = data.get("steps")
        return cls(steps if type(steps) is int else 0, str(data.get("bound", "")), texts("edits"),
                   TrialSide.from_json(data.get("before")), TrialSide.from_json(data.get("after")),
                   texts("gone"), texts("appeared"), str(data.get("output", "")), str(data.get("ending", "")))

    def measured_text(self) -> str:
        """The measurement in one line: "executions per step 2.0 -> 1.0, largest graph ..."."""
        parts = []
        for name, label, unit in TrialSide.COMPARED:
            old, new = getattr(self.before, name), getattr(self.after, name)
            if old is not None and new is not None and old != new:
                digits = 1 if isinstance(old, float) or isinstance(new, float) else 0
                parts.append(f"{label} {old:,.{digits}f} -> {new:,.{digits}f}{unit}")
            elif name == "per_step" and new is not None and old is None:
                parts.append(f"steps {self.before.steps} -> {self.after.steps}")
        if self.gone:
            parts.append(f"{len(self.gone)} finding{'s' if len(self.gone) != 1 else ''} gone")
        return ", ".join(parts) or "no change measured"


@dataclass(frozen=True)
class RunInfo:
    argv: list[str]
    backend: str
    capture: str
    versions: dict[str, str]
    start_time: str
    pid: int
    cwd: str
    rank: dict[str, str]  # rank, local_rank, world_size, run_id when launched by torchrun
    finished: bool
    exit_status: int | None
    error: str | None
    traceback: str | None
    steps: int | None  # mark_step() calls completed; known once the run finished
    elapsed_s: float | None
    # The backend's own names for what fixes mention: "mark_step", "step_closure".
    names: dict[str, str] = field(default_factory=lambda: dict(TS_NAMES))
    device: str = "lazy"  # the backend's device type
    capabilities: Capabilities = field(default_factory=Capabilities)  # what the backend can give
    module: bool = False  # run as `-m MODULE`
    # False when the traced process could not record its own end (killed, os._exit, a
    # full disk): the trace then holds what was written before, and exit_status and
    # ended_by are what `lazyviz run` saw.
    complete: bool = False
    ended_by: str | None = None  # "killed by SIGKILL"
    startup_ms: float | None = None  # from the process start to the first graph
    tracer_errors: list[str] = field(default_factory=list)  # lazyviz's own, swallowed
    source: str = "script"  # "script" (lazyviz run), "api" (lazyviz.trace) or "notebook" (%%lazyviz)
    failures: list[Failure] = field(default_factory=list)  # executions the backend failed to compile or run
    notes: list[str] = field(default_factory=list)  # what tracing changed in what the backend shows the user
    error_frames: list[Frame] = field(default_factory=list)  # where the script raised, outermost first
    # The CPU tensors its innermost frame held beside lazy ones when it raised: (name,
    # "parameter" / "buffer" / "tensor", the module's class or "").
    cpu_at_raise: list[tuple[str, str, str]] = field(default_factory=list)
    # Fallback ops run after the last execution (none carries them): op -> calls.
    fallbacks_after_last_execution: dict[str, int] = field(default_factory=dict)
    # Other counters that moved after the last execution (XLA's host<->device copies, read
    # in batches: those of the run's last second): name -> delta. The run's totals count them.
    counters_after_last_execution: dict[str, int] = field(default_factory=dict)
    # Calls that handed back pieces on the host while they say device lazy (a split whose op
    # fell back), in order: (the call, e.g. "split", the user's line that made it).
    lost_pieces: list[tuple[str, Frame]] = field(default_factory=list)
    device_used: bool = False  # the lazy core's counters moved though no graph ran
    stopped_after_steps: int | None = None  # `lazyviz run --steps N` ended the script after this step
    stopped_after_iterations: int | None = None  # `lazyviz run --iterations N`: after this optimizer step
    # torch.optim steps the script took (its loop's iterations, where it has no steps), and
    # the executions recorded when each of the first few thousand returned.
    optimizer_steps: int = 0
    optimizer_marks: list[int] = field(default_factory=list)
    optimizer_step_at: Frame | None = None  # the user's line that called the first optimizer step
    sources: dict[str, str] = field(default_factory=dict)  # the user's files when the run ended: path -> sha256
    # The shardings the script asked for (SPMD), each distinct (line, shape, spec) once.
    annotations: list[Annotation] = field(default_factory=list)
    # `lazyviz fix --try`'s measurement of the proposed edits on this run's script, where it ran.
    fix_trial: TrialRecord | None = None
    # The process's peak resident memory where it rose (the trace's `memory`).
    peak_rss: list[PeakRss] = field(default_factory=list)

    @property
    def script(self) -> str:
        return self.argv[0] if self.argv else "?"

    @property
    def command(self) -> str:
        """What was traced, as a user would name it."""
        if self.source == "script" or self.argv:
            return " ".join(self.argv)
        return "a notebook" if self.source == "notebook" else "lazyviz.trace() in Python"

    @property
    def ended_cleanly(self) -> bool:
        """Ran to its end: finished, exit status 0, nothing raised or killed it."""
        return self.finished and not self.ended_by and not self.error and self.exit_status in (0, None)

    @property
    def state(self) -> str:
        """How the run ended, in one phrase; the one wording every reader uses."""
        if not self.finished:
            return "unfinished (still running, or stopped before lazyviz could record how it ended)"
        if self.ended_by:
            ending = self.ended_by
        elif self.stopped_after_steps is not None:
            ending = f"stopped after {self.stopped_after_steps} steps, as asked (--steps)"
        elif self.stopped_after_iterations is not None:
            ending = f"stopped after {self.stopped_after_iterations} optimizer steps, as asked (--iterations)"
        elif self.error:
            lines = self.error.splitlines()
            ending = f"raised {first_sentence(lines[0]) if lines else self.error}"
        elif self.source != "script":
            ending = "ended"
        else:
            ending = f"exited {self.exit_status}"
        return ending if self.complete else f"{ending}; the trace stopped early (it keeps what was recorded before)"


def first_sentence(line: str) -> str:
    """A long message's first sentence: torch's dispatcher error goes on for thousands of
    characters (every backend the op has, a Facebook employee's link) after the part
    that says what failed."""
    if len(line) <= 200:
        return line
    end = _SENTENCE_END.search(line, 40)
    return line[:end.start() + 1] if end is not None else line


_SENTENCE_END = re.compile(r"[.!?] (?=[A-Z])")
