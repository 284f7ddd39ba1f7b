"""Rows the XLA backend repeats itself (LazyBackend.record_repeats): a cache hit the tracer
has seen from the same report, cause and graph, with the same counters moving, is that
row again with new times, appended here without the tracer; the writer's thread takes
them. A part of XlaBackend with its own state."""
from __future__ import annotations

import threading
from collections.abc import MutableSequence

from lazyviz.backends.xla_counters import READ_EACH_SECOND

_MAX_REPEATS = 100_000  # sites whose hits repeat a row (_report_execution); more take the slow path


class RepeatedRows:
    """counts: the tracer's [executions, steps], numbered from here too; started: the
    tracer's clock at its start."""

    def __init__(self, counts: MutableSequence[int], started: float) -> None:
        self.counts = counts
        self.started = started
        self.sites: dict[tuple, tuple[int, dict[str, int]]] = {}  # site -> (row kind, counters moved)
        self._rows: list[list] = []  # ROW_FIELDS, a list while its execute time may still come
        self._row_at: dict[int, list] = {}  # index -> its row, until the writer takes it
        self._lock = threading.Lock()  # the writer's thread takes the rows

    def learn(self, site: tuple, kind: int, counters: dict[str, int]) -> None:
        """The tracer said the row it made for `site` repeats as `kind`. Not a row whose
        counters hold the copies read once a second: each repeat would carry that second's
        copies again (the run's copies counted twice)."""
        if len(self.sites) < _MAX_REPEATS and not any(name in READ_EACH_SECOND for name in counters):
            self.sites[site] = (kind, dict(counters))

    def repeat(self, site: tuple, counters: dict[str, int], end: float, last_end: float | None) -> int | None:
        """The row of `site` once more, where its counters moved alike: its index; else None."""
        found = self.sites.get(site)
        if found is None or found[1] != counters:
            return None
        counts = self.counts
        index = counts[0]
        counts[0] = index + 1
        trace_ms = (end - last_end) * 1000 if last_end is not None else 0.0
        row = [index, counts[1], found[0], 0.0, max(trace_ms, 0.0), 0.0, 0.0, (end - self.started) * 1000]
        with self._lock:
            self._rows.append(row)
            self._row_at[index] = row
        return index

    def time(self, index: int, execute_ms: float) -> bool:
        """A repeated row the writer has not taken gets its execute time in place: True."""
        with self._lock:
            row = self._row_at.get(index)
            if row is None:
                return False
            row[3], row[6] = row[5] + execute_ms, execute_ms  # sync_ms, execute_ms
            return True

    def take(self) -> list[tuple]:
        """The rows made since the last take, for the writer."""
        with self._lock:
            rows, self._rows = self._rows, []
            self._row_at.clear()
        return [tuple(row) for row in rows]
