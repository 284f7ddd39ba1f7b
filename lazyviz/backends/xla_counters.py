"""XlaBackend's reading of XLA's counters and metrics: the cache lookups, the
counters each execution moved, compile and execute times, the host<->device copies."""
from __future__ import annotations

import time

from lazyviz.backends.xla_io import (
    _EXECUTE_METRICS,
    _NS_PER_MS,
    _RAN_NAMES,
    _READ_EACH_SECOND,
    _TRANSFER_METRICS,
    _TRANSFERS_READ_S,
)


class XlaCounters:
    """Part of XlaBackend (lazyviz/backends/xla.py): its state is set up there."""

    def _xla_counts(self) -> tuple[int, int]:
        """(executions, compiles) as XLA counts them: every execution looks its graph up."""
        import torch_xla

        value = torch_xla._XLAC._xla_counter_value
        uncached = value("UncachedCompile") or 0
        return (value("CachedCompile") or 0) + uncached, uncached

    def _lookups(self) -> int:
        """_xla_counts()'s executions alone, at the least cost: every poll asks."""
        value = self._counter_value
        return (value("CachedCompile") or 0) + (value("UncachedCompile") or 0)

    def _watched_counters(self) -> dict[str, int]:
        """The counters light capture keeps: the ops that fell back (`aten::`), one value
        each. XLA lists those (the fallback's counters that are not zero) for a fraction
        of what listing all its counters costs."""
        import torch_xla

        ops = torch_xla._XLAC._get_executed_fallback_ops()
        if len(ops) != len(self._fallback_ops):  # a first fallback of an op (XLA never drops one)
            self._fallback_ops = list(ops)
        value = self._counter_value
        return {name: value(name) or 0 for name in self._fallback_ops}

    def _all_counters(self, final: bool, compiled: bool) -> dict[str, int]:
        """Full capture: every counter of XLA's. Listing their names costs more than
        reading them (10 us): the names are listed again after a compile (new ops, new
        graph), when an op first falls back, and at most a second after any other new
        counter. Reading a copies' metric converts every sample XLA keeps (35 us once it
        holds 1,024, each copy one): they are read once a second too, and at the end,
        with the counters XLA counts when a graph has run (_RAN_NAMES). What moved in
        between goes with the execution handed on then: the run's totals are exact, and
        one execution carries what the counters not yet listed, the copies and the runs
        counted in the second before it."""
        import torch_xla

        now = time.perf_counter()
        due = final or now - self._transfers_read_at >= _TRANSFERS_READ_S
        watched = self._watched_counters()
        if due or compiled or not self._counter_names or any(name not in self._counters for name in watched):
            self._counter_names = list(torch_xla._XLAC._xla_counter_names())
        value = self._counter_value
        names = self._counter_names
        counters = dict(zip(names, map(value, names)))  # a C loop: every sync reads them all
        if None in counters.values():  # a counter XLA no longer has
            counters = {name: count or 0 for name, count in counters.items()}
        if due:
            self._transfers_read_at = now
            counters.update(self._transfer_counts())
        else:  # not read this time: as they were
            counters.update({name: self._counters[name] for name in _READ_EACH_SECOND if name in self._counters})
        return counters

    def counters_since_last_execution(self) -> dict[str, int]:
        """Full capture: the copies and runs XLA counted since they were last read (after
        the poll with final=True: the run's last ones, no execution left to carry them)."""
        if not self.capture_ir or not self._enabled:
            return {}
        value = self._counter_value
        counts = self._transfer_counts()
        counts.update({name: count for name in _RAN_NAMES if (count := value(name)) is not None})
        moved = {name: value - self._counters.get(name, 0) for name, value in counts.items()
                 if value != self._counters.get(name, 0)}
        self._counters.update(counts)
        return moved

    def _new_samples(self, name: str, seen: int) -> tuple[int, list[float]]:
        """(samples ever taken, the values of those after the first `seen`, in ms) of an
        XLA metric. Only the new ones are converted: XLA keeps the last 1,000, and
        converting them all at every sync cost a tiny step 20 us."""
        import torch_xla.debug.metrics as metrics

        data = metrics.metric_data(name)
        if not data:
            return 0, []
        count, _total, samples = data
        new = min(count - seen, len(samples))
        return count, [value / _NS_PER_MS for _timestamp, value in samples[len(samples) - new:]] if new > 0 else []

    def _take_compile_times(self) -> None:
        self._compile_samples, values = self._new_samples("CompileTime", self._compile_samples)
        self._compile_ms.extend(values)

    def _take_execute_times(self) -> None:
        values = []
        for name in _EXECUTE_METRICS:
            self._execute_samples[name], new = self._new_samples(name, self._execute_samples[name])
            values += new
        assert self._on_execute_time is not None
        for execute_ms in values:
            if not self._awaiting_execute:
                break
            index = self._awaiting_execute.popleft()
            with self._rows_lock:
                row = self._row_at.get(index)
                if row is not None:  # a repeated row the writer has not taken: timed in place
                    row[3], row[6] = row[5] + execute_ms, execute_ms  # sync_ms, execute_ms
            if row is None and not (self._fast is not None and self._fast.xla_time_row(index, execute_ms)):
                self._on_execute_time(index, execute_ms)

    # -- what the tracer asks ----------------------------------------------------------
    def counters(self) -> dict[str, int]:
        """XLA's counters, and its host<->device copies (counted as metrics) as counters of
        lazyviz's naming (analysis.summary.TRANSFERS): how many, and their bytes."""
        return {**self._counter_values(), **self._transfer_counts()}

    def _counter_values(self) -> dict[str, int]:
        import torch_xla

        value = self._counter_value
        return {name: value(name) or 0 for name in torch_xla._XLAC._xla_counter_names()}

    def _transfer_counts(self) -> dict[str, int]:
        import torch_xla

        counters = {}
        for metric, copies, size in _TRANSFER_METRICS:
            data = torch_xla._XLAC._xla_metric_data(metric)
            if data:
                counters[copies], counters[size] = data[0], int(data[1])
        return counters
