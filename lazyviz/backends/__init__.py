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


# (computation key, graph on its first execution or None, execute ms,
#  counters that moved since the previous execution, with how much)
ExecutionHook = Callable[[int, "CompiledGraph | None", float, "dict[str, int]"], None]


class LazyBackend(ABC):
    name: str
    device: str

    @abstractmethod
    def init(self) -> None:
        """Initialise the backend once; the user's own init call must still work."""

    @abstractmethod
    def install_hook(self, on_execution: ExecutionHook, capture_ir: bool) -> None:
        """Call `on_execution` after every graph execution, in the executing thread;
        counter deltas count from this call on."""

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


BACKENDS = ("ts",)


def get_backend(name: str) -> LazyBackend:
    if name == "ts":
        from lazyviz.backends.ts import TorchScriptBackend

        return TorchScriptBackend()
    raise BackendError(f"unknown backend {name!r} (known: {', '.join(BACKENDS)})")
