"""The XLA backend's hand-on: XLA's execution and compile reports, each turned into the
execution the tracer records (its graph, cause, counters), frameless ones too. A part of
XlaBackend with its own state: what it has handed on, and what awaits its execute time."""
from __future__ import annotations

import linecache
import re
import sys
import time
import zlib
from collections import deque
from pathlib import Path

from lazyviz.backends import CompiledGraph, ExecutionHook, SyncCause
from lazyviz.backends.xla_counters import XlaCounters
from lazyviz.backends.xla_dynamo import RUN_CAUSE, RecompileReasons, runs_pending_inputs
from lazyviz.backends.xla_eager import EagerGraphs, built_at, compiled_flags
from lazyviz.backends.xla_io import HloDump, Steady
from lazyviz.backends.xla_read import XlaReads
from lazyviz.backends.xla_reports import Report, hlo_entry_size
from lazyviz.backends.xla_rows import RepeatedRows
from lazyviz.hlo_text import hlo_as_ir
from lazyviz.trace.model import COMPILED_CALL, EAGER_BUILT, EAGER_FOUND, PENDING_INPUTS, TRACED_AGAIN


def _fallback_shares(batch: list[Report], moved: dict[str, int]) -> list[dict[str, int]]:
    """The counters that moved during a batch of reports, one share per report: all with
    the first, but a fallback op's with a later report that reads values at a line that
    names the op. XLA counts a fallback (aten::median) when it is called, before the
    read of its inputs runs its own graph, so the counter lands in the window of the
    execution before (checked on torch_xla 2.9: `loss = err.mean() + 0.1 *
    torch.median(err)` after a grid_sample that fell back)."""
    shares: list[dict[str, int]] = [dict(moved)] + [{} for _ in batch[1:]]
    for number, report in enumerate(batch[1:], start=1):
        user = _user_line(report.frames)
        if user is None or _HOST_READ not in report.cause:
            continue
        words = set(re.findall(r"\w+", linecache.getline(*user)))
        for name in [n for n in shares[0] if n.startswith("aten::") and not n.endswith("_backward")]:
            if name.removeprefix("aten::").split(".")[0] in words:
                shares[number][name] = shares[0].pop(name)
    return shares


_LAZYVIZ_DIR = str(Path(__file__).resolve().parents[1])
_HOST_READ = "trying to access tensor value"  # XLA's cause for a sync that reads values on the host


def _count(report: Report, what: str) -> int:
    """XLA's "Number of Graph Inputs/Outputs" of a graph it compiled; -1 if it gave none."""
    try:
        return int(report.field(f"Number of Graph {what}"))
    except ValueError:
        return -1


def _read_call(frames: list[tuple[str, int, str]]) -> str:
    """What read values on the host at the user's line XLA names: `.to(...)` where the
    line says so (the one such call lazyviz does not wrap), else a read in general."""
    for file, line, _function in frames:
        if not file.startswith(_LAZYVIZ_DIR) and "site-packages" not in file:
            return "Tensor.to()" if ".to(" in linecache.getline(file, line) else "a read of tensor values"
    return "a read of tensor values"


def _user_line(frames: list[tuple[str, int, str]]) -> tuple[str, int] | None:
    """The innermost line outside the frameworks and lazyviz of XLA's report's frames."""
    return next(((file, line) for file, line, _ in frames
                 if not file.startswith(_LAZYVIZ_DIR) and "site-packages" not in file), None)


def _on_this_thread(user: tuple[str, int] | None) -> bool:
    """Is this line on this thread's stack now?"""
    frame = sys._getframe(1)
    while frame is not None:
        if (frame.f_code.co_filename, frame.f_lineno) == user:
            return True
        frame = frame.f_back
    return user is None


