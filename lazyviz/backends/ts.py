"""torch's built-in TorchScript lazy backend (`torch._lazy`, device `lazy`).

The execution hook is a C++ extension (`hook/hook.cpp` and its parts) compiled on first use
with torch's own cpp_extension and cached per torch version and source.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TextIO

from lazyviz.backends import (
    BackendError,
    CodeClassifier,
    CompiledGraph,
    ExecuteTimeHook,
    ExecutionHook,
    LazyBackend,
    Recorded,
    SyncCause,
    SyncSite,
)
from lazyviz.backends._sites import collective_sites, tensor_sync_sites

# The hook's C++ source: hook.cpp includes a header per concern (one translation unit).
HOOK_FOLDER = Path(__file__).with_name("hook")
HOOK_MAIN = "hook.cpp"
HOOK_NAME = "lazyviz_hook"
# A row the hook repeated (its `Row`): idx, step, kind, then the five times.
REPEATED_ROW = struct.Struct("=qqqddddd")
# A new build removes lazyviz's own builds that no run has loaded for this long: every
# change of the hook's source (or of torch) builds into a new folder, about 1 MB each.
UNUSED_BUILD_S = 30 * 24 * 3600
BUILD_LOCK = "lazyviz-build.lock"  # in every folder lazyviz builds in: what marks it as ours


def hook_build_dir() -> Path:
    """One folder per hook source and torch install: two checkouts or venvs never build
    over each other. From the package metadata, so `lazyviz run` can check it without
    importing torch."""
    from importlib.metadata import distribution

    torch_dist = distribution("torch")
    key = hashlib.sha256()
    for part in sorted(HOOK_FOLDER.iterdir()):
        key.update(part.name.encode() + b"\0" + part.read_bytes())
    key.update(str(torch_dist.locate_file("")).encode())
    key.update(f"{torch_dist.version} {sys.version_info[:2]} {sys.platform}".encode())
    cache = Path(os.environ.get("LAZYVIZ_CACHE") or Path.home() / ".cache" / "lazyviz")
    version = torch_dist.version.split("+")[0]
    return cache / f"hook-torch{version}-py{sys.version_info[0]}{sys.version_info[1]}-{key.hexdigest()[:12]}"


def built_hook() -> Path | None:
    found = sorted(hook_build_dir().glob(f"{HOOK_NAME}*.so"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def hook_is_built() -> bool:
    return built_hook() is not None


# Said once when the user's own LTC dump made lazyviz give up per-node source lines.
DUMP_KEPT = ("LTC_SAVE_TENSORS_FILE is set: your dump is written as it is untraced (whole stacks, no "
             "node locations), so this run has no per-node source lines; sync sites are recorded as usual")


# A node's location as torch._lazy.debug prints it in IR text and in DOT labels.
_IR_LOCATION = re.compile(r", location=[^,\n]*")
_DOT_LOCATION = re.compile(r"\\nlocation=[^\\\"]*")


def load_hook(verbose: bool = False) -> ModuleType:
    """Import the C++ execution hook, building it first if needed (once, ~1 min on 2
    cores). A built hook is imported directly: torch's loader would run ninja each time,
    and a different ninja on PATH rebuilds everything silently."""
    import importlib.util

    import torch  # noqa: F401 - the extension links against the loaded libtorch

    library = built_hook() or _build_hook(verbose)
    spec = importlib.util.spec_from_file_location(HOOK_NAME, library)
    if spec is None or spec.loader is None:
        raise BackendError(f"cannot load lazyviz's execution hook from {library}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as error:
        raise BackendError(f"cannot load lazyviz's execution hook ({error}); remove {library.parent} "
                           "to rebuild it") from None
    try:
        os.utime(library.parent)  # in use: see prune_unused_builds()
    except OSError:
        pass
    return module


def prune_unused_builds(cache: Path, keep: Path) -> list[Path]:
    """Remove the hook builds in `cache` that lazyviz made (they hold its build lock)
    and that no run has loaded for UNUSED_BUILD_S, but never `keep`, nor one whose build
    is running. Returns what it removed; a folder it cannot remove stays."""
    import fcntl

    cutoff = time.time() - UNUSED_BUILD_S
    removed = []
    for folder in sorted(cache.glob("hook-*")):
        try:
            if folder == keep or folder.is_symlink() or not (folder / BUILD_LOCK).is_file() \
                    or folder.stat().st_mtime > cutoff:
                continue
            with open(folder / BUILD_LOCK) as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while a build runs there
                shutil.rmtree(folder)
            removed.append(folder)
        except OSError:
            continue
    return removed


def _build_hook(verbose: bool) -> Path:
    import fcntl

    from torch.utils import cpp_extension

    build_dir = hook_build_dir()
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / BUILD_LOCK, "w") as our_lock:
        # Ours is released by the kernel if a build dies; torch's `lock` file is not.
        fcntl.flock(our_lock, fcntl.LOCK_EX)
        if built_hook() is not None:  # another lazyviz built it while we waited
            return built_hook()  # type: ignore[return-value]
        torch_lock = build_dir / "lock"
        if torch_lock.exists():
            # We hold the only lock under which a build runs here: this one is left by
            # a build that was killed (pytorch/pytorch#189245), and torch would wait on
            # it forever.
            print(f"lazyviz: removing a stale build lock left by an interrupted build: {torch_lock}",
                  file=sys.stderr)
            torch_lock.unlink(missing_ok=True)
        for part in HOOK_FOLDER.iterdir():  # build.ninja then names these copies only
            shutil.copyfile(part, build_dir / part.name)
        try:
            cpp_extension.load(name=HOOK_NAME, sources=[str(build_dir / HOOK_MAIN)], build_directory=str(build_dir),
                               # NDEBUG: where Python cannot allocate an object (a run out of memory),
                               # pybind11 throws, which the hook catches, rather than abort the script.
                               extra_cflags=["-O2", "-DNDEBUG"], verbose=verbose)
        except KeyboardInterrupt:
            raise BackendError("interrupted while building the execution hook; it is built on the next run",
                               130) from None
        except (RuntimeError, OSError, ImportError, subprocess.SubprocessError) as error:
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise BackendError(
                f"cannot build lazyviz's execution hook ({first_line}); "
                "it needs a C++ compiler (apt-get install g++) and ninja (pip install ninja)"
            ) from error
    library = built_hook()
    if library is None:
        raise BackendError(f"building lazyviz's execution hook left no library in {build_dir}")
    for old in prune_unused_builds(build_dir.parent, keep=build_dir):
        print(f"lazyviz: removed an old execution hook build unused for 30 days: {old}", file=sys.stderr)
    return library


class TorchScriptBackend(LazyBackend):
    name = "ts"
    device = "lazy"
    names = {"mark_step": "torch._lazy.mark_step()", "step_closure": "torch._lazy.add_step_closure"}

    def __init__(self, capture_ir: bool = True) -> None:
        super().__init__(capture_ir)
        self._hook: ModuleType | None = None
        self._on_execution: ExecutionHook | None = None
        self._original_debug: dict[str, Callable] = {}  # torch._lazy.debug helpers wrapped while lines are on
        self._original_to: Callable | None = None
        self._own_to = False  # did torch.Tensor define `to` itself (not inherited) before we wrapped it

    def init(self) -> None:
        import torch._lazy.ts_backend

        hook = load_hook()
        # Checked on torch 2.13: a second init() raises "Tried to register multiple
        # backend fallbacks", so the user's own call becomes a no-op once the backend is
        # up. From Python (lazyviz.trace) the user may have initialised it already.
        if not hook.has_backend():
            torch._lazy.ts_backend.init()
        original_init = torch._lazy.ts_backend.init
        if getattr(original_init, "__wrapped_by_lazyviz__", False):
            return

        def init() -> None:
            return None

        init.__doc__ = original_init.__doc__
        init.__wrapped_by_lazyviz__ = True  # type: ignore[attr-defined]
        torch._lazy.ts_backend.init = init

    def install_hook(self, on_execution: ExecutionHook, on_execute_time: ExecuteTimeHook) -> None:
        # Execute times are measured in the hook itself: on_execute_time is never needed.
        # The C++ hook wraps the backend once per process; a later trace in the same
        # process (lazyviz.trace) only points it at its own callback and turns it on.
        self._on_execution = on_execution
        if self._hook is not None:
            self._hook.set_capture_ir(self.capture_ir)
            self._hook.set_enabled(True)
            return
        self._hook = load_hook()

        def on_raw_execution(key: int, graph: tuple | None, execute_ms: float, counters: dict, site: int,
                             end: float, previous_end: float | None, follows: int,
                             error: str | None = None) -> Recorded:
            compiled = None
            if graph is not None:
                graph_id, nodes, ir_text, backend_text, compile_ms = graph
                compiled = CompiledGraph(
                    graph_id, nodes, ir_text.decode("utf-8", "replace"),
                    backend_text.decode("utf-8", "replace"), compile_ms,
                )
            return self._on_execution(key, compiled, execute_ms, counters, None, site, (end, previous_end), follows,
                                      error)

        self._hook.install(on_raw_execution, self.capture_ir)

    def counters_since_last_execution(self) -> dict[str, int]:
        return dict(self._hook.take_moved()) if self._hook is not None else {}

    def differences(self) -> list[str]:
        if self._hook is not None and self._hook.users_dump_kept():
            return [DUMP_KEPT]
        return []

    def sync_state(self) -> SyncCause:
        if self._hook is None:
            return SyncCause()
        return self._hook.SyncState()  # type: ignore[no-any-return]

    def wrap_sync_site(self, original: Callable, site: SyncSite, counts: object, ends_step: bool,
                       slow: Callable, on_raise: Callable[[Exception], None]) -> Callable | None:
        if self._hook is None:
            return None
        wrapper = self._hook.wrap_sync_site(original, site.cause, site.label, counts, ends_step,
                                            self.empty_sync_ends_step, site.runs_closures)
        return functools.update_wrapper(wrapper, original)  # type: ignore[no-any-return]

    def record_repeats(self, counts: object, started: float) -> Callable[[], list[tuple]] | None:
        if self._hook is None:
            return None
        hook = self._hook
        hook.set_repeats(counts, started, time.perf_counter())
        if counts is None:
            return None

        def take_rows() -> list[tuple]:
            return list(REPEATED_ROW.iter_unpack(hook.take_rows()))

        return take_rows

    def set_hook_enabled(self, enabled: bool) -> None:
        if self._hook is not None:
            self._hook.set_enabled(enabled)
            if not enabled:
                self.record_source_lines(None)

    def piece_calls(self) -> list[tuple[object, str]]:
        import torch

        # Checked on torch 2.13: split (and chunk, through it) falls back as split_copy,
        # whose pieces are CPU tensors that say lazy:0.
        return [(torch.Tensor, "split"), (torch.Tensor, "chunk"), (torch.Tensor, "unbind")]

    def lost_piece(self, tensor: object) -> bool:
        return self._hook is not None and not self._hook.is_lazy(tensor)

    def record_source_lines(self, classify: CodeClassifier | None) -> None:
        import torch

        if self._hook is None:
            return
        if classify is not None and os.environ.get("LTC_SAVE_TENSORS_FILE"):
            # The user's own dump must read as untraced: nodes carry no frames, and the
            # dump's stack is torch's own without lazyviz's runner.
            self._hook.keep_users_dump()
            self._hook.set_source_lines(classify)
            return
        self._hook.set_source_lines(classify)
        self._debug_helpers_as_untraced(classify is not None)
        if classify is None:
            if self._original_to is not None:
                if self._own_to:
                    torch.Tensor.to = self._original_to  # type: ignore[method-assign]
                else:
                    del torch.Tensor.to  # inherited from torch._C.TensorBase, as before
                self._original_to = None
            return
        if self._original_to is None:
            self._own_to = "to" in vars(torch.Tensor)
            self._original_to = original = torch.Tensor.to
            note_upload = self._hook.note_upload

            # Data moved to the device uploads on its first use, in another line: note
            # this one, so the graph's input names where the batch was made.
            @functools.wraps(original)
            def to(tensor: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
                result = original(tensor, *args, **kwargs)
                if result is not tensor and result.device.type == "lazy" and tensor.device.type != "lazy":
                    note_upload(result)
                return result

            torch.Tensor.to = to  # type: ignore[method-assign]

    def _debug_helpers_as_untraced(self, on: bool) -> None:
        """torch._lazy.debug's dump_ir and render_ir_graph print each node's location
        when nodes carry frames, which source lines give them: a user calling them sees
        their text as untraced (torch 2.13 prints none)."""
        import torch._lazy.debug as debug

        if not on:
            for name, original in self._original_debug.items():
                if getattr(getattr(debug, name, None), "__wrapped__", None) is original:  # not wrapped again since
                    setattr(debug, name, original)
            self._original_debug.clear()
            return
        for name, pattern in (("dump_ir", _IR_LOCATION), ("render_ir_graph", _DOT_LOCATION)):
            original = getattr(debug, name, None)
            if original is None or name in self._original_debug:
                continue
            self._original_debug[name] = original

            def untraced(*args: object, _original: Callable = original, _pattern: re.Pattern = pattern,
                         **kwargs: object) -> object:
                text = _original(*args, **kwargs)
                return _pattern.sub("", text) if isinstance(text, str) else text

            setattr(debug, name, functools.wraps(original)(untraced))

    def counters(self) -> dict[str, int]:
        import torch._lazy.metrics as metrics

        return {name: metrics.counter_value(name) or 0 for name in metrics.counter_names()}

    def sync_sites(self) -> list[SyncSite]:
        import torch._lazy


        # mark_step() runs the step's closures through the module's run_step_closures
        # (looked up at call time): wrapped, a read inside a closure is its own sync.
        return [SyncSite(torch._lazy, "mark_step", "mark_step", "mark_step()"),
                SyncSite(torch._lazy, "run_step_closures", "mark_step", "step closures", runs_closures=True),
                *tensor_sync_sites(), *collective_sites()]

    def framework_paths(self) -> list[str]:
        import torch

        return [str(Path(torch.__file__).parent)]

    def versions(self) -> dict[str, str]:
        import torch

        return {"torch": torch.__version__.split("+")[0]}


class _Building:
    """Says that the hook builds, and when it is built: on a terminal a spinner with the
    seconds so far (a build takes 25-60 s, silent otherwise), elsewhere a line at each end."""

    FRAMES = "|/-\\"

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self.stream = stream
        self.live = stream.isatty()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._spin, name="lazyviz-build-progress", daemon=True)
        self.started = time.monotonic()

    def __enter__(self) -> _Building:
        self._say(f"lazyviz: building the execution hook for this torch (once, about a minute) in {hook_build_dir()}")
        if self.live:
            self._thread.start()
        return self

    def _spin(self) -> None:
        frame = 0
        while not self._done.wait(0.25):
            frame += 1
            self._write(f"\r  {self.FRAMES[frame % 4]} {time.monotonic() - self.started:.0f} s")

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        self._done.set()
        if self.live:
            self._thread.join()
            self._write("\r\033[K")
        if kind is None:
            self._say(f"lazyviz: built the execution hook in {time.monotonic() - self.started:.0f} s")

    def _say(self, text: str) -> None:
        self._write(text + "\n")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass


def prepare() -> None:
    """Before `lazyviz run` starts the script: build the hook if needed, saying so."""
    if hook_is_built():
        return
    try:
        with _Building(), warnings.catch_warnings():
            # torch's import warnings (no NumPy) are the script's to see, at its start, once.
            warnings.simplefilter("ignore")
            load_hook()
    except KeyboardInterrupt:
        raise BackendError("interrupted while building the execution hook; it is built on the next run",
                           130) from None


def build_main() -> int:
    """`python -m lazyviz.backends.ts`: build the hook ahead of time (CI, images)."""
    try:
        with contextlib.nullcontext() if hook_is_built() else _Building():
            load_hook()
    except BackendError as error:
        print(f"lazyviz: {error}", file=sys.stderr)
        return 1
    print(f"lazyviz: execution hook ready in {hook_build_dir()}")
    return 0


if __name__ == "__main__":
    sys.exit(build_main())
