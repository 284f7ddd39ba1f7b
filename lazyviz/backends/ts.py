"""torch's built-in TorchScript lazy backend (`torch._lazy`, device `lazy`).

The execution hook is a C++ extension (`_lazyviz_hook.cpp`) compiled on first use
with torch's own cpp_extension and cached per torch version and source.
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from types import ModuleType

from lazyviz.backends import BackendError, CompiledGraph, ExecutionHook, LazyBackend, SyncSite

HOOK_SOURCE = Path(__file__).with_name("_lazyviz_hook.cpp")


def hook_build_dir() -> Path:
    # From the package metadata, so `lazyviz run` can check without importing torch.
    from importlib.metadata import version

    torch_version = version("torch")
    digest = hashlib.sha256(HOOK_SOURCE.read_bytes()).hexdigest()[:12]
    cache = Path(os.environ.get("LAZYVIZ_CACHE") or Path.home() / ".cache" / "lazyviz")
    return cache / f"hook-torch{torch_version}-py{sys.version_info[0]}{sys.version_info[1]}-{digest}"


def hook_is_built() -> bool:
    return any(hook_build_dir().glob("lazyviz_hook*.so"))


def load_hook(verbose: bool = False) -> ModuleType:
    """Build (once, ~1 min on 2 cores) and import the C++ execution hook."""
    from torch.utils import cpp_extension

    build_dir = hook_build_dir()
    build_dir.mkdir(parents=True, exist_ok=True)
    try:
        return cpp_extension.load(
            name="lazyviz_hook",
            sources=[str(HOOK_SOURCE)],
            build_directory=str(build_dir),
            extra_cflags=["-O2"],
            verbose=verbose,
        )
    except (RuntimeError, OSError, ImportError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise BackendError(
            f"cannot build lazyviz's execution hook ({first_line}); "
            "it needs a C++ compiler (apt-get install g++) and ninja (pip install ninja)"
        ) from error


class TorchScriptBackend(LazyBackend):
    name = "ts"
    device = "lazy"

    def __init__(self) -> None:
        self._hook: ModuleType | None = None

    def init(self) -> None:
        import torch._lazy.ts_backend

        # Checked on torch 2.13: a second init() raises "Tried to register multiple
        # backend fallbacks", so the user's own call becomes a no-op once we ran it.
        original_init = torch._lazy.ts_backend.init
        original_init()

        def init() -> None:
            return None

        init.__doc__ = original_init.__doc__
        torch._lazy.ts_backend.init = init

    def install_hook(self, on_execution: ExecutionHook, capture_ir: bool) -> None:
        self._hook = load_hook()

        def on_raw_execution(key: int, graph: tuple | None, execute_ms: float, counters: dict) -> None:
            compiled = None
            if graph is not None:
                graph_id, nodes, ir_text, backend_text, compile_ms = graph
                compiled = CompiledGraph(
                    graph_id, nodes, ir_text.decode("utf-8", "replace"),
                    backend_text.decode("utf-8", "replace"), compile_ms,
                )
            on_execution(key, compiled, execute_ms, counters)

        self._hook.install(on_raw_execution, capture_ir)

    def set_hook_enabled(self, enabled: bool) -> None:
        if self._hook is not None:
            self._hook.set_enabled(enabled)

    def counters(self) -> dict[str, int]:
        import torch._lazy.metrics as metrics

        return {name: metrics.counter_value(name) or 0 for name in metrics.counter_names()}

    def sync_sites(self) -> list[SyncSite]:
        import torch
        import torch._lazy

        tensor = torch.Tensor
        return [
            SyncSite(torch._lazy, "mark_step", "mark_step", "mark_step()"),
            SyncSite(tensor, "item", "item", "Tensor.item()"),
            SyncSite(tensor, "__repr__", "print", "repr(tensor)"),
            SyncSite(tensor, "__format__", "print", "format(tensor)"),
            SyncSite(tensor, "cpu", "cpu", "Tensor.cpu()"),
            SyncSite(tensor, "to", "cpu", "Tensor.to()"),
            SyncSite(tensor, "numpy", "cpu", "Tensor.numpy()"),
            SyncSite(tensor, "tolist", "tolist", "Tensor.tolist()"),
            SyncSite(tensor, "__bool__", "bool", "bool(tensor)"),
            # float(t) and int(t) read a scalar just as .item() does.
            SyncSite(tensor, "__float__", "item", "float(tensor)"),
            SyncSite(tensor, "__int__", "item", "int(tensor)"),
            SyncSite(tensor, "__index__", "item", "index(tensor)"),
            *self._collective_sites(),
        ]

    @staticmethod
    def _collective_sites() -> list[SyncSite]:
        """A collective on a lazy tensor runs its pending graph first: name it."""
        import torch.distributed as dist

        if not dist.is_available():
            return []
        names = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                 "reduce_scatter_tensor", "reduce", "all_to_all", "all_to_all_single", "barrier")
        return [SyncSite(dist, name, "other", f"distributed.{name}()") for name in names if hasattr(dist, name)]

    def framework_paths(self) -> list[str]:
        import torch

        return [str(Path(torch.__file__).parent)]

    def versions(self) -> dict[str, str]:
        import torch

        return {"torch": torch.__version__.split("+")[0]}


def build_main() -> int:
    """`python -m lazyviz.backends.ts`: build the hook ahead of time (CI, images)."""
    try:
        load_hook(verbose=False)
    except BackendError as error:
        print(f"lazyviz: {error}", file=sys.stderr)
        return 1
    print(f"lazyviz: execution hook ready in {hook_build_dir()}")
    return 0


if __name__ == "__main__":
    sys.exit(build_main())
