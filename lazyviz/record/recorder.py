"""Recording a trace: the one lifecycle that `lazyviz run` (in its child process) and the
API (`with lazyviz.trace("run.trace"):`) share, as memray's `run` records through the
Tracker its API users get. A Recorder claims the path, starts the backend's hook and the
tracer, writes the run's metadata when it starts and when it ends, and closes a complete
trace; its `run` is then the analysed Run every renderer reads.

The backend and its C++ hook are set up once per process and kept; each recording turns
the hook on, wraps the sync sites, and on stop puts them back.
"""
from __future__ import annotations

import atexit
import datetime
import functools
import os
import platform
import sqlite3
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from lazyviz.analysis.findings import Finding
from lazyviz.analysis.run import Run
from lazyviz.backends import BackendError, LazyBackend, backends, get_backend, imported_backend
from lazyviz.errors import LazyvizError
from lazyviz.export.notebook import summary_html
from lazyviz.export.report import json_report
from lazyviz.fix.proposals import Proposal, file_hash, propose
from lazyviz.record.tracer import Tracer, refuse_if_busy, tracing
from lazyviz.trace.files import (
    TraceClaim,
    claim_trace_path,
    free_trace_path,
    held_apart,
    launch_folder,
    numbered_path,
    rank_trace,
)
from lazyviz.trace.reader import Trace
from lazyviz.trace.writer import TraceWriter

F = TypeVar("F", bound=Callable[..., Any])

CAPTURES = ("full", "light")

# Set by torchrun; recorded so traces of one job can be put side by side.
_RANK_VARIABLES = {"RANK": "rank", "LOCAL_RANK": "local_rank", "WORLD_SIZE": "world_size",
                   "TORCHELASTIC_RUN_ID": "run_id"}

# One backend object per backend and process: its hook outlives a recording.
_backends: dict[str, LazyBackend] = {}
_used: set[str] = set()  # backends that have recorded a trace in this process


def _backend(name: str, capture: str) -> LazyBackend:
    if name not in backends():
        raise BackendError(f"unknown backend {name!r} (known: {', '.join(backends())})")
    backend = _backends.get(name)
    if backend is None:
        backend = _backends[name] = get_backend(name, capture_ir=capture == "full")
    elif backend.one_trace_per_process and name in _used:
        raise BackendError(f"the {name} backend sets up what lazyviz reads when it is imported: one trace per "
                           "process; start another process (or use `lazyviz run`)")
    backend.capture_ir = capture == "full"
    return backend


