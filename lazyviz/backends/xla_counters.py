"""XLA's counters and metrics as the XLA backend reads them: the cache lookups, the
counters each execution moved, compile and execute times, the host<->device copies. A
part of XlaBackend with its own state: what it read last, and how far into each metric."""
from __future__ import annotations

import os
import time
from collections.abc import Callable

from lazyviz.backends.xla_io import framework
from lazyviz.trace.model import PERSISTENT_COUNTERS

_NS_PER_MS = 1e6
# XLA's metric of each graph's execute time: ExecuteTime, or under SPMD (xr.use_spmd(),
# which a script may call after lazyviz starts) ExecuteReplicatedTime. A run samples one.
_EXECUTE_METRICS = ("ExecuteTime", "ExecuteReplicatedTime")
# XLA's metric of the bytes of each host<->device copy -> lazyviz's names for how many
# copies and how many bytes. Each copy adds one sample (PJRT and IFRT clients, beside
# one to TransferTo/FromDeviceTime, which a failed copy adds alone), so one metric
# gives both. Reading a metric converts the last 1,024 samples it keeps: 35 us a read.
_TRANSFER_METRICS = (("OutboundData", "TransferToDevice", "TransferToDeviceBytes"),
                     ("InboundData", "TransferFromDevice", "TransferFromDeviceBytes"))
_TRANSFER_NAMES = tuple(name for _metric, *names in _TRANSFER_METRICS for name in names)
# XLA counts these on the device's thread once a graph has run, so a poll right after a
# sync may or may not see its graph's: read with the copies (full capture), not at each
# execution, where they made a loop's every sync look different from the last.
_RAN_NAMES = ("ExecuteComputation", "ExecuteReplicated", "CreateDataHandles")
READ_EACH_SECOND = (*_TRANSFER_NAMES, *_RAN_NAMES)
# Eager mode's executions (torch_xla.experimental.eager_mode: each op outside a compiled
# function runs at once) are timed by metrics of their own, never ExecuteTime/CompileTime.
_EAGER_METRICS = ("EagerOpCompileTime", "EagerOpExecuteTime")
TRANSFERS_READ_S = 1.0  # and its copies' metrics and its counters' names (full capture; see _all_counters)


