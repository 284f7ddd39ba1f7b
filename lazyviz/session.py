"""lazyviz from Python: `with lazyviz.trace("run.trace"):` records the code inside, in
this process, into the same trace `lazyviz run` writes; every reader works on it.

The backend and its C++ hook are set up once per process and kept; each trace turns the
hook on, wraps the sync sites, and on exit puts them back and closes a complete trace.
"""
from __future__ import annotations

import atexit
import datetime
import functools
import itertools
import os
import platform
import sqlite3
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from lazyviz.backends import BACKENDS, BackendError, LazyBackend, get_backend
from lazyviz.errors import LazyvizError
from lazyviz.trace.files import TraceClaim, claim_trace_path, held_apart
from lazyviz.trace.writer import TraceWriter
from lazyviz.tracer import Tracer, TracerBusy, current_tracer

if TYPE_CHECKING:
    from lazyviz.analysis.findings import Finding

F = TypeVar("F", bound=Callable[..., Any])

CAPTURES = ("full", "light")

# One backend object per backend and process: its hook outlives a trace.
_backends: dict[str, LazyBackend] = {}
_used: set[str] = set()  # backends that have recorded a trace in this process


def _backend(name: str, capture: str) -> LazyBackend:
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r} (known: {', '.join(BACKENDS)})")
    backend = _backends.get(name)
    if backend is None:
        backend = _backends[name] = get_backend(name, capture_ir=capture == "full")
    elif backend.one_trace_per_process and name in _used:
        raise BackendError(f"the {name} backend sets up what lazyviz reads when it is imported: one trace per "
                           "process; start another process (or use `lazyviz run`)")
    backend.capture_ir = capture == "full"
    return backend


def _free_path(stem: str) -> Path:
    for n in itertools.count(1):
        path = Path.cwd() / f"lazyviz-{stem}.{os.getpid()}-{n}.trace"
        if not os.path.lexists(path):
            return path
    raise AssertionError("unreachable")


def _numbered(path: Path, n: int) -> Path:
    return path if n == 1 else path.with_name(f"{path.stem}-{n}{path.suffix}")