class Recorder:
    """One trace recorded in this process. From Python, make it with `lazyviz.trace(...)`
    and use it as a context manager, a decorator, or with start() and stop() (framework
    callbacks); `lazyviz run`'s child process records through one too (for_runner)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, capture: str = "full",
                 backend: str | None = None, force: bool = False, source: str | None = None,
                 source_lines: bool = True) -> None:
        """path: the trace to write (default: lazyviz-<script>.<pid>-<n>.trace here); an
        existing file is refused unless force=True, and even then only a lazyviz trace
        is replaced. capture: "full" (IR, backend code, stacks) or "light". backend:
        "ts" or "xla"; default: xla when torch_xla is imported, else ts. source_lines:
        with capture "full", tag each IR node with the line that built it (on ts; XLA
        records its own)."""
        if capture not in CAPTURES:
            raise LazyvizError(f"capture must be one of {', '.join(CAPTURES)}, not {capture!r}")
        self._in_notebook = _ipython_shell() is not None
        stem = "notebook" if self._in_notebook else (Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else "python")
        self.path = Path(path) if path is not None else free_trace_path(stem)
        self.capture = capture
        self.backend_name = backend
        self.force = force
        self.source_lines = source_lines
        self.source = source or ("notebook" if self._in_notebook else "api")
        self.argv: list[str] = []  # the script and its arguments, when lazyviz run started it
        self.module = False
        self._claims = True  # claim the path (lazyviz run claims it before the child starts)
        self._started: float | None = None  # perf_counter when the clock starts: the process's, or start()'s
        self._tracer: Tracer | None = None
        self._writer: TraceWriter | None = None
        self._claim: TraceClaim | None = None
        self._ended = False
        self._run: Run | None = None
        self._calls = 0  # as a decorator: calls traced so far
        self.step_limit: int | None = None  # end the script after this many steps (lazyviz run --steps)
        self.iteration_limit: int | None = None  # ... after this many optimizer steps (lazyviz run --iterations)
        self._script: list[str] = []  # the script lazyviz run started, as an absolute path
        self.rank: dict[str, str] | None = None  # a launched process's place among its launcher's (else torchrun's)
        self.after_launch = False  # recording in a process torch_xla.launch started (Launched)
        self.replicas = 1  # threads running a replica each of the same steps (Launched: one per device)

    @classmethod
    def for_runner(cls, path: str, *, capture: str, backend: str, source_lines: bool, argv: list[str],
                   module: bool, started: float, step_limit: int | None = None,
                   iteration_limit: int | None = None) -> Recorder:
        """The recorder of `lazyviz run`'s child: the path is claimed by the parent, which
        holds it for the run; the clock starts when the process did."""
        recorder = cls(path, capture=capture, backend=backend, source="script", source_lines=source_lines)
        recorder.argv, recorder.module, recorder._claims, recorder._started = argv, module, False, started
        recorder.step_limit = step_limit
        recorder.iteration_limit = iteration_limit
        # Absolute now: the script may change directory.
        recorder._script = [] if module or not argv else [os.path.abspath(argv[0])]
        return recorder

    # -- recording --------------------------------------------------------------------
    @property
    def recording(self) -> bool:
        return self._tracer is not None

    @property
    def recorded(self) -> bool:
        """Started and stopped: the trace is complete and can be read."""
        return self._ended

    def start(self) -> Recorder:
        """Start recording. Raises LazyvizError (one line, nothing changed) when the
        backend cannot start, the path is taken, or another trace is recording."""
        if self._tracer is not None or self._ended:
            raise LazyvizError(f"this trace ({self.path}) has already been recorded: make a new lazyviz.trace(...)")
        refuse_if_busy()
        if self._started is None:
            self._started = time.perf_counter()
        started = self._started
        name = self.backend_name or imported_backend(sys.modules)
        backend = _backend(name, self.capture)
        backend.after_launch, backend.replicas = self.after_launch, self.replicas
        claim = claim_trace_path(self.path, self.force, force_hint="force=True") if self._claims else None
        try:
            writer = TraceWriter(self.path)
        except (OSError, sqlite3.Error) as error:
            self._give_up(claim)
            raise LazyvizError(f"cannot write the trace {self.path}: {error}") from None
        outer_files, file_label = _notebook_frames() if self._in_notebook else (frozenset(), None)
        # keep_graphs: a later trace in this process finds the graphs the backend has cached.
        tracer = Tracer(backend, writer, self.capture, started=started, outer_files=outer_files,
                        file_label=file_label, keep_graphs=self._claims, source_lines=self.source_lines,
                        step_limit=self.step_limit, launched=self._launched, iteration_limit=self.iteration_limit)
        try:
            tracer.install()
        except BaseException as error:
            writer.close()
            self._give_up(claim)
            if isinstance(error, BackendError) and "imported before" in str(error) and self._claims:
                package = backends()[name].detects[0]
                raise BackendError(f"{error}: start lazyviz.trace(..., backend={name!r}) before importing {package}, "
                                   "or use `lazyviz run`") from None
            raise
        _used.add(name)
        if writer.journal_note:  # a network filesystem: a note of the run (lazyviz run's summary says it)
            tracer.notes.append(writer.journal_note)
            if self._claims:  # from Python, no summary follows: say it now, once
                print(f"lazyviz: {writer.journal_note}", file=sys.stderr)
        writer.set_run(
            argv=self.argv, module=self.module, source=self.source, backend=backend.name, names=backend.names,
            device=backend.device, capabilities=backend.capabilities().to_json(), capture=self.capture,
            versions={**backend.versions(), "python": platform.python_version()},
            # When recording started, as elapsed_s counts: a viewer's clock then agrees with it.
            start_time=(datetime.datetime.now(datetime.timezone.utc)
                        - datetime.timedelta(seconds=time.perf_counter() - started)).isoformat(timespec="milliseconds"),
            pid=os.getpid(), cwd=os.getcwd(),
            rank=self.rank if self.rank is not None
            else {key: os.environ[var] for var, key in _RANK_VARIABLES.items() if var in os.environ},
        )
        self._tracer, self._writer, self._claim = tracer, writer, claim
        atexit.register(self.stop)  # started and never stopped: the trace still ends complete
        return self

    def _launched(self, fn: Callable) -> Launched:
        """What a launcher (torch_xla.launch) runs in the processes it starts instead of
        `fn`: each of them records its own trace in the folder beside this one."""
        return Launched(fn, str(launch_folder(self.path.resolve())), capture=self.capture,
                        source_lines=self.source_lines, argv=self.argv, module=self.module, source=self.source,
                        step_limit=self.step_limit)

    def _give_up(self, claim: TraceClaim | None) -> None:
        """Nothing was recorded: leave no half trace behind (only a file this recorder made)."""
        if claim is not None:
            claim.release()
            self.path.unlink(missing_ok=True)

    def stop(self, error: BaseException | None = None) -> None:
        """Stop recording and close the trace, complete. error: what ended the traced
        code, kept in the trace as `lazyviz run` keeps a script's exception."""
        if isinstance(error, SystemExit):  # sys.exit(N): a status, as the shell would see it
            code = error.code
            status = 0 if code is None else code & 0xFF if isinstance(code, int) else 1
            if status == 0:
                self.finish(exit_status=0)
                return
            self.finish(exit_status=status, error=f"SystemExit: {code}")
            return
        text = None
        if error is not None:
            text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        self.finish(exit_status=0 if error is None else 130 if isinstance(error, KeyboardInterrupt) else 1,
                    error=f"{type(error).__name__}: {error}" if error is not None else None, traceback_text=text)

    def finish(self, exit_status: int, error: str | None = None, traceback_text: str | None = None,
               error_frames: list[tuple[str, int, str]] | None = None,
               cpu_at_raise: list[tuple[str, str, str]] | None = None) -> None:
        """Stop recording with how the code ended, written once for both ways of
        recording; say on stderr when the trace stopped growing or tracing failed."""
        tracer, writer = self._tracer, self._writer
        if tracer is None or writer is None:
            return
        self._tracer = None
        self._ended = True
        atexit.unregister(self.stop)
        try:
            tracer.stop()
        finally:
            writer.set_run(
                exit_status=exit_status, error=error, traceback=traceback_text, complete=True, steps=tracer.steps(),
                elapsed_s=round(time.perf_counter() - (self._started or 0.0), 3), tracer_errors=tracer.errors,
                notes=tracer.notes, error_frames=error_frames or [], cpu_at_raise=cpu_at_raise or [],
                stopped_after_steps=tracer.stopped_at_step,
                stopped_after_iterations=tracer.stopped_at_iteration,
                sources=source_hashes([*self._script, *tracer.user_files()]),
            )
            writer.close()
            if self._claim is not None:
                self._claim.release()
        if writer.error:  # e.g. a full disk: the code went on, the trace stopped there
            print(f"lazyviz: the trace stopped growing after {writer.written} executions: {writer.error}",
                  file=sys.stderr)
            apart = held_apart(writer.path)
            if apart:
                print(apart, file=sys.stderr)
        if tracer.errors:
            print(f"lazyviz: tracing failed {len(tracer.errors)} time(s), first: {tracer.errors[0]}", file=sys.stderr)

    def __enter__(self) -> Recorder:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop(error)  # the exception, if any, goes on unchanged

    def __call__(self, function: F) -> F:
        """As a decorator: each call of `function` records one trace, the first at this
        recorder's path, later ones at <stem>-2<suffix>, <stem>-3<suffix>, ..."""

        @functools.wraps(function)
        def traced(*args: object, **kwargs: object) -> object:
            self._calls += 1
            recorder = self if self._calls == 1 else Recorder(
                numbered_path(self.path, self._calls), capture=self.capture, backend=self.backend_name,
                source_lines=self.source_lines, force=self.force, source=self.source)
            traced.last = recorder  # type: ignore[attr-defined]
            with recorder:
                return function(*args, **kwargs)

        return traced  # type: ignore[return-value]

    # -- results ----------------------------------------------------------------------
    @property
    def run(self) -> Run:
        """The recorded run, analysed (read once, however many results are asked for)."""
        if self._tracer is not None:
            raise LazyvizError(f"the trace {self.path} is still recording: stop it first")
        if not self._ended:
            raise LazyvizError("nothing recorded yet: start the trace first")
        if self._run is None:
            self._run = Run(Trace(self.path))
        return self._run

    def report(self) -> dict:
        """The report `lazyviz report --format json` prints for this trace."""
        return json_report(self.run)

    @property
    def findings(self) -> list[Finding]:
        """What the run says to fix, worst first (the report's findings)."""
        return self.run.findings

    def fixes(self) -> list[Proposal]:
        """For each finding, its edit (Proposal.changes, Proposal.diff()) or what to change
        by hand (Proposal.summary): what `lazyviz fix` prints for this trace."""
        return propose(self.run)

    def _repr_html_(self) -> str:
        if not self._ended:
            return f"<p>lazyviz: {'recording' if self._tracer else 'not started'} {self.path}</p>"
        return summary_html(self.run)

    def __repr__(self) -> str:
        state = "recording" if self._tracer else "recorded" if self._ended else "not started"
        return f"<lazyviz trace {str(self.path)!r} {state}, capture={self.capture}>"


