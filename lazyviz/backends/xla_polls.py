"""The XLA backend's polls: read what XLA wrote since the last sync site, hand on what is
new, and arm lazyviz's C hook for a loop's steady syncs (hook/xla_steady.h). A part of
XlaBackend with its own state: XLA's counts as last polled, the steady syncs it knows,
the C hook it arms."""
from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, MutableSequence
from types import ModuleType

from lazyviz.backends import ExecuteTimeHook, SyncCause
from lazyviz.backends.ts import REPEATED_ROW
from lazyviz.backends.xla_counters import READ_EACH_SECOND, TRANSFERS_READ_S, XlaCounters
from lazyviz.backends.xla_dynamo import RUN_CAUSE
from lazyviz.backends.xla_hand_on import XlaHandOn
from lazyviz.backends.xla_io import Steady, framework
from lazyviz.backends.xla_read import XlaReads
from lazyviz.backends.xla_rows import RepeatedRows

_EXECUTE_READ_S = 0.05  # XLA's execute times are read at most this often (see _execute_times_due)
_AWAITING_MOST = 256  # or once this many executions wait for theirs
_ERRORS_KEPT = 20  # as the tracer keeps its own
_STEADY_KEPT = 64  # report texts kept as steady syncs (a loop has a few)


class XlaPolls:
    """reads, counters and hand_on: the backend's other parts. capture_ir: full capture;
    replicas and after_launch: a launched process's threads per device; sync and syncing:
    as the tracer's wrappers set them; on_execute_time: the tracer's hook; load_hook:
    lazyviz's C hook, or why it cannot load; notes: the backend's, appended to."""

    def __init__(self, reads: XlaReads, counters: XlaCounters, hand_on: XlaHandOn, capture_ir: bool, replicas: int,
                 after_launch: bool, sync: SyncCause, syncing: dict, on_execute_time: ExecuteTimeHook,
                 load_hook: Callable[[], ModuleType | Exception], notes: list[str]) -> None:
        self._reads = reads
        self._counters = counters
        self._hand_on = hand_on
        self._capture_ir = capture_ir
        self._replicas = replicas
        self._after_launch = after_launch
        self._sync = sync
        self.syncing = syncing
        self._on_execute_time = on_execute_time
        self._load_hook = load_hook
        self._notes = notes
        self.enabled = True
        self.errors: list[str] = []  # lazyviz's own failures in a poll (poll)
        # torch.compile's bridge running a compiled graph (xla_dynamo): an execution with a
        # report and no cache lookup, so while one runs each poll reads the reports. And
        # compiling one ahead of its run: cache lookups that ran nothing, not yet polled.
        self.unlooked_runs = 0
        self.unran_lookups = 0
        # Executions and compiles as XLA counts them (CachedCompile + UncachedCompile, one
        # per execution; UncachedCompile): more than its reports say are frameless ones.
        self._executed, self._compiled = counters.xla_counts()
        self._execute_read_at = 0.0  # perf_counter() of the last read of ExecuteTime
        self._times: deque[float] = deque()  # execute times read before their execution was handed on
        self._counters_read: dict[str, int] | None = None  # read by a steady check that failed: the poll's
        # Threads that sync (a launcher's thread per device) poll one at a time: the reports
        # and counters are the process's.
        self._polling = threading.RLock()
        self._rows: RepeatedRows | None = None  # while the tracer asks for repeated rows
        # Meanwhile the writer's thread takes XLA's execute times as it takes the rows (take_rows),
        # where they cost the traced thread nothing; the traced thread's polls only where many wait.
        # A loop's steady syncs (Steady) by the report text a poll read: one report, a
        # cache hit. A poll that reads the same text again, sees one more lookup of XLA's
        # and the same counters move, hands it on as the same row without the parser. By
        # text: a decode loop alternates a sync's report with a read's.
        self._steady: dict[str, Steady] = {}
        # lazyviz's hook (its C part), where it loads: between two polls here, it hands
        # the steady syncs on itself (hook/xla_steady.h); each poll here first settles
        # what it handed on (_settle), and arms it again after (_arm).
        self.fast: ModuleType | None = None
        self._fast_texts: dict[str, Steady] = {}  # the _steady texts it has, as it has them
        self._fast_tried = -1  # the size of the rows' sites when the texts it lacks were last tried
        self._steady_changed = False  # a text of _steady handed on anew since

    # -- polling ------------------------------------------------------------------
    def poll(self, final: bool = False) -> None:
        """Hand on what ran since the last poll. A failure of lazyviz's own is kept for the
        end of the run, never raised into the sync site the script called."""
        try:
            self._poll_here(final)
        except Exception as failure:
            if len(self.errors) < _ERRORS_KEPT:
                self.errors.append(f"{type(failure).__name__}: {failure}")

    def _poll_here(self, final: bool) -> None:
        if not self.enabled:
            return
        fast = self.fast
        if fast is not None:
            if not final and not self.unlooked_runs and fast.xla_poll():  # nothing new, or the steady sync once more
                return
            with self._polling:
                self._settle()
                if (final or self._reads.pending or self._reads.reports.descriptor() is None or self.unlooked_runs
                        or self._counters.lookups() != self._executed):
                    self._poll(final)
                elif self._hand_on.awaiting_execute and self._execute_times_due():
                    self._take_execute_times()
                self._arm()
            return
        if not final and not self._reads.pending and self._counters.lookups() == self._executed \
                and not self.unlooked_runs:
            # Nothing ran since the last poll (the poll before a sync, a step's closures):
            # XLA writes an execution's analysis before it counts the execution's cache
            # lookup. Most polls end here, without the lock (a stale look only polls again).
            if self._hand_on.awaiting_execute and self._execute_times_due():
                with self._polling:
                    self._take_execute_times()
            if self._hand_on.eager.awaiting_execute:
                with self._polling:
                    self._take_eager_times()
            return
        with self._polling:
            self._poll(final)

    def set_enabled(self, enabled: bool) -> None:
        """Poll, or not (lazyviz's own teardown is not recorded)."""
        self.enabled = enabled

    def disarm(self) -> None:
        """No more polls: the C hook hands nothing on (the descriptor it reads closes)."""
        self.enabled = False
        if self.fast is not None:
            self.fast.xla_settle()

    def _settle(self, take_left_out: bool = True) -> None:
        """What lazyviz's hook handed on since it was armed, as if this poll had (it
        disarms): XLA's lookups, the executions awaiting their time, the last one, the
        counters; and the report text it read and did not take, read first (with the
        analysis it kept XLA from writing, unless take_left_out is False)."""
        assert self.fast is not None
        settled = self.fast.xla_settle(take_left_out)
        if settled is None:
            return
        count, first, last_end, unread, values = settled
        if unread:
            self._reads.reports.put_back(unread)
        if count:
            self._executed += count
            self._hand_on.handed_on_elsewhere(range(first, first + count), last_end)
            self._counters.keep(values, replace=False)

    def _arm(self) -> None:
        """After a poll here, the polls after it are lazyviz's hook's, as long as they are
        the steady syncs: only where nothing is half handed on (a report read and not
        handed on, a compile awaiting its execution, an open block, a fallback's row)."""
        assert self.fast is not None
        descriptor = self._reads.reports.descriptor()
        rows = self._rows
        if not self._steady or descriptor is None or rows is None or self._hand_on.after_fallback \
                or not self._reads.settled:
            return
        if self._steady_changed or len(rows.sites) != self._fast_tried:
            # A text is the hook's once the tracer said its row repeats, as _steady has it
            # now (a counter XLA made since may move with it).
            self._steady_changed, self._fast_tried = False, len(rows.sites)
            for text, steady in self._steady.items():
                if self._fast_texts.get(text) is steady:
                    continue
                found = rows.sites.get(steady.site)
                if found is not None and found[1] == steady.moved:
                    self.fast.xla_add_text(text.encode(), steady.cause, steady.detail, found[0], steady.moved,
                                            steady.stack, steady.site[0].graph_hash)
                    self._fast_texts[text] = steady
        # The copies' metrics are not the hook's: the writer's thread reads them (read_elsewhere).
        counters = {name: value for name, value in self._counters.last.items() if name not in READ_EACH_SECOND}
        times_due = math.inf if self._rows is not None else self._execute_read_at + _EXECUTE_READ_S
        self.fast.xla_arm(descriptor, self._executed, self._compiled, counters, len(self._counters.fallback_ops),
                           self._hand_on.last_end, times_due, len(self._hand_on.awaiting_execute))

    def _poll(self, final: bool) -> None:
        if final:
            xm = framework(self._counters.package, "core.xla_model")
            try:  # the last execute times; a broken runtime must not break the exit
                xm.wait_device_ops()
            except Exception:
                pass
        text = self._reads.reports.read()
        steady = self._steady.get(text) if text and not final else None
        if steady is None or not self._steady_again(steady):
            self._reads.read(text)
            handed = self._poll_read(final, text)
            self._counters_read = None
            if not handed:
                return
        if self._hand_on.awaiting_execute and (final or self._execute_times_due()):
            self._take_execute_times()
        if self._hand_on.eager.awaiting_execute:
            self._take_eager_times()

    def _poll_read(self, final: bool, text: str) -> bool:
        """Hand on what the reports just read, and what XLA ran without one; False where
        that is left to another thread's poll."""
        if self._capture_ir:
            self._reads.read_graphs()
        if not final and self.syncing and threading.get_ident() not in self.syncing:
            # Another thread is inside a sync (a launcher's thread per device): what ran is
            # handed on by that thread's own poll, with its cause, not this one's.
            return False
        executed, compiled = self._counters.xla_counts()
        # Each execution looks its graph up, but torch.compile's runs of a graph; a compile
        # ahead of its run (the same bridge's) looks it up without running it.
        looked_up = sum(1 for report in self._reads.pending if RUN_CAUSE not in report.cause)
        frameless = executed - self._executed - looked_up - self.unran_lookups
        self.unran_lookups = 0
        if frameless > 0 and len(self.syncing) > 1:
            # Another thread is inside a sync: what XLA counted beyond the reports may be
            # its execution, whose report is not written yet. Left for a later poll.
            executed -= frameless
            compiled = self._compiled
            frameless = 0
        reads, hand_on = self._reads, self._hand_on
        if reads.pending or frameless > 0:
            if compiled != self._compiled or reads.compile_reports != reads.compile_reports_seen:
                self._take_compile_times()
            reports = len(reads.pending)
            hand_on.hand_on_pending(max(frameless, 0), compiled - self._compiled, final, self._counters_read)
            # One cache hit that can repeat, alone in what was read (and no tensors dump
            # to read: it names each sync's graph).
            if (reports == 1 and frameless == 0 and compiled == self._compiled and hand_on.handed is not None
                    and executed == self._executed + 1
                    and not final and reads.dump is None and reads.settled and (reads.echo is None or reads.echo < 1)):
                if len(self._steady) >= _STEADY_KEPT:
                    self._steady.clear()
                    if self.fast is not None:
                        self.fast.xla_clear_texts()
                        self._fast_texts.clear()
                # The stack XLA wrote it from, where from a sync site of the hook's: the same
                # stack's steady sync needs no analysis written again (hook/xla_quiet.h). A
                # text the hook gave back (XLA wrote none) keeps the stack it had.
                stack = self.fast.xla_analysed(hand_on.handed.site[0].graph_hash, executed) if self.fast else 0
                known = self._steady.get(text)
                self._steady[text] = hand_on.handed._replace(stack=stack or (known.stack if known else 0))
                self._steady_changed = True
        self._executed, self._compiled = executed, compiled
        return True

    def _steady_again(self, steady: Steady) -> bool:
        """The steady sync once more: the same report text, one more cache hit of XLA's,
        the same counters moved, under the same sync cause; then handed on as the last
        one was (what _poll_read would do with it), and True."""
        syncing = self.syncing
        if syncing and (len(syncing) > 1 or threading.get_ident() not in syncing):
            return False
        sync = self._sync
        if sync.cause != steady.cause or sync.detail != steady.detail or not self._reads.settled:
            return False
        if self._counters.carried:  # the next execution carries counters read elsewhere: not a repeat
            return False
        counter = self._counters.value
        compiled = counter("UncachedCompile") or 0
        executed = (counter("CachedCompile") or 0) + compiled
        if executed != self._executed + 1 or compiled != self._compiled:
            return False
        counters = self._counters.read(False, False)
        if counters != self._counters.last or steady.moved:
            before = self._counters.last
            moved = {name: value - before.get(name, 0) for name, value in counters.items()
                     if value != before.get(name, 0)}
            if moved != steady.moved:
                self._counters_read = counters  # read once: the transfers' reads are timed
                return False
            self._counters.keep(counters)
        self._executed = executed
        sync.cause, sync.detail = steady.site[1], steady.site[2]  # as _hand_on names it
        try:
            index = self._hand_on.report_execution(steady.site[3], None, steady.moved, steady.site[0].frames, steady.site)
        finally:
            sync.cause, sync.detail = steady.cause, steady.detail
        self._hand_on.handed_on_elsewhere(range(index, index + 1))
        return True

    def _take_eager_times(self) -> None:
        """Eager executions' times (their own metric): those XLA sampled, in order."""
        new = [execute_ms for _end, execute_ms in self._counters.new_eager_times("EagerOpExecuteTime")]
        for index, execute_ms in self._hand_on.take_eager_times(new):
            self._give_time(index, execute_ms)

    def _take_compile_times(self) -> None:
        self._hand_on.add_compile_times(self._counters.new_compile_times())

    def _take_execute_times(self) -> None:
        """Each execute time XLA sampled to the execution that awaits it, oldest first: in
        place where its row is a repeated one the writer has not taken."""
        assert self._on_execute_time is not None
        # A graph may finish, and its time be read, before its poll hands it on: the time
        # waits for it (XLA runs one graph after another: times come in their order).
        times = self._times
        times.extend(self._counters.new_execute_times())
        while times:
            index = self._hand_on.next_awaiting_execute()
            if index is None:
                break
            self._give_time(index, times.popleft())

    def _give_time(self, index: int, execute_ms: float) -> None:
        """An execution's execute time: in place where its row is a repeated one the
        writer has not taken."""
        rows, fast = self._rows, self.fast
        if not (rows is not None and rows.time(index, execute_ms)) and \
                not (fast is not None and fast.xla_time_row(index, execute_ms)):
            self._on_execute_time(index, execute_ms)

    def _execute_times_due(self) -> bool:
        """Reading XLA's ExecuteTime converts every sample it keeps (35 us once it holds
        1,024): at most every 50 ms, or sooner once 256 executions wait, long before XLA
        drops a sample not yet read. The times come a window later, as they reach the
        trace anyway (the writer commits every 0.1 s)."""
        if len(self._hand_on.awaiting_execute) >= _AWAITING_MOST:
            return True
        if self._rows is not None:
            return False  # the writer's thread takes them (take_rows)
        now = time.perf_counter()
        if now - self._execute_read_at < _EXECUTE_READ_S:
            return False
        self._execute_read_at = now
        return True

    def record_repeats(self, counts: object, started: float) -> Callable[[], list[tuple]] | None:
        if counts is None:
            with self._polling:  # the writer's thread may be taking times (_take_times_elsewhere)
                self._rows = None
                self._counters.read_elsewhere = False  # the copies: the polls' again
                self._hand_on.repeat_into(None)
                if self.fast is not None:
                    self.fast.xla_start(None, 0.0, 0.0, None, None, None, None, None)
                    self.fast = None
            return None
        assert isinstance(counts, MutableSequence)
        rows = self._rows = RepeatedRows(counts, started)
        self._hand_on.repeat_into(rows)
        self._counters.read_elsewhere = True  # by the writer's thread (read_elsewhere)
        self.fast = self._fast_polls(counts, started)

        def take_rows() -> list[tuple]:
            self._take_times_elsewhere()  # before the rows: a time for a row not yet taken goes in place
            taken = rows.take()
            fast = self.fast
            if fast is not None and (hooks := fast.xla_take_rows()):
                taken += REPEATED_ROW.iter_unpack(hooks)
                taken.sort()  # by index: the writer writes them in order
            return taken

        return take_rows

    def _take_times_elsewhere(self) -> None:
        """On the writer's thread, once a window: the execute times XLA sampled since, each
        to its execution, with what lazyviz's hook handed on meanwhile (settled, then the
        hook armed again)."""
        hand_on = self._hand_on
        if not self.enabled or (not hand_on.awaiting_execute and not hand_on.eager.awaiting_execute
                                and (self.fast is None or not self.fast.xla_awaiting())):
            return
        with self._polling:
            if not self.enabled or self._rows is None:
                return  # lazyviz's teardown: the traced thread's last poll takes them
            fast = self.fast
            if fast is not None:
                # A sync under way on the script's thread may have had its analysis left
                # out: it stays the hook's, for that sync's own poll. Taken here, it was
                # handed back as text, and that sync's poll went to Python to parse it.
                self._settle(take_left_out=False)
            if hand_on.awaiting_execute:
                self._take_execute_times()
            if hand_on.eager.awaiting_execute:
                self._take_eager_times()
            if fast is not None:
                self._arm()

    def read_elsewhere(self, carried: bool) -> dict[str, int]:
        """On the writer's thread, once a second (full capture): what XLA's copies and
        runs counted since they were last read, for the last execution the writer takes
        now (`carried`), else for the next one handed on. The script's thread never reads
        them meanwhile: a timer there sent a steady sync to Python once a second, and
        under callgrind, where a token takes a hundred times as long, every sync, each
        then unlike the last (the copies moved), so no sync was ever steady."""
        counters = self._counters
        if not self._capture_ir or not self.enabled or time.perf_counter() - counters.transfers_read_at < TRANSFERS_READ_S:
            return {}
        with self._polling:
            if not self.enabled or self._rows is None:
                return {}  # lazyviz's teardown: the last poll reads them
            moved = counters.since_last_execution()
            if carried:
                return moved
            counters.carry(moved)
            return {}

    def failed_executions(self) -> list[int]:
        """A graph that failed to compile left a Compilation Analysis and no execution: it
        is handed on now, as an execution that never ran. A graph that failed to run was
        handed on at its sync; the error surfaces at the next read of its results, so it
        is the last execution."""
        reads, hand_on = self._reads, self._hand_on
        with self._polling:  # threads: one at a time
            if self.fast is not None:
                self._settle()
            reads.read()
            refused = reads.unexpected is not None  # a sync inside a compiled function that forbids them
            report = reads.take_refused()
            if report is not None:
                # XLA counted its cache lookup as an execution: not a frameless one.
                self._executed += 1
                self.poll()  # the executions reported before it
                if not refused:
                    self._take_compile_times()  # XLA times a compile that failed too
                return [hand_on.hand_on(report, {}, ran=False)]
            self.poll()
            return [hand_on.last_index] if hand_on.last_index is not None else []

    def _fast_polls(self, counts: MutableSequence[int], started: float) -> ModuleType | None:
        """lazyviz's hook, handing the steady syncs on (see _arm); None where it cannot load,
        or where threads per device sync at once (each poll is their match-up)."""
        xla = framework(self._counters.package)
        hook = self._load_hook() if self._replicas == 1 and not self._after_launch else None
        if not isinstance(hook, ModuleType):
            if hook is not None:
                self._notes.append(f"each sync polled in Python, slower: {hook}")
            return None
        try:
            hook.xla_start(counts, started, time.perf_counter(), self._sync, self.syncing,
                           xla._XLAC._get_executed_fallback_ops, xla._XLAC._xla_counter_value,
                           self.poll)
        except Exception as error:  # lazyviz's own: the polls here do it all, slower
            self._notes.append(f"each sync polled in Python, slower: {type(error).__name__}: {error}")
            return None
        # Where the analyses are lazyviz's own (not the user's file, nor execution analyses
        # on stderr), a steady sync's is left out: it would only repeat a text lazyviz has.
        echo = self._reads.echo
        hook.xla_quiet(echo is not None and echo < 2)
        return hook
