"""XlaBackend's polls: read what XLA wrote since the last sync site, hand on
what is new, and arm lazyviz's C hook for a loop's steady syncs (hook/xla_steady.h)."""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, MutableSequence
from types import ModuleType

from lazyviz.backends.ts import REPEATED_ROW
from lazyviz.backends.xla_io import _AWAITING_MOST, _EXECUTE_READ_S, _READ_EACH_SECOND, _STEADY_KEPT, _TRANSFERS_READ_S, _Steady


class XlaPolls:
    """Part of XlaBackend (lazyviz/backends/xla.py): its state is set up there."""

    # -- polling ------------------------------------------------------------------
    def poll(self, final: bool = False) -> None:
        if not self._enabled:
            return
        fast = self._fast
        if fast is not None:
            if not final and fast.xla_poll():  # nothing new, or the steady sync once more
                return
            with self._polling:
                self._settle()
                if final or self._pending or self._reports.descriptor() is None or self._xla_counters.lookups() != self._executed:
                    self._poll(final)
                elif self._awaiting_execute and self._execute_times_due():
                    self._take_execute_times()
                self._arm()
            return
        if not final and not self._pending and self._xla_counters.lookups() == self._executed:
            # Nothing ran since the last poll (the poll before a sync, a step's closures):
            # XLA writes an execution's analysis before it counts the execution's cache
            # lookup. Most polls end here, without the lock (a stale look only polls again).
            if self._awaiting_execute and self._execute_times_due():
                with self._polling:
                    self._take_execute_times()
            return
        with self._polling:
            self._poll(final)

    def _settle(self) -> None:
        """What lazyviz's hook handed on since it was armed, as if this poll had (it
        disarms): XLA's lookups, the executions awaiting their time, the last one, the
        counters; and the report text it read and did not take, read first."""
        assert self._fast is not None
        settled = self._fast.xla_settle()
        if settled is None:
            return
        count, first, last_end, unread, values = settled
        if unread:
            self._reports.put_back(unread)
        if count:
            self._executed += count
            self._awaiting_execute.extend(range(first, first + count))
            self._last_index, self._last_end = first + count - 1, last_end
            self._xla_counters.last.update(values)

    def _arm(self) -> None:
        """After a poll here, the polls after it are lazyviz's hook's, as long as they are
        the steady syncs: only where nothing is half handed on (a report read and not
        handed on, a compile awaiting its execution, an open block, a fallback's row)."""
        assert self._fast is not None
        descriptor = self._reports.descriptor()
        if (not self._steady or descriptor is None or self._pending or self._compiles or self._repeats is None
                or self._last_compile is not None or self._unexpected is not None or self._after_fallback
                or not self._report_parser.idle):
            return
        if self._steady_changed or len(self._repeats) != self._fast_tried:
            # A text is the hook's once the tracer said its row repeats, as _steady has it
            # now (a counter XLA made since may move with it).
            self._steady_changed, self._fast_tried = False, len(self._repeats)
            for text, steady in self._steady.items():
                if self._fast_texts.get(text) is steady:
                    continue
                found = self._repeats.get(steady.site)
                if found is not None and found[1] == steady.moved:
                    self._fast.xla_add_text(text.encode(), steady.cause, steady.detail, found[0], steady.moved,
                                            steady.stack, steady.site[0].graph_hash)
                    self._fast_texts[text] = steady
        # The copies' metrics, read here once a second (full capture), are not the hook's.
        transfers_due = self._xla_counters.transfers_read_at + _TRANSFERS_READ_S if self.capture_ir else math.inf
        counters = {name: value for name, value in self._xla_counters.last.items() if name not in _READ_EACH_SECOND}
        self._fast.xla_arm(descriptor, self._executed, self._compiled, counters, len(self._xla_counters.fallback_ops),
                           self._last_end, transfers_due, self._execute_read_at + _EXECUTE_READ_S,
                           len(self._awaiting_execute))

    def _poll(self, final: bool) -> None:
        if final:
            import torch_xla.core.xla_model as xm

            try:  # the last execute times; a broken runtime must not break the exit
                xm.wait_device_ops()
            except Exception:
                pass
        text = self._reports.read()
        steady = self._steady.get(text) if text and not final else None
        if steady is None or not self._steady_again(steady):
            self._read_reports(text)
            handed = self._poll_read(final, text)
            self._counters_read = None
            if not handed:
                return
        if self._awaiting_execute and (final or self._execute_times_due()):
            self._take_execute_times()

    def _poll_read(self, final: bool, text: str) -> bool:
        """Hand on what the reports just read, and what XLA ran without one; False where
        that is left to another thread's poll."""
        if self.capture_ir:
            self._read_graphs()
        if not final and self.syncing and threading.get_ident() not in self.syncing:
            # Another thread is inside a sync (a launcher's thread per device): what ran is
            # handed on by that thread's own poll, with its cause, not this one's.
            return False
        executed, compiled = self._xla_counters.xla_counts()
        frameless = executed - self._executed - len(self._pending)
        if frameless > 0 and len(self.syncing) > 1:
            # Another thread is inside a sync: what XLA counted beyond the reports may be
            # its execution, whose report is not written yet. Left for a later poll.
            executed -= frameless
            compiled = self._compiled
            frameless = 0
        if self._pending or frameless > 0:
            if compiled != self._compiled or self._compile_reports != self._compile_reports_seen:
                self._take_compile_times()
            reports = len(self._pending)
            self._handed = None
            self._hand_on_pending(max(frameless, 0), compiled - self._compiled, final)
            # One cache hit that can repeat, alone in what was read (and no tensors dump
            # to read: it names each sync's graph).
            if (reports == 1 and frameless == 0 and compiled == self._compiled and self._handed is not None
                    and not final and self._dump is None and not self._compiles and self._last_compile is None
                    and self._unexpected is None and (self._echo is None or self._echo < 1)
                    and self._report_parser.idle):
                if len(self._steady) >= _STEADY_KEPT:
                    self._steady.clear()
                    if self._fast is not None:
                        self._fast.xla_clear_texts()
                        self._fast_texts.clear()
                # The stack XLA wrote it from, where from a sync site of the hook's: the same
                # stack's steady sync needs no analysis written again (hook/xla_quiet.h). A
                # text the hook gave back (XLA wrote none) keeps the stack it had.
                stack = self._fast.xla_analysed(self._handed.site[0].graph_hash, executed) if self._fast else 0
                known = self._steady.get(text)
                self._steady[text] = self._handed._replace(stack=stack or (known.stack if known else 0))
                self._steady_changed = True
        self._executed, self._compiled = executed, compiled
        return True

    def _steady_again(self, steady: _Steady) -> bool:
        """The steady sync once more: the same report text, one more cache hit of XLA's,
        the same counters moved, under the same sync cause; then handed on as the last
        one was (what _poll_read would do with it), and True."""
        syncing = self.syncing
        if syncing and (len(syncing) > 1 or threading.get_ident() not in syncing):
            return False
        sync = self._sync
        if (sync.cause != steady.cause or sync.detail != steady.detail or self._pending or self._compiles
                or self._last_compile is not None or self._unexpected is not None
                or not self._report_parser.idle):
            return False
        counter = self._xla_counters.value
        compiled = counter("UncachedCompile") or 0
        executed = (counter("CachedCompile") or 0) + compiled
        if executed != self._executed + 1 or compiled != self._compiled:
            return False
        counters = self._xla_counters.read(False, False)
        if counters != self._xla_counters.last or steady.moved:
            before = self._xla_counters.last
            moved = {name: value - before.get(name, 0) for name, value in counters.items()
                     if value != before.get(name, 0)}
            if moved != steady.moved:
                self._counters_read = counters  # read once: the transfers' reads are timed
                return False
            self._xla_counters.last = counters
        self._executed = executed
        sync.cause, sync.detail = steady.site[1], steady.site[2]  # as _hand_on names it
        try:
            index = self._report_execution(steady.site[3], None, steady.moved, steady.site[0].frames, steady.site)
        finally:
            sync.cause, sync.detail = steady.cause, steady.detail
        self._awaiting_execute.append(index)
        self._last_index = index
        return True

    def _take_compile_times(self) -> None:
        self._compile_ms.extend(self._xla_counters.new_compile_times())

    def _take_execute_times(self) -> None:
        """Each execute time XLA sampled to the execution that awaits it, oldest first: in
        place where its row is a repeated one the writer has not taken."""
        assert self._on_execute_time is not None
        for execute_ms in self._xla_counters.new_execute_times():
            if not self._awaiting_execute:
                break
            index = self._awaiting_execute.popleft()
            with self._rows_lock:
                row = self._row_at.get(index)
                if row is not None:  # a repeated row the writer has not taken: timed in place
                    row[3], row[6] = row[5] + execute_ms, execute_ms  # sync_ms, execute_ms
            if row is None and not (self._fast is not None and self._fast.xla_time_row(index, execute_ms)):
                self._on_execute_time(index, execute_ms)

    def _execute_times_due(self) -> bool:
        """Reading XLA's ExecuteTime converts every sample it keeps (35 us once it holds
        1,024): at most every 50 ms, or sooner once 256 executions wait, long before XLA
        drops a sample not yet read. The times come a window later, as they reach the
        trace anyway (the writer commits every 0.1 s)."""
        now = time.perf_counter()
        if len(self._awaiting_execute) < _AWAITING_MOST and now - self._execute_read_at < _EXECUTE_READ_S:
            return False
        self._execute_read_at = now
        return True

    def record_repeats(self, counts: object, started: float) -> Callable[[], list[tuple]] | None:
        if counts is None:
            self._repeats = None
            if self._fast is not None:
                self._fast.xla_start(None, 0.0, 0.0, None, None, None, None, None)
                self._fast = None
            return None
        assert isinstance(counts, MutableSequence)
        self._shared_counts, self._started, self._repeats = counts, started, {}
        self._fast = self._fast_polls(counts, started)

        def take_rows() -> list[tuple]:
            with self._rows_lock:
                rows, self._rows = self._rows, []
                self._row_at.clear()
            taken = [tuple(row) for row in rows]
            fast = self._fast
            if fast is not None and (hooks := fast.xla_take_rows()):
                taken += REPEATED_ROW.iter_unpack(hooks)
                taken.sort()  # by index: the writer writes them in order
            return taken

        return take_rows

    def _fast_polls(self, counts: MutableSequence[int], started: float) -> ModuleType | None:
        """lazyviz's hook, handing the steady syncs on (see _arm); None where it cannot load,
        or where threads per device sync at once (each poll is their match-up)."""
        import torch_xla

        hook = self._load_hook() if self.replicas == 1 and not self.after_launch else None
        if not isinstance(hook, ModuleType):
            if hook is not None:
                self._notes.append(f"each sync polled in Python, slower: {hook}")
            return None
        try:
            hook.xla_start(counts, started, time.perf_counter(), self._sync, self.syncing,
                           torch_xla._XLAC._get_executed_fallback_ops, torch_xla._XLAC._xla_counter_value,
                           self.poll)
        except Exception as error:  # lazyviz's own: the polls here do it all, slower
            self._notes.append(f"each sync polled in Python, slower: {type(error).__name__}: {error}")
            return None
        # Where the analyses are lazyviz's own (not the user's file, nor execution analyses
        # on stderr), a steady sync's is left out: it would only repeat a text lazyviz has.
        hook.xla_quiet(self._echo is not None and self._echo < 2)
        return hook