class Launched:
    """The function a launcher runs in each process it starts (torch_xla.launch,
    xmp.spawn), as lazyviz hands it over: the process records its own trace,
    rank<R>.trace in `folder`, as a torchrun rank does. It is pickled to the process, and
    called there once per device thread: the first call starts the trace, the last one
    to return ends it. The launcher has imported torch_xla and started its runtime by
    then, but run no graph, and XLA reads its debug settings at the first one. Called in
    a process that records already (debug_single_process=True), it is only `fn`."""

    _lock = threading.Lock()
    _calls = 0  # calls running in this process
    _recorder: Recorder | None = None

    def __init__(self, fn: Callable, folder: str, *, capture: str, source_lines: bool, argv: list[str],
                 module: bool, source: str, step_limit: int | None = None) -> None:
        self.fn, self.folder, self.capture, self.source_lines = fn, folder, capture, source_lines
        self.argv, self.module, self.source, self.step_limit = argv, module, source, step_limit
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def __call__(self, *args: object, **kwargs: object) -> object:
        cls = type(self)
        with cls._lock:
            if cls._calls == 0 and not tracing():
                cls._recorder = self._start()
            cls._calls += 1
        error: BaseException | None = None
        try:
            return self.fn(*args, **kwargs)
        except BaseException as raised:
            error = raised
            raise
        finally:
            with cls._lock:
                cls._calls -= 1
                if cls._calls == 0 and cls._recorder is not None:
                    recorder, cls._recorder = cls._recorder, None
                    recorder.stop(error)

    def _start(self) -> Recorder | None:
        """This process's recording, or None (said on stderr) where it cannot start: then
        the function runs untraced."""
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr

        rank = os.environ.get("PJRT_LOCAL_PROCESS_RANK", "?")
        try:
            rank = str(xr.process_index())
            recorder = Recorder(rank_trace(Path(self.folder), rank), capture=self.capture, backend="xla",
                                source=self.source, source_lines=self.source_lines)
            recorder.argv, recorder.module, recorder.after_launch = self.argv, self.module, True
            recorder.step_limit = self.step_limit  # lazyviz run --steps: each process ends after them
            recorder._script = [] if self.module or not self.argv else [os.path.abspath(self.argv[0])]
            recorder.rank = {"rank": rank, "local_rank": os.environ.get("PJRT_LOCAL_PROCESS_RANK", "0"),
                             "world_size": str(xr.process_count())}
            # The launcher runs the function in a thread per device of the process.
            recorder.replicas = len(xm.get_xla_supported_devices())
            os.makedirs(self.folder, exist_ok=True)
            recorder.start()
        except Exception as error:  # never the script's failure: it runs on, untraced
            print(f"lazyviz: process {rank} of torch_xla.launch runs untraced: {error}", file=sys.stderr)
            return None
        if recorder.replicas > 1 and recorder._tracer is not None:
            recorder._tracer.notes.append(
                f"this process ran the function on {recorder.replicas} devices, a thread each: every step has an "
                "execution per device, and a graph compiles once per device")
        return recorder