class Session:
    """One trace recorded in this process. Use it as a context manager, a decorator, or
    with start() and stop() (framework callbacks). Make it with `lazyviz.trace(...)`."""

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
        self.path = Path(path) if path is not None else _free_path(stem)
        self.capture = capture
        self.backend_name = backend
        self.force = force
        self.source_lines = source_lines
        self.source = source or ("notebook" if self._in_notebook else "api")
        self._tracer: Tracer | None = None
        self._writer: TraceWriter | None = None
        self._claim: TraceClaim | None = None
        self._started = 0.0
        self._ended = False
        self._calls = 0  # as a decorator: calls traced so far

    # -- recording --------------------------------------------------------------------
    @property
    def recording(self) -> bool:
        return self._tracer is not None

    @property
    def recorded(self) -> bool:
        """Started and stopped: the trace is complete and can be read."""
        return self._ended

    def start(self) -> Session:
        """Start recording. Raises LazyvizError (one line, nothing changed) when the
        backend cannot start, the path is taken, or another trace is recording."""
        if self._tracer is not None or self._ended:
            raise LazyvizError(f"this trace ({self.path}) has already been recorded: make a new lazyviz.trace(...)")
        busy = current_tracer()
        if busy is not None:
            raise TracerBusy(f"a trace is already recording in this process ({busy.writer.path}): "
                             "stop it first (traces do not nest)")
        name = self.backend_name or ("xla" if "torch_xla" in sys.modules else "ts")
        backend = _backend(name, self.capture)
        started = time.perf_counter()
        claim = claim_trace_path(self.path, self.force, force_hint="force=True")
        try:
            writer = TraceWriter(self.path)
        except (OSError, sqlite3.Error) as error:
            claim.release()
            self.path.unlink(missing_ok=True)  # the empty file we just created
            raise LazyvizError(f"cannot write the trace {self.path}: {error}") from None
        outer_files, file_label = _notebook_frames() if self._in_notebook else (frozenset(), None)
        tracer = Tracer(backend, writer, self.capture, started=started, outer_files=outer_files,
                        file_label=file_label, keep_graphs=True, source_lines=self.source_lines)
        try:
            tracer.install()
        except BaseException as error:
            writer.close()
            claim.release()
            self.path.unlink(missing_ok=True)  # nothing was recorded: leave no half trace behind
            if isinstance(error, BackendError) and name == "xla" and "imported before" in str(error):
                raise BackendError(f"{error}: start lazyviz.trace(..., backend='xla') before importing torch_xla, "
                                   "or use `lazyviz run`") from None
            raise
        _used.add(name)
        writer.set_run(
            argv=[], source=self.source, backend=backend.name, names=backend.names, device=backend.device,
            capture=self.capture, versions={**backend.versions(), "python": platform.python_version()},
            start_time=(datetime.datetime.now(datetime.timezone.utc)
                        - datetime.timedelta(seconds=time.perf_counter() - started)).isoformat(timespec="milliseconds"),
            pid=os.getpid(), cwd=os.getcwd(), rank={},
        )
        self._tracer, self._writer, self._claim, self._started = tracer, writer, claim, started
        atexit.register(self.stop)  # started and never stopped: the trace still ends complete
        return self

    def stop(self, error: BaseException | None = None) -> None:
        """Stop recording and close the trace, complete. error: what ended the traced
        code, kept in the trace as `lazyviz run` keeps a script's exception."""
        tracer, writer, claim = self._tracer, self._writer, self._claim
        if tracer is None or writer is None or claim is None:
            return
        self._tracer = None
        self._ended = True
        atexit.unregister(self.stop)
        try:
            tracer.stop()
        finally:
            text = None
            if error is not None:
                text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
            status = 0 if error is None else 130 if isinstance(error, KeyboardInterrupt) else 1
            writer.set_run(
                exit_status=status, error=f"{type(error).__name__}: {error}" if error is not None else None,
                traceback=text, complete=True, steps=tracer.steps(),
                elapsed_s=round(time.perf_counter() - self._started, 3), tracer_errors=tracer.errors,
                notes=tracer.notes,
            )
            writer.close()
            claim.release()
        if writer.error:
            print(f"lazyviz: the trace stopped growing after {writer.written} executions: {writer.error}",
                  file=sys.stderr)
            apart = held_apart(writer.path)
            if apart:
                print(apart, file=sys.stderr)

    def __enter__(self) -> Session:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop(error)  # the exception, if any, goes on unchanged

    def __call__(self, function: F) -> F:
        """As a decorator: each call of `function` records one trace, the first at this
        session's path, later ones at <stem>-2<suffix>, <stem>-3<suffix>, ..."""

        @functools.wraps(function)
        def traced(*args: object, **kwargs: object) -> object:
            self._calls += 1
            session = self if self._calls == 1 else Session(
                _numbered(self.path, self._calls), capture=self.capture, backend=self.backend_name,
                source_lines=self.source_lines,
                force=self.force, source=self.source)
            traced.last = session  # type: ignore[attr-defined]
            with session:
                return function(*args, **kwargs)

        return traced  # type: ignore[return-value]

    # -- results ----------------------------------------------------------------------
    def _data(self) -> Any:
        from lazyviz.export import RunData
        from lazyviz.trace import Trace

        if self._tracer is not None:
            raise LazyvizError(f"the trace {self.path} is still recording: stop it first")
        if not self._ended:
            raise LazyvizError("nothing recorded yet: start the trace first")
        return RunData(Trace(self.path))

    def report(self) -> dict:
        """The report `lazyviz report --format json` prints for this trace."""
        from lazyviz.export.report import json_report

        data = self._data()
        return json_report(data.run, data.executions, data.ir_texts)

    @property
    def findings(self) -> list[Finding]:
        """What the run says to fix, worst first (the report's findings)."""
        from lazyviz.analysis import analyze

        data = self._data()
        return analyze(data.run, data.executions, data.ir_texts).findings

    def _repr_html_(self) -> str:
        from lazyviz.export.notebook import summary_html

        if not self._ended:
            return f"<p>lazyviz: {'recording' if self._tracer else 'not started'} {self.path}</p>"
        return summary_html(self._data())

    def __repr__(self) -> str:
        state = "recording" if self._tracer else "recorded" if self._ended else "not started"
        return f"<lazyviz trace {str(self.path)!r} {state}, capture={self.capture}>"


def trace(path: str | os.PathLike[str] | None = None, *, capture: str = "full", backend: str | None = None,
          force: bool = False, source_lines: bool = True) -> Session:
    """Record lazy-tensor graph executions in this process into a trace file:

        with lazyviz.trace("run.trace", capture="light") as run:
            train()
        print(run.findings)

    Also a decorator (`@lazyviz.trace("run.trace")`) and, for callbacks,
    `session = lazyviz.trace(...).start()` ... `session.stop()`. See Session."""
    return Session(path, capture=capture, backend=backend, force=force, source_lines=source_lines)


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

    import lazyviz.ipython as magics

    numbers = getattr(getattr(shell, "compile", None), "_filename_map", {})

    def label(file: str) -> str:
        number = numbers.get(file)
        return f"In [{number}]" if isinstance(number, int) else file

    return frozenset({interactiveshell.__file__, magics.__file__}), label