class XlaCounters:
    """capture_ir: full capture reads every counter; light capture only the fallbacks'."""

    def __init__(self, capture_ir: bool, package: str = "torch_xla") -> None:
        self.capture_ir = capture_ir
        self.package = package  # torch_xla, or a fork's name for it
        self.value: Callable[[str], int | None] = lambda name: 0  # XLA's, from start()
        self.last: dict[str, int] = {}  # the counters as last read: what an execution moved is measured from them
        self.fallback_ops: list[str] = []  # XLA's counters of the ops that fell back, as last listed
        self._names: list[str] = []  # and all its counters (full capture), as last listed
        self.transfers_read_at = 0.0  # perf_counter() of the last read of the copies' metrics
        self._compile_samples = 0
        self._execute_samples = dict.fromkeys(_EXECUTE_METRICS, 0)  # samples seen of each
        self._eager_samples = dict.fromkeys(_EAGER_METRICS, 0)
        self.eager_mode: Callable[[], bool] = lambda: False  # XLA's eager mode is on, from start()
        self._persistent: tuple[str, ...] | None = None  # its persistent cache's counters, once known
        # The copies and runs are read on the trace writer's thread (full capture, while the
        # hook repeats rows), not in the script's polls; what it read with no row to carry
        # it waits here for the next execution handed on.
        self.read_elsewhere = False
        self.carried: dict[str, int] = {}

    def start(self) -> None:
        """From now: the counters as they are, the metrics' samples taken so far."""
        self.value = framework(self.package)._XLAC._xla_counter_value
        self.last = self.counters() if self.capture_ir else self.watched()
        self._compile_samples = self._new_samples("CompileTime", 0)[0]
        self._execute_samples = {name: self._new_samples(name, 0)[0] for name in _EXECUTE_METRICS}
        self._eager_samples = {name: self._new_samples(name, 0)[0] for name in _EAGER_METRICS}
        self.eager_mode = getattr(framework(self.package)._XLAC, "_get_use_eager_mode", lambda: False)

    def moved_since_last(self, counters: dict[str, int]) -> dict[str, int]:
        """What moved from the counters as last kept to `counters`, which are kept now."""
        last = self.last
        # A counter lower than before was cleared since (torch.compile's XLA bridge clears
        # them as it looks for ops that fall back): all it holds moved since.
        moved = {name: value - last.get(name, 0) if value >= last.get(name, 0) else value
                 for name, value in counters.items() if value != last.get(name, 0)}
        self.last = counters
        for name, count in self.carried.items():
            moved[name] = moved.get(name, 0) + count
        self.carried = {}
        return {name: value for name, value in moved.items() if value}

    def carry(self, moved: dict[str, int]) -> None:
        """Counters read elsewhere with no execution to carry them: the next one handed on does."""
        for name, count in moved.items():
            self.carried[name] = self.carried.get(name, 0) + count

    def keep(self, counters: dict[str, int], replace: bool = True) -> None:
        """These counters as last read (replace False: these names only), where what moved
        was handed on elsewhere (lazyviz's hook's steady syncs)."""
        if replace:
            self.last = counters
        else:
            self.last.update(counters)

    def read(self, final: bool, compiled: bool) -> dict[str, int]:
        """The counters now: all of them in full capture (see _all), the fallbacks' in light."""
        return self._all(final, compiled) if self.capture_ir else self.watched()

    def xla_counts(self) -> tuple[int, int]:
        """(executions, compiles) as XLA counts them: every execution looks its graph up."""
        value = framework(self.package)._XLAC._xla_counter_value
        uncached = value("UncachedCompile") or 0
        return (value("CachedCompile") or 0) + uncached, uncached

    def lookups(self) -> int:
        """xla_counts()'s executions alone, at the least cost: every poll asks."""
        value = self.value
        return (value("CachedCompile") or 0) + (value("UncachedCompile") or 0)

    def watched(self) -> dict[str, int]:
        """The counters light capture keeps: the ops that fell back (`aten::`), one value
        each. XLA lists those (the fallback's counters that are not zero) for a fraction
        of what listing all its counters costs."""
        ops = framework(self.package)._XLAC._get_executed_fallback_ops()
        if len(ops) != len(self.fallback_ops):  # a first fallback of an op (XLA never drops one)
            self.fallback_ops = list(ops)
        value = self.value
        watched = {name: value(name) or 0 for name in self.fallback_ops}
        for name in self._persistent if self._persistent is not None else self._persistent_names():
            watched[name] = value(name) or 0
        return watched

    def _persistent_names(self) -> tuple[str, ...]:
        """The persistent compile cache's counters, where the run has one: XLA reads its
        path (torch_xla.runtime.initialize_cache sets it) before the first graph, so
        whether it has one is settled by then."""
        names = tuple(PERSISTENT_COUNTERS) if os.environ.get("XLA_PERSISTENT_CACHE_PATH") else ()
        if names or self.lookups():
            self._persistent = names
        return names

    def _all(self, final: bool, compiled: bool) -> dict[str, int]:
        """Full capture: every counter of XLA's. Listing their names costs more than
        reading them (10 us): the names are listed again after a compile (new ops, new
        graph), when an op first falls back, and at most a second after any other new
        counter. Reading a copies' metric converts every sample XLA keeps (35 us once it
        holds 1,024, each copy one): they are read once a second too, and at the end,
        with the counters XLA counts when a graph has run (_RAN_NAMES). What moved in
        between goes with the execution handed on then: the run's totals are exact, and
        one execution carries what the counters not yet listed, the copies and the runs
        counted in the second before it."""
        now = time.perf_counter()
        due = final or (not self.read_elsewhere and now - self.transfers_read_at >= TRANSFERS_READ_S)
        watched = self.watched()
        if due or compiled or not self._names or any(name not in self.last for name in watched):
            self._names = list(framework(self.package)._XLAC._xla_counter_names())
        value = self.value
        names = self._names
        counters = dict(zip(names, map(value, names)))  # a C loop: every sync reads them all
        if None in counters.values():  # a counter XLA no longer has
            counters = {name: count or 0 for name, count in counters.items()}
        if due:
            self.transfers_read_at = now
            counters.update(self.transfer_counts())
        else:  # not read this time: as they were
            counters.update({name: self.last[name] for name in READ_EACH_SECOND if name in self.last})
        return counters

    def since_last_execution(self) -> dict[str, int]:
        """Full capture: the copies and runs XLA counted since they were last read (after
        the last poll: the run's last ones, no execution left to carry them)."""
        value = self.value
        self.transfers_read_at = time.perf_counter()
        counts = self.transfer_counts()
        counts.update({name: count for name in _RAN_NAMES if (count := value(name)) is not None})
        moved = {name: value - self.last.get(name, 0) for name, value in counts.items()
                 if value != self.last.get(name, 0)}
        self.last.update(counts)
        for name, count in self.carried.items():
            moved[name] = moved.get(name, 0) + count
        self.carried = {}
        return moved

    def _new_samples(self, name: str, seen: int) -> tuple[int, list[float]]:
        """(samples ever taken, the values of those after the first `seen`, in ms) of an
        XLA metric. Only the new ones are converted: XLA keeps the last 1,000, and
        converting them all at every sync cost a tiny step 20 us."""
        count, samples = self._new_timed_samples(name, seen)
        return count, [value for _end, value in samples]

    def _new_timed_samples(self, name: str, seen: int) -> tuple[int, list[tuple[float, float]]]:
        """As _new_samples, each value with when it was taken (the timed section's end, s)."""
        data = framework(self.package, "debug.metrics").metric_data(name)
        if not data:
            return 0, []
        count, _total, samples = data
        new = min(count - seen, len(samples))
        return count, [(end, value / _NS_PER_MS) for end, value in samples[len(samples) - new:]] if new > 0 else []

    def new_eager_times(self, metric: str) -> list[tuple[float, float]]:
        """Eager mode's single-op compiles ("EagerOpCompileTime") or executions
        ("EagerOpExecuteTime") since the last call, each as (when it ended, s; ms)."""
        self._eager_samples[metric], samples = self._new_timed_samples(metric, self._eager_samples[metric])
        return samples

    def new_compile_times(self) -> list[float]:
        """The compile times (ms) XLA sampled since the last call."""
        self._compile_samples, values = self._new_samples("CompileTime", self._compile_samples)
        return values

    def new_execute_times(self) -> list[float]:
        """The execute times (ms) XLA sampled since the last call, of every kind of execution."""
        values = []
        for name in _EXECUTE_METRICS:
            self._execute_samples[name], new = self._new_samples(name, self._execute_samples[name])
            values += new
        return values

    def counters(self) -> dict[str, int]:
        """XLA's counters, and its host<->device copies (counted as metrics) as counters of
        lazyviz's naming (analysis.summary.TRANSFERS): how many, and their bytes."""
        return {**self._counter_values(), **self.transfer_counts()}

    def _counter_values(self) -> dict[str, int]:
        value = self.value
        return {name: value(name) or 0 for name in framework(self.package)._XLAC._xla_counter_names()}

    def transfer_counts(self) -> dict[str, int]:
        metric_data = framework(self.package)._XLAC._xla_metric_data
        counters = {}
        for metric, copies, size in _TRANSFER_METRICS:
            data = metric_data(metric)
            if data:
                counters[copies], counters[size] = data[0], int(data[1])
        return counters
