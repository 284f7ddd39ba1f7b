"""Runs inside the traced process: turns backend execution signals into execution
records and hands them to the trace writer. Everything here is on the hot path."""
from __future__ import annotations

import os
import runpy
import sys
import time
from array import array
from collections.abc import Callable, Hashable
from pathlib import Path

from lazyviz.backends import (
    CompiledGraph,
    Frame,
    LazyBackend,
    Recorded,
    SyncCause,
)
from lazyviz.errors import LazyvizError
from lazyviz.record.iterations import IterationCounter
from lazyviz.record.stack_walk import StackWalk
from lazyviz.record.sync_wrappers import MAX_ERRORS, SyncWrappers, _Process
from lazyviz.trace.model import PERSISTENT_COUNTERS
from lazyviz.trace.schema import ExecutionRecord, GraphRecord, split_row
from lazyviz.trace.writer import TraceWriter
from lazyviz.trace.writer import stored as _stored

# Counters that name the sync itself rather than an op without a lowering.
_SYNC_OPS = frozenset({"aten::_local_scalar_dense"})


MAX_FAILURE_TEXT = 4000  # of a backend's error message (TorchScript's quote whole graphs)


class TracerBusy(LazyvizError):
    """A second trace asked for while one records in this process."""


def tracing() -> bool:
    """Does a trace record in this process now?"""
    return _Process.current is not None


def refuse_if_busy() -> None:
    """Raise TracerBusy while a trace records in this process: traces do not nest."""
    if _Process.current is not None:
        raise TracerBusy(f"a trace is already recording in this process ({_Process.current.writer.path}): "
                         "stop it first (traces do not nest)")