MAX_HASHED = 200  # user files hashed at the end of a run (`lazyviz fix --write` checks them)


def source_hashes(files: list[str]) -> dict[str, str]:
    """{absolute path: sha256} of the user's source files, as they were when the run
    ended: `lazyviz fix --write` edits only a file that still has its hash."""
    hashes = {path: file_hash(path) for path in map(os.path.abspath, files[:MAX_HASHED])}
    return {path: digest for path, digest in hashes.items() if digest is not None}  # gone: nothing to check


# -- notebooks -------------------------------------------------------------------------
def _ipython_shell() -> Any:
    if "IPython" not in sys.modules:
        return None
    from IPython import get_ipython

    return get_ipython()


def _notebook_frames() -> tuple[frozenset[str], Callable[[str], str] | None]:
    """Under IPython: stack walks stop at the shell's frames (below the cell), and a
    cell's file is named as IPython numbers it ("In [3]")."""
    shell = _ipython_shell()
    if shell is None:
        return frozenset(), None
    import IPython.core.interactiveshell as interactiveshell

    numbers = getattr(getattr(shell, "compile", None), "_filename_map", {})

    def label(file: str) -> str:
        number = numbers.get(file)
        return f"In [{number}]" if isinstance(number, int) else file

    # The magics' file, named, not imported: lazyviz.ipython imports this module.
    magics = str(Path(__file__).parents[1] / "ipython.py")
    return frozenset({interactiveshell.__file__, magics}), label
