"""The few calls a debugger needs from a lazy backend, and the registry of adapters.

Names follow PyTorch's `BackendImplInterface` where they correspond. Only modules in
this package touch torch's private lazy APIs.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable


class BackendError(Exception):
    """A backend cannot be set up here (missing package, compiler, ...)."""


@dataclass(frozen=True)
class CompiledGraph:
    """What the backend tells once per compile-cache miss."""

    graph_id: str
    nodes: int
    ir_text: str  # empty when IR capture is off
    backend_text: str
    compile_ms: float


@dataclass(frozen=True)
class SyncSite:
    """A Python-visible function that syncs lazy tensors, and the cause it stands for."""

    owner: object
    attribute: str
    cause: str
    label: str  # how a user names the call: "Tensor.item()", "mark_step()"


# A Python frame as (file, line, function).
Frame = tuple[str, int, str]

# (computation key, graph on its first execution or None, execute ms, counters that
#  moved since the previous execution with how much, and the stack where the backend
#  saw it, innermost first, or None to take the caller's) -> the execution's index.
ExecutionHook = Callable[..., int]
# (execution index, execute ms): for backends that learn execute times later.
ExecuteTimeHook = Callable[[int, float], None]


class LazyBackend(ABC):
    name: str
    device: str
    # True for backends that learn of executions by reading the backend's own reports:
    # the tracer then calls poll() around every sync site and at the end.
    polls: bool = False
    # What fixes call the step's sync and a step closure on this backend.
    names: dict[str, str] = {"mark_step": "mark_step()", "step_closure": "a step closure"}

    def __init__(self, capture_ir: bool = True) -> None:
        self.capture_ir = capture_ir

    @abstractmethod
    def init(self) -> None:
        """Initialise the backend once; the user's own init call must still work."""

    @abstractmethod
    def install_hook(self, on_execution: ExecutionHook, on_execute_time: ExecuteTimeHook) -> None:
        """Call `on_execution` after every graph execution (or at the next poll);
        counter deltas count from this call on. `on_execute_time` fills in an execute
        time that was not known when the execution was reported."""

    def poll(self, final: bool = False) -> None:
        """Report executions seen since the last poll; final: the script has ended,
        wait for the device and report everything."""

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

    @abstractmethod
    def versions(self) -> dict[str, str]:
        """Version strings worth recording with the run (e.g. {"torch": "2.13.0"})."""


BACKENDS = ("ts", "xla")


def get_backend(name: str, capture_ir: bool = True) -> LazyBackend:
    if name == "ts":
        from lazyviz.backends.ts import TorchScriptBackend

        return TorchScriptBackend(capture_ir)
    if name == "xla":
        from lazyviz.backends.xla import XlaBackend

        return XlaBackend(capture_ir)
    raise BackendError(f"unknown backend {name!r} (known: {', '.join(BACKENDS)})")