class Tracer:
    """One recording in this process: the backend's executions as rows for the writer.
    Its parts: `stacks` (the stack walk) and `wrappers` (the calls it wraps)."""

    def __init__(self, backend: LazyBackend, writer: TraceWriter, capture: str = "full",
                 started: float | None = None, outer_files: frozenset[str] = frozenset(),
                 file_label: Callable[[str], str] | None = None, keep_graphs: bool = False,
                 source_lines: bool = True, step_limit: int | None = None,
                 launched: Callable[[Callable], Callable] | None = None, iteration_limit: int | None = None) -> None:
        """outer_files: files whose frames are below the traced code (a runner, a
        notebook's shell): stack walks stop there. file_label: how to name a code
        object's file in the trace (a notebook cell as "In [3]"). keep_graphs: keep every
        compiled graph for later tracers in this process (costs their texts' memory).
        source_lines: with capture full, tag every IR node with the user's line that
        built it (about 0.5-1 us per node). step_limit: end the script (SystemExit 0)
        when this many steps have ended (`lazyviz run --steps N`). launched: what the
        function a launcher runs in the processes it starts becomes, so that each of them
        records a trace of its own. iteration_limit: end the script (SystemExit 0) when
        this many optimizer steps have run (`lazyviz run --iterations N`: a loop without
        steps)."""
        self.source_lines = source_lines
        self.backend = backend
        self.writer = writer
        self.capture = capture
        # [executions recorded, steps completed], shared with a backend that records
        # repeated rows itself (record_repeats) and numbers them from here. Steps are
        # step-ending syncs that returned (not torch's MarkStep counter, which a script or
        # test harness may reset with torch._lazy.metrics.reset()).
        self._counts = array("q", [0, 0])
        self._take_repeated: Callable[[], list[tuple]] | None = None
        self.errors: list[str] = []  # lazyviz's own failures, swallowed so the script goes on
        self._failures: list[dict] = []  # executions the backend failed to compile or run, with its message
        self.notes: list[str] = []  # what tracing changed in what the backend shows the user
        self._sync = SyncCause()  # what the sync-site wrappers set while they run (the backend's, once installed)
        self._last_fallback_call: tuple[int, int] | None = None
        self._last_fallback_op: str | None = None
        self._fallback_ops: dict[int, str | None] = {}  # a fallback row's kind -> its op (for `follows`)
        # The backend's computation key -> its graph; without keep_graphs, without its texts
        # (they are written once, on the miss, and need not stay in the script's memory).
        self._graph_of: dict[int, CompiledGraph] = _Process.graphs if keep_graphs else {}
        self._keep_graphs = keep_graphs
        self._graphs_seen: set[str] = set()
        self._started = time.perf_counter() if started is None else started
        self._last_end: float | None = None  # None until the first execution: start-up is apart
        self.stacks = StackWalk(capture, RUNNER_FILES | outer_files, file_label)
        self.wrappers = SyncWrappers(self, backend, writer, self._counts, self.stacks, self.errors, self.notes,
                                     self._sync_raised, step_limit, launched)
        self.iterations = IterationCounter(self._counts, iteration_limit, self.wrappers.iteration_limit_reached,
                                           lambda fields: writer.set_run(**fields), self._optimizer_step_at)

    def _optimizer_step_at(self) -> tuple[str, int, str] | None:
        """The user's line whose optimizer.step() is running (asked from its hook)."""
        return self.stacks.user_frame(self.stacks.stack(sys._getframe(1), to_user_frame=True))

    @property
    def execution_count(self) -> int:
        """Executions recorded so far."""
        return self._counts[0]

    @property
    def stopped_at_step(self) -> int | None:
        """The step after which step_limit ended the script."""
        return self.wrappers.stopped_at_step

    @property
    def stopped_at_iteration(self) -> int | None:
        """The optimizer step after which iteration_limit ended it."""
        return self.wrappers.stopped_at_iteration

    # -- set-up -----------------------------------------------------------------------
    def install(self) -> None:
        refuse_if_busy()
        self.backend.init()
        self.stacks.add_framework(self.backend.framework_paths(), self.backend.capabilities().packages)
        self.backend.install_hook(self._on_execution, self._on_execute_time)
        self._sync = self.backend.sync_state()
        take = self._take_repeated = self.backend.record_repeats(self._counts, self._started)
        self.writer.set_source(self._rows_source(take) if take is not None else None)
        if self.capture == "full" and self.source_lines:
            self.backend.record_source_lines(self.stacks.classify_code)
        self.wrappers.install_calls(self._sync)
        self.iterations.install()
        if not _Process.fork_handler:  # register_at_fork cannot be undone: once per process
            os.register_at_fork(after_in_child=_Process.after_fork_in_child)
            _Process.fork_handler = True
        _Process.current = self
        try:
            self.wrappers.install_sync_sites()
        except BaseException:
            self.stop()  # half installed is not installed: unwrap, turn the hook off, free the process
            raise


    def stop(self) -> None:
        """Report what is pending, turn the hook off and put the sync sites back."""
        if _Process.current is not self:
            return
        try:
            if self.backend.polls:
                try:
                    self.backend.poll(final=True)
                except Exception as failure:  # lazyviz's own: what was recorded stays, the rest is put back
                    if len(self.errors) < MAX_ERRORS:
                        self.errors.append(f"{type(failure).__name__}: {failure}")
            self.notes += [note for note in self.backend.differences() if note not in self.notes]
            self.errors += self.backend.own_errors()[:max(MAX_ERRORS - len(self.errors), 0)]
            # Fallbacks after the last execution (a script that raised right after one):
            # no execution carries them, yet they may be why it raised.
            moved = self.backend.counters_since_last_execution()
            after = {name: count for name, count in moved.items()
                     if name.startswith("aten::") and name not in _SYNC_OPS}
            if after:
                self.writer.set_run(fallbacks_after_last_execution=after)
            others = {name: count for name, count in moved.items() if not name.startswith("aten::")}
            if others:
                self.writer.set_run(counters_after_last_execution=others)
            if moved and not self._counts[0]:  # no graph ran, yet the lazy core was used
                self.writer.set_run(device_used=True)
            if self.iterations.count:
                self.writer.set_run(**self.iterations.run_fields())
        finally:
            self.iterations.remove()
            self.backend.set_hook_enabled(False)
            if self._take_repeated is not None:  # the last window's repeated rows
                self.writer.add_rows(self._take_repeated())
                self.writer.set_source(None)
                self.backend.record_repeats(None, 0.0)
                self._take_repeated = None
            self.wrappers.remove()
            _Process.current = None

    def _rows_source(self, take: Callable[[], list[tuple]]) -> Callable[[], list[tuple]]:
        """The writer's source, once a window on its thread: the backend's repeated rows,
        the last of them carrying the counters the backend read meanwhile off the
        script's thread (with no row taken, the backend's next execution carries them)."""
        def take_rows() -> list[tuple]:
            rows = take()
            if moved := self.backend.counters_read_elsewhere(carried=bool(rows)):
                last = rows[-1]
                rows[-1] = (last[0], last[1], self.writer.kind_with_counters(last[2], moved), *last[3:])
            return rows

        return take_rows

    def _after_fork(self) -> None:
        """A forked child stops tracing: the writer's thread was not copied with it, and
        the trace belongs to the parent. The child runs on, untraced."""
        self.backend.set_hook_enabled(False)
        self.backend.record_repeats(None, 0.0)  # and the backend's sync sites pass calls on
        self.writer.abandon()

    # -- per execution (hot path) --------------------------------------------------
    def _on_execution(
        self, key: int, graph: CompiledGraph | None, execute_ms: float, counters: dict[str, int],
        backend_stack: list[Frame] | None = None, site: Hashable | None = None,
        ends: tuple[float, float | None] | None = None, follows: int | None = None,
        error: str | None = None,
    ) -> Recorded:
        """`counters`: the counters that moved since the previous execution;
        `backend_stack`: where the backend saw it, when it reports after the fact;
        `site`: the calling stack's signature, when the backend has one (a backend that
        repeats rows itself acts on the answer's kind and repeat);
        `ends`: when it and the previous execution ended, when the backend times them;
        `follows`: the fallback kind it follows from the same site (-1: none), from a
        backend that repeats rows (its rows never reach this tracer's own bookkeeping).
        `error`: the backend's message when the graph failed to compile or run: the
        execution is recorded all the same, and the message kept with it.
        A failure of lazyviz's own is counted and swallowed; KeyboardInterrupt and
        SystemExit (a signal handler may raise them here) go on to the script."""
        try:
            recorded = self._record(key, graph, execute_ms, counters, backend_stack, site, ends, follows)
            if error is not None:
                self._add_failure(recorded.index, error)
            return recorded
        except Exception as failure:
            if len(self.errors) < MAX_ERRORS:
                self.errors.append(f"{type(failure).__name__}: {failure}")
            return Recorded(-1)

    def _add_failure(self, index: int, error: str) -> None:
        if len(self._failures) < MAX_ERRORS and all(f["execution"] != index for f in self._failures):
            self._failures.append({"execution": index, "error": error[:MAX_FAILURE_TEXT]})
            self.writer.set_run(failures=self._failures)

    def _sync_raised(self, error: Exception) -> None:
        """A sync site raised. When the error came from inside the backend (not from
        Python code it ran, as a step closure), the executions the backend says failed
        are kept as failures with the message the script got."""
        try:
            traceback = error.__traceback__
            while traceback is not None and traceback.tb_next is not None:
                traceback = traceback.tb_next
            if traceback is not None and self.stacks.is_user_file(traceback.tb_frame.f_code.co_filename):
                return  # the user's own code raised inside the sync (a step closure)
            message = f"{type(error).__name__}: {error}"
            for index in self.backend.failed_executions():
                if index >= 0:
                    self._add_failure(index, message)
        except Exception as failure:
            if len(self.errors) < MAX_ERRORS:
                self.errors.append(f"{type(failure).__name__}: {failure}")

    def _record(
        self, key: int, graph: CompiledGraph | None, execute_ms: float, counters: dict[str, int],
        backend_stack: list[Frame] | None, site: Hashable | None = None,
        ends: tuple[float, float | None] | None = None, follows: int | None = None,
    ) -> Recorded:
        """One execution the backend reported, written as a row: when it ended, where it
        came from, why, which graph, how long the Python between graphs took."""
        end = self._end_time(ends)
        # Here, not in a helper: the frame count skips _record, _on_execution and the backend adapter's.
        frame = sys._getframe(3) if backend_stack is None else None
        stack, call = self.stacks.calling_stack(frame, backend_stack)
        user_frame = self.stacks.user_frame(stack)
        fallback_ops = {name: n for name, n in counters.items()
                        if name.startswith("aten::") and name not in _SYNC_OPS}
        cause, detail = self._cause(fallback_ops, follows, call)
        known = self._known_graph(key, graph)
        graph_id, nodes = (known.graph_id, known.nodes) if known is not None else (f"unknown-{key:x}", 0)
        compile_ms = graph.compile_ms if graph else 0.0  # a loaded graph's: the load
        sync_ms = compile_ms + execute_ms
        start = end - sync_ms / 1000
        trace_ms = self._tracing_ms(start, end)

        counts = self._counts
        # Read and bumped with no call in between: no other thread (nor the backend's
        # repeated rows, numbered under the GIL) can take the same index.
        index = counts[0]
        counts[0] = index + 1
        new_graph = None
        if known is not None and known.graph_id not in self._graphs_seen:  # new to this trace
            self._graphs_seen.add(known.graph_id)
            new_graph = GraphRecord(known.graph_id, known.nodes, known.ir_text, known.backend_text, index)
        stack_id, new_stack = self.stacks.stack_record(stack)
        file, line, function = user_frame or (None, None, None)
        record = ExecutionRecord(
            idx=index,
            step=counts[1],  # completed before this execution; a mark_step's own is the step it ends
            cause=cause, detail=detail, file=file, line=line, function=function, stack_id=stack_id,
            graph=graph_id, nodes=nodes, cache="miss" if graph is not None and not graph.loaded else "hit",
            sync_ms=sync_ms, trace_ms=trace_ms, compile_ms=compile_ms, execute_ms=execute_ms,
            start_ms=(start - self._started) * 1000,
            # Light capture keeps only how a new graph was had (XLA's persistent cache).
            fallback_ops=fallback_ops, counters=dict(counters) if self.capture == "full" else
            {name: n for name, n in counters.items() if name in PERSISTENT_COUNTERS} if counters else {},
            # The call of the user's that led here (a library's own sync or fallback inside it).
            call=self.stacks.user_call(frame) if cause != "mark_step" and frame is not None else None,
            context=_test_running(),
        )
        self.writer.add_execution(record, new_graph, new_stack)
        return self._answer(record, repeat=site is not None and graph is None, follows=follows)

    def _end_time(self, ends: tuple[float, float | None] | None) -> float:
        """When the execution ended: the backend's clock when it says (then also when the
        previous one, maybe a row it repeated, ended), else now."""
        if ends is None:
            return time.perf_counter()
        end, previous_end = ends
        if previous_end is not None:
            self._last_end = previous_end
        return end


    def _cause(self, fallback_ops: dict[str, int], follows: int | None, call: tuple | None) -> tuple[str, str | None]:
        """Why it ran: the sync site running, else a fallback op (counted now, or the one
        it follows: one fallback op can force several executions, one per lazy input, and
        only the first sees the counter move), else "other"."""
        sync = self._sync
        if sync.cause is not None:
            cause, detail = sync.cause, sync.detail
        elif fallback_ops:
            cause, detail = "fallback", next(iter(fallback_ops))
        elif follows is not None and follows >= 0:  # the backend saw the fallback (it may have repeated it)
            cause, detail = "fallback", self._fallback_ops.get(follows)
        elif follows is None and call is not None and call == self._last_fallback_call:
            cause, detail = "fallback", self._last_fallback_op
        else:
            cause, detail = "other", None
        if cause == "fallback":
            self._last_fallback_call, self._last_fallback_op = call, detail
        else:
            self._last_fallback_call = None
        return cause, detail

    def _known_graph(self, key: int, graph: CompiledGraph | None) -> CompiledGraph | None:
        """The graph behind the backend's key: given on its miss (kept, its texts only
        with keep_graphs), looked up on a hit."""
        if graph is None:
            return self._graph_of.get(key)
        self._graph_of[key] = graph if self._keep_graphs else CompiledGraph(graph.graph_id, graph.nodes, "", "", 0.0)
        return graph

    def _tracing_ms(self, start: float, end: float) -> float:
        """The Python between the previous execution's end and this one's start."""
        last_end, self._last_end = self._last_end, end
        if last_end is None:
            # Interpreter start-up, imports and model building: not tracing time.
            self.writer.set_run(startup_ms=round((start - self._started) * 1000, 3))
            return 0.0
        return max(0.0, (start - last_end) * 1000)


    def _answer(self, record: ExecutionRecord, repeat: bool, follows: int | None) -> Recorded:
        """What the backend is told: a later hit from this stack, under this cause, after
        the same fallback or none, with these counters moving, is this row again with new
        times, so it repeats the row as this row's kind."""
        fallback = record.cause == "fallback"
        kind = -1
        if repeat or (fallback and follows is not None):
            kind = self.writer.kind_id(split_row(_stored(record))[0])
            if fallback:
                self._fallback_ops[kind] = record.detail
        return Recorded(record.idx, kind, repeat, fallback)

    def _on_execute_time(self, index: int, execute_ms: float) -> None:
        self.writer.set_execute_ms(index, execute_ms)


    def steps(self) -> int:
        return self._counts[1]

    def user_files(self) -> list[str]:
        """The user's files whose code ran while recording (real files, not "<string>")."""
        return self.stacks.user_files()


def _test_running() -> str | None:
    """Under pytest, the test that ran the execution (an env lookup costs ~1 us: only there)."""
    if "_pytest" not in sys.modules:
        return None
    return os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0] or None


# Frames of lazyviz's runner and of runpy below the script: the stack walk stops there.
RUNNER_FILES = frozenset({str(Path(__file__).with_name("child.py")), runpy.__file__, "<frozen runpy>"})