class XlaHandOn:
    """reads: XLA's reports as read (XlaReads); counters: its counters (XlaCounters); hlo:
    the compiler's dump where lazyviz reads it, with ir_from_hlo where each graph's IR is
    written from it; replicas: threads running a replica each; sync and syncing: the sync
    cause on each thread and the threads inside a sync site (the tracer's wrappers set
    them); on_execution: the tracer's hook. rows: the rows repeated without the tracer,
    while the tracer asks for them (record_repeats)."""

    def __init__(self, reads: XlaReads, counters: XlaCounters, hlo: HloDump | None, ir_from_hlo: bool,
                 replicas: int, sync: SyncCause, syncing: dict, on_execution: ExecutionHook) -> None:
        self._reads = reads
        self._counters = counters
        self._hlo = hlo
        self._ir_from_hlo = ir_from_hlo
        self._replicas = replicas
        self._sync = sync
        self._syncing = syncing
        self._on_execution = on_execution
        self.rows: RepeatedRows | None = None
        self.compile_ms: deque[float] = deque()  # compile times not yet given to their graph
        self.awaiting_execute: deque[int] = deque()  # executions without an execute time yet
        self.last_index: int | None = None  # the last execution handed on
        self.last_end: float | None = None  # the previous execution's end, on the tracer's clock
        self.after_fallback = False  # the last row the tracer made was a fallback's: no repeats
        self.handed: Steady | None = None  # what hand_on last handed on that could repeat
        self._frameless_seen = 0
        self._frameless_graphs: dict[tuple, str] = {}  # light capture: Python stack -> graph last compiled there
        self._recompile_reasons = RecompileReasons()  # torch.compile's, read as its graphs compile
        self.eager = EagerGraphs()  # eager mode's executions: their graphs, those awaiting a time
        self.eager_times: deque[float] = deque()  # eager execute times read, not yet given to an execution
        self._line_causes: dict[tuple[str, int] | None, tuple[str, str | None]] = {}  # a thread per device: by line

    def hand_on_pending(self, frameless: int, compiles: int, final: bool = False,
                        counters: dict[str, int] | None = None) -> None:
        """The executions XLA reported since the last poll, then those it ran without a
        Python frame (no report: autograd's thread), which come after them as far as
        lazyviz can tell. counters: as a poll just read them, where it did."""
        self.handed = None
        if counters is None or final or compiles:
            counters = self._counters.read(final, compiles > 0)
        moved = self._counters.moved_since_last(counters)
        # Backward ops that fell back ran on autograd's thread: the frameless executions'.
        backward = {name: n for name, n in moved.items() if frameless and name.endswith("_backward")}
        moved = {name: n for name, n in moved.items() if name not in backward}
        reported_compiles = self._reads.new_compile_reports()
        # The counters that moved go with the first execution of the batch, but a fallback
        # op named at a later one's line: its counter moved before the read of its inputs.
        batch = self._reads.take_pending()
        for report, share in zip(batch, _fallback_shares(batch, moved)):
            self.hand_on(report, share)
        frameless_compiles = max(compiles - reported_compiles, 0)
        if frameless and self._counters.eager_mode():
            self._hand_on_eager(frameless, frameless_compiles, {**moved, **backward})
            return
        for number in range(frameless):
            self._hand_on_frameless({**moved, **backward} if number == 0 else {}, number < frameless_compiles)

    def _hand_on_eager(self, count: int, compiles: int, counters: dict[str, int]) -> None:
        """Eager mode's single-op executions since the last poll (xla_eager), each at the
        line that built its graph where its HLO names one (full capture), else at the
        poll's; cause "eager"."""
        compile_samples = self._counters.new_eager_times("EagerOpCompileTime")
        execute_samples = self._counters.new_eager_times("EagerOpExecuteTime")
        flags = compiled_flags(count, compiles, [end for end, _ in compile_samples], [end for end, _ in execute_samples])
        compile_ms = deque(ms for _, ms in compile_samples)
        self.eager_times.extend(ms for _, ms in execute_samples)
        stack, frame = [], sys._getframe(1)
        while frame is not None:
            stack.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
            frame = frame.f_back
        where = tuple(stack)
        placed_all = []
        sync = self._sync
        outer = sync.cause, sync.detail
        try:
            for number, compiled in enumerate(flags):
                graph = None
                if compiled:
                    self._frameless_seen += 1
                    graph_id = f"eager-{self._frameless_seen}"
                    ir_text, size, backend_text = "", 0, "(an op run eagerly: XLA writes no analysis in eager mode)"
                    if self._hlo is not None:
                        hlo, before = self._hlo.take(None, "", compiled=True, sweep=False)
                        backend_text += f"\n\n{hlo}" if hlo else ""
                        ir_text, size = self._graph_of("", before)
                    graph = CompiledGraph(graph_id=graph_id, nodes=ir_text.count("\n  %") or size, ir_text=ir_text,
                                          backend_text=backend_text,
                                          compile_ms=compile_ms.popleft() if compile_ms else 0.0)
                    placed = (graph_id, built_at(ir_text, stack))
                    self.eager.compiled(placed)
                else:
                    placed = self.eager.hit(where, number, count) or (f"eager-{self._frameless_seen}", None)
                placed_all.append(placed)
                sync.cause, sync.detail = "eager", EAGER_FOUND if placed[1] is None else EAGER_BUILT
                # Built at its line, not inside the call that polled: that line alone is its stack.
                frames = [placed[1]] if placed[1] is not None else stack
                key = (1 << 62) | zlib.crc32(placed[0].encode())
                index = self.report_execution(key, graph, counters if number == 0 else {}, frames, None)
                self.eager.awaiting_execute.append(index)
                self.last_index = index
        finally:
            sync.cause, sync.detail = outer
        self.eager.batch(where, placed_all)

    def take_eager_times(self, new: list[float]) -> list[tuple[int, float]]:
        """Eager execute times read since (new), with those read before: each to the eager
        execution awaiting it, oldest first."""
        self.eager_times.extend(new)
        paired = []
        while self.eager_times and self.eager.awaiting_execute:
            paired.append((self.eager.awaiting_execute.popleft(), self.eager_times.popleft()))
        return paired

    def _hand_on_frameless(self, counters: dict[str, int], compiled: bool) -> None:
        """An execution XLA counted without a report: its graph is known from the tensors
        dump (full capture); in light capture, a cache hit is taken to be the graph last
        compiled without a frame from the same Python stack."""
        # The Python stack now: the backward() call a poll point reports it from (else the
        # sync that found it), so it gets a user's line.
        stack, frame = [], sys._getframe(1)
        while frame is not None:
            stack.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
            frame = frame.f_back
        graph_hash = self._reads.frameless_graph()
        self._frameless_seen += 1
        where = tuple(stack)
        if graph_hash:
            graph_id = graph_hash[:16]
        elif compiled:
            graph_id = self._frameless_graphs[where] = f"frameless-{self._frameless_seen}"
        else:
            graph_id = self._frameless_graphs.get(where, f"frameless-{self._frameless_seen}")
        graph = None
        if compiled:
            ir_text = self._reads.ir.get(graph_hash, "")
            backend_text = ("(XLA wrote no analysis: this graph ran on a thread without Python frames, "
                            "such as autograd's in backward)")
            size = 0
            if self._hlo is not None:
                hlo, before = self._hlo.take(None, ir_text, compiled=True, sweep=False)
                backend_text += f"\n\n{hlo}" if hlo else ""
                ir_text, size = self._graph_of(ir_text, before)
            graph = CompiledGraph(
                graph_id=graph_id, nodes=ir_text.count("\n  %") or size, ir_text=ir_text, backend_text=backend_text,
                compile_ms=self.compile_ms.popleft() if self.compile_ms else 0.0,
            )
        key = int(graph_id, 16) if graph_hash else (1 << 62) | zlib.crc32(graph_id.encode())
        index = self.report_execution(key, graph, counters, stack, None)
        self.awaiting_execute.append(index)
        self.last_index = index

    def hand_on(self, report: Report, counters: dict[str, int], ran: bool = True) -> int:
        graph_hash = report.graph_hash
        graph = None
        compiles = self._reads.compiles
        at = next((i for i, c in enumerate(compiles) if c.graph_hash == graph_hash), None)
        if at is not None:
            if self._replicas > 1:
                # Device threads compile at their own pace: a compile before this one may be
                # another thread's, whose execution is still to come.
                compile_report = compiles[at]
                del compiles[at]
                compile_ms = self.compile_ms[at] if at < len(self.compile_ms) else 0.0
                if at < len(self.compile_ms):
                    del self.compile_ms[at]
            else:
                # A compile that never ran (a cache warm-up) is dropped with its time.
                while (compile_report := compiles.popleft()).graph_hash != graph_hash:
                    if self.compile_ms:
                        self.compile_ms.popleft()
                compile_ms = self.compile_ms.popleft() if self.compile_ms else 0.0
            ir_text = self._reads.ir.get(graph_hash, "")
            backend_text, size = "\n".join(compile_report.lines), 0
            if self._hlo is not None:
                counts = _count(compile_report, "Inputs"), _count(compile_report, "Outputs")
                hlo, before = self._hlo.take(counts, ir_text, compiled=ran, sweep=self._replicas == 1)
                backend_text += f"\n\n{hlo}" if hlo else ""
                ir_text, size = self._graph_of(ir_text, before)
            graph = CompiledGraph(
                graph_id=graph_hash[:16],
                nodes=ir_text.count("\n  %") or size,
                ir_text=ir_text,
                backend_text=backend_text,
                compile_ms=compile_ms,
            )
        elif counters.get("PersistentCacheHit") and ran:
            # Loaded from XLA's persistent compile cache, not compiled: no report of its
            # compile, no HLO dumped. Its id and a word for it, so its hits name it.
            graph = CompiledGraph(graph_id=graph_hash[:16], nodes=0, ir_text="", compile_ms=0.0, loaded=True,
                                  backend_text="(loaded from XLA's persistent compile cache: an earlier run "
                                               "compiled it, so this run has neither its IR nor its HLO)")
        sync = self._sync
        outer = sync.cause, sync.detail
        if self._replicas > 1:
            # A thread per device: this thread may hand on another's execution. Its cause is
            # that of the sync its thread is in at the line XLA names, else the last one seen
            # there (threads run the same code).
            user = _user_line(report.frames)
            if sync.cause is None or not _on_this_thread(user):
                sync.cause, sync.detail = next(
                    ((cause, detail) for cause, detail, line in list(self._syncing.values()) if line == user),
                    self._line_causes.get(user, ("other", None)))
            self._line_causes[user] = sync.cause, sync.detail
        # A read of values no sync site of ours saw (`.to("cpu")`, left unwrapped: see
        # sync_sites): XLA says it was one. An op that fell back (aten::equal) says more.
        elif _HOST_READ in report.cause and runs_pending_inputs(report.frames):
            sync.cause, sync.detail = "other", PENDING_INPUTS
        elif (sync.cause is None and _HOST_READ in report.cause
                and not any(name.startswith("aten::") for name in counters)):
            sync.cause, sync.detail = "cpu", _read_call(report.frames)
        elif RUN_CAUSE in report.cause:
            # torch.compile's graph, run by the compiled module's call, whenever read; a new
            # one says why dynamo traced again (what TORCH_LOGS=recompiles prints).
            reason = next((r for r in reversed(self._recompile_reasons.new()) if r), "") if graph else ""
            sync.cause, sync.detail = "compiled", COMPILED_CALL + (f"{TRACED_AGAIN}{reason}" if reason else "")
        elif sync.cause is not None and (name := report.field("Graph Name")):
            # The name torch_xla.compile gave the graph (the function's, or name=...).
            base, pending = name.removesuffix("_clear_pending"), name.endswith("_clear_pending")
            sync.detail = f"torch_xla.compile({base})" + (" (ops pending before it)" if pending else "")
        try:
            key = int(graph_hash[:16] or "0", 16)
            # The report's object stands for its text: the parser hands a loop's same text back as the same one.
            site = (report, sync.cause, sync.detail, key) if ran and graph is None and self._replicas == 1 else None
            index = self.report_execution(key, graph, counters, report.frames, site)
            if site is not None:
                self.handed = Steady(outer[0], outer[1], site, counters)
        finally:
            sync.cause, sync.detail = outer
        if ran:  # a graph that never ran gets no ExecuteTime sample
            self.awaiting_execute.append(index)
            self.last_index = index
        return index

    def handed_on_elsewhere(self, indices: range, last_end: float | None = None) -> None:
        """Executions another path handed on (lazyviz's hook, a poll's steady sync): each
        awaits its execute time, and the last is the last handed on (ended at last_end,
        where that path timed it)."""
        self.awaiting_execute.extend(indices)
        if indices:
            self.last_index = indices[-1]
        if last_end is not None:
            self.last_end = last_end

    def next_awaiting_execute(self) -> int | None:
        """The oldest execution still without its execute time (it has it now); None."""
        return self.awaiting_execute.popleft() if self.awaiting_execute else None

    def add_compile_times(self, times: list[float]) -> None:
        """Compile times XLA sampled, for the graphs handed on next, in order."""
        self.compile_ms.extend(times)

    def repeat_into(self, rows: RepeatedRows | None) -> None:
        """Repeat a site's hits as rows here (None: every execution goes to the tracer)."""
        self.rows = rows

    def report_execution(self, key: int, graph: CompiledGraph | None, counters: dict[str, int],
                         frames: list[tuple[str, int, str]], site: tuple | None) -> int:
        """Hand an execution to the tracer, or repeat the row the tracer made for the same
        site (RepeatedRows); its index. The execute time comes with XLA's ExecuteTime
        sample, usually by the next poll."""
        end = time.perf_counter()
        rows = self.rows
        if rows is not None and site is not None and not self.after_fallback:
            index = rows.repeat(site, counters, end, self.last_end)
            if index is not None:
                self.last_end = end
                return index
        previous, self.last_end = self.last_end, end
        recorded = self._on_execution(key, graph, 0.0, counters, frames, site=site, ends=(end, previous))
        # The tracer then takes the next execution from the same call to be the fallback's.
        self.after_fallback = recorded.fallback
        if recorded.repeat and recorded.kind >= 0 and rows is not None and site is not None:
            rows.learn(site, recorded.kind, counters)
        return recorded.index

    def _graph_of(self, ir_text: str, hlo: str) -> tuple[str, int]:
        """The graph's IR (XLA's, else written from its HLO in full capture) and its size:
        without either (light capture), its HLO's instructions, so a graph that grows at
        every sync (no torch_xla.sync() in the loop) is seen by its size."""
        if not ir_text and self._ir_from_hlo:
            ir_text = hlo_as_ir(hlo)
        return ir_text, hlo_entry_size(hlo)
