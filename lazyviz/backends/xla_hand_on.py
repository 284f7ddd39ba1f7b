"""XlaBackend's hand-on: XLA's execution and compile reports, each turned into
the execution the tracer records (its graph, cause, counters), frameless ones too."""
from __future__ import annotations

import linecache
import re
import sys
import time
import zlib

from lazyviz.backends import (
    CompiledGraph,
)
from lazyviz.backends.xla_io import (
    _HOST_READ,
    _MAX_REPEATS,
    _READ_EACH_SECOND,
    _count,
    _on_this_thread,
    _read_call,
    _Steady,
    _Tail,
    _user_line,
    echoed,
)
from lazyviz.backends.xla_reports import Report, hlo_entry_size
from lazyviz.hlo_text import hlo_as_ir


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


class XlaHandOn:
    """Part of XlaBackend (lazyviz/backends/xla.py): its state is set up there."""

    def _hand_on_pending(self, frameless: int, compiles: int, final: bool = False) -> None:
        """The executions XLA reported since the last poll, then those it ran without a
        Python frame (no report: autograd's thread), which come after them as far as
        lazyviz can tell."""
        counters = self._counters_read
        if counters is None or final or compiles:
            counters = self._xla_counters.read(final, compiles > 0)
        moved = {name: value - self._xla_counters.last.get(name, 0) for name, value in counters.items()
                 if value != self._xla_counters.last.get(name, 0)}
        self._xla_counters.last = counters
        # Backward ops that fell back ran on autograd's thread: the frameless executions'.
        backward = {name: n for name, n in moved.items() if frameless and name.endswith("_backward")}
        moved = {name: n for name, n in moved.items() if name not in backward}
        reported_compiles = self._compile_reports - self._compile_reports_seen
        self._compile_reports_seen = self._compile_reports
        # The counters that moved go with the first execution of the batch, but a fallback
        # op named at a later one's line: its counter moved before the read of its inputs.
        batch = list(self._pending)
        self._pending.clear()
        for report, share in zip(batch, _fallback_shares(batch, moved)):
            self._hand_on(report, share)
        frameless_compiles = max(compiles - reported_compiles, 0)
        for number in range(frameless):
            self._hand_on_frameless({**moved, **backward} if number == 0 else {}, number < frameless_compiles)

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
        frameless = self._graph_parser.frameless
        graph_hash = frameless.popleft() if frameless else ""
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
            ir_text = self._ir.get(graph_hash, "")
            backend_text = ("(XLA wrote no analysis: this graph ran on a thread without Python frames, "
                            "such as autograd's in backward)")
            size = 0
            if self._hlo is not None:
                hlo, before = self._hlo.take(None, ir_text, compiled=True, sweep=False)
                backend_text += f"\n\n{hlo}" if hlo else ""
                ir_text, size = self._graph_of(ir_text, before)
            graph = CompiledGraph(
                graph_id=graph_id, nodes=ir_text.count("\n  %") or size, ir_text=ir_text, backend_text=backend_text,
                compile_ms=self._compile_ms.popleft() if self._compile_ms else 0.0,
            )
        key = int(graph_id, 16) if graph_hash else (1 << 62) | zlib.crc32(graph_id.encode())
        index = self._report_execution(key, graph, counters, stack, None)
        self._awaiting_execute.append(index)
        self._last_index = index

    def failed_executions(self) -> list[int]:
        """A graph that failed to compile left a Compilation Analysis and no execution: it
        is handed on now, as an execution that never ran. A graph that failed to run was
        handed on at its sync; the error surfaces at the next read of its results, so it
        is the last execution."""
        with self._polling:  # threads: one at a time
            if self._fast is not None:
                self._settle()
            self._read_reports()
            if self._unexpected is not None:
                # A sync inside a compiled function that forbids them: XLA refused to run it.
                report, self._unexpected = self._unexpected, None
                self._executed += 1  # XLA counted its cache lookup: not a frameless execution
                self.poll()
                return [self._hand_on(report, {}, ran=False)]
            if self._last_compile is not None:
                report, self._last_compile = self._last_compile, None
                # XLA counted its cache lookup as an execution: not a frameless one.
                self._executed += 1
                self.poll()  # the executions reported before it
                self._take_compile_times()  # XLA times a compile that failed too
                return [self._hand_on(report, {}, ran=False)]
            self.poll()
            return [self._last_index] if self._last_index is not None else []

    def _hand_on(self, report: Report, counters: dict[str, int], ran: bool = True) -> int:
        graph_hash = report.graph_hash
        graph = None
        at = next((i for i, c in enumerate(self._compiles) if c.graph_hash == graph_hash), None)
        if at is not None:
            if self.replicas > 1:
                # Device threads compile at their own pace: a compile before this one may be
                # another thread's, whose execution is still to come.
                compile_report = self._compiles[at]
                del self._compiles[at]
                compile_ms = self._compile_ms[at] if at < len(self._compile_ms) else 0.0
                if at < len(self._compile_ms):
                    del self._compile_ms[at]
            else:
                # A compile that never ran (a cache warm-up) is dropped with its time.
                while (compile_report := self._compiles.popleft()).graph_hash != graph_hash:
                    if self._compile_ms:
                        self._compile_ms.popleft()
                compile_ms = self._compile_ms.popleft() if self._compile_ms else 0.0
            ir_text = self._ir.get(graph_hash, "")
            backend_text, size = "\n".join(compile_report.lines), 0
            if self._hlo is not None:
                counts = _count(compile_report, "Inputs"), _count(compile_report, "Outputs")
                hlo, before = self._hlo.take(counts, ir_text, compiled=ran, sweep=self.replicas == 1)
                backend_text += f"\n\n{hlo}" if hlo else ""
                ir_text, size = self._graph_of(ir_text, before)
            graph = CompiledGraph(
                graph_id=graph_hash[:16],
                nodes=ir_text.count("\n  %") or size,
                ir_text=ir_text,
                backend_text=backend_text,
                compile_ms=compile_ms,
            )
        assert self._on_execution is not None
        sync = self._sync
        outer = sync.cause, sync.detail
        if self.replicas > 1:
            # A thread per device: this thread may hand on another's execution. Its cause is
            # that of the sync its thread is in at the line XLA names, else the last one seen
            # there (threads run the same code).
            user = _user_line(report.frames)
            if sync.cause is None or not _on_this_thread(user):
                sync.cause, sync.detail = next(
                    ((cause, detail) for cause, detail, line in list(self.syncing.values()) if line == user),
                    self._line_causes.get(user, ("other", None)))
            self._line_causes[user] = sync.cause, sync.detail
        # A read of values no sync site of ours saw (`.to("cpu")`, left unwrapped: see
        # sync_sites): XLA says it was one. An op that fell back (aten::equal) says more.
        elif (sync.cause is None and _HOST_READ in report.cause
                and not any(name.startswith("aten::") for name in counters)):
            sync.cause, sync.detail = "cpu", _read_call(report.frames)
        elif sync.cause is not None and (name := report.field("Graph Name")):
            # The name torch_xla.compile gave the graph (the function's, or name=...).
            base, pending = name.removesuffix("_clear_pending"), name.endswith("_clear_pending")
            sync.detail = f"torch_xla.compile({base})" + (" (ops pending before it)" if pending else "")
        try:
            key = int(graph_hash[:16] or "0", 16)
            # The report's object stands for its text: the parser hands a loop's same text back as the same one.
            site = (report, sync.cause, sync.detail, key) if ran and graph is None and self.replicas == 1 else None
            index = self._report_execution(key, graph, counters, report.frames, site)
            if site is not None:
                self._handed = _Steady(outer[0], outer[1], site, counters)
        finally:
            sync.cause, sync.detail = outer
        if ran:  # a graph that never ran gets no ExecuteTime sample
            self._awaiting_execute.append(index)
            self._last_index = index
        return index

    def _report_execution(self, key: int, graph: CompiledGraph | None, counters: dict[str, int],
                          frames: list[tuple[str, int, str]], site: tuple | None) -> int:
        """Hand an execution to the tracer, or repeat the row the tracer made for the same
        site (see record_repeats); its index. The execute time comes with XLA's
        ExecuteTime sample, usually by the next poll."""
        end = time.perf_counter()
        repeats = self._repeats
        if repeats is not None and site is not None and not self._after_fallback:
            found = repeats.get(site)
            if found is not None and found[1] == counters:
                counts = self._shared_counts
                index = counts[0]
                counts[0] = index + 1
                trace_ms = (end - self._last_end) * 1000 if self._last_end is not None else 0.0
                self._last_end = end
                row = [index, counts[1], found[0], 0.0, max(trace_ms, 0.0), 0.0, 0.0, (end - self._started) * 1000]
                with self._rows_lock:
                    self._rows.append(row)
                    self._row_at[index] = row
                return index
        previous, self._last_end = self._last_end, end
        assert self._on_execution is not None
        recorded = self._on_execution(key, graph, 0.0, counters, frames, site=site, ends=(end, previous))
        # The tracer then takes the next execution from the same call to be the fallback's.
        self._after_fallback = recorded.fallback
        # A row whose counters hold the copies read once a second is not repeated: each
        # repeat would carry that second's copies again (the run's copies counted twice).
        if (recorded.repeat and recorded.kind >= 0 and repeats is not None and site is not None
                and len(repeats) < _MAX_REPEATS and not any(name in _READ_EACH_SECOND for name in counters)):
            repeats[site] = (recorded.kind, dict(counters))
        return recorded.index

    def _graph_of(self, ir_text: str, hlo: str) -> tuple[str, int]:
        """The graph's IR (XLA's, else written from its HLO in full capture) and its size:
        without either (light capture), its HLO's instructions, so a graph that grows at
        every sync (no torch_xla.sync() in the loop) is seen by its size."""
        if not ir_text and self._ir_from_hlo:
            ir_text = hlo_as_ir(hlo)
        return ir_text, hlo_entry_size(hlo)

    def _read_reports(self, text: str | None = None) -> None:
        if text is None:
            text = self._reports.read()
        # At level 0 XLA prints only an unexpected execution: most texts hold none.
        if self._echo is not None and text and (self._echo >= 1 or "Unexpected Execution Analysis: " in text):
            shown = echoed(text, self._echo)
            if shown:
                sys.stderr.write(shown)
                sys.stderr.flush()
        for report in self._report_parser.feed(text):
            if report.kind == "Execution":
                self._pending.append(report)
                self._last_compile = None
            elif report.kind == "Compilation":
                self._compiles.append(report)
                self._last_compile = report
                self._compile_reports += 1
            elif report.kind == "Unexpected Execution":  # XLA raises at once: it never ran
                self._unexpected = report
            elif report.kind == "Post Compilation" and self._compiles:
                self._compiles[-1].add_lines(["", *report.lines])

    def _read_graphs(self) -> None:
        if self._graphs is None:
            if self._dump is None:
                return
            # XLA appends the device ordinal to the name it was given.
            found = sorted(self._dump.parent.glob(self._dump.name + "*"))
            if not found:
                return
            self._graphs = _Tail(found[0], self._dump_sizes.get(found[0], 0))
        self._ir.update(self._graph_parser.feed(self._graphs.read()))
