"""A run's executions, column by column: what the readers of a long run hold.

A million executions as objects take a gigabyte and seconds to build; a training loop
repeats a few kinds of execution (the same cause, site, graph and cache result) with
new times. ExecutionTable keeps each kind once and, per execution, its step, kind and
times in arrays (32 bytes, 56 once every time is read; the index is a range when it has
no gaps). It is a Sequence of Execution, each built when asked, and it hands analysis
the kinds and where each kind occurs.

A live table grows on one thread (the UI's trace watcher). Another thread may read
the rows below a length it was told, by position (Prefix), or take a head() to work on;
what the table works out from its columns (positions, in_order) is the growing
thread's."""
from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain
from typing import overload

from lazyviz.trace.model import Execution, Frame, SiteAndCache

# Executions made whole one query each before the rest of the columns are read at once.
ONE_BY_ONE = 2000


@dataclass(frozen=True, slots=True)
class Kind(SiteAndCache):
    """What executions of one kind share: all of an Execution but its index, step and times
    (the schema's KIND_FIELDS, with file, line and function as one frame)."""

    cause: str
    detail: str | None
    frame: Frame | None
    stack_id: int | None
    graph: str
    nodes: int
    cache: str
    fallback_ops: dict[str, int] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    call: str | None = None
    context: str | None = None

    def key(self) -> tuple:
        frame = self.frame
        return (self.cause, self.detail, frame and (frame.file, frame.line, frame.function), self.stack_id,
                self.graph, self.nodes, self.cache, tuple(self.fallback_ops.items()),
                tuple(self.counters.items()), self.call, self.context)


def kind_of(execution: Execution) -> Kind:
    return Kind(execution.cause, execution.detail, execution.frame, execution.stack_id, execution.graph,
                execution.nodes, execution.cache, execution.fallback_ops, execution.counters, execution.call,
                execution.context)


class ExecutionTable(Sequence[Execution]):
    """Executions in index order. kinds[kind[i]] is the i-th execution's kind; index,
    step and the times are its own. Positions (0..len-1) are not indices: a trace's
    indices may have gaps (a write that failed)."""

    def __init__(self, kinds: list[Kind], kind: array, index: array | range, step: array, sync_ms: array,
                 trace_ms: array, compile_ms: array | None = None, execute_ms: array | None = None,
                 start_ms: array | None = None,
                 load_rest: Callable[[int], tuple[array, array, array]] | None = None,
                 load_one: Callable[[int], tuple[float, float, float]] | None = None) -> None:
        """load_rest(n): compile_ms, execute_ms and start_ms of the first n executions,
        read when first asked (a report asks for a few executions whole: load_one(index)
        reads one execution's)."""
        self.kinds = kinds
        self.kind = kind
        self.index = index
        self.step = step
        self.sync_ms = sync_ms
        self.trace_ms = trace_ms
        self._rest = None if compile_ms is None else (compile_ms, execute_ms, start_ms)
        self._load_rest = load_rest
        self._load_one = load_one
        self._loaded_one = 0

    def _rest_columns(self) -> tuple[array, array, array]:
        if self._rest is None:
            assert self._load_rest is not None
            self._rest = self._load_rest(len(self))
        return self._rest  # type: ignore[return-value]

    def load_all(self) -> None:
        """Read every column now (they are read when first asked)."""
        self._rest_columns()

    @property
    def compile_ms(self) -> array:
        return self._rest_columns()[0]

    @property
    def execute_ms(self) -> array:
        return self._rest_columns()[1]

    @property
    def start_ms(self) -> array:
        return self._rest_columns()[2]

    @classmethod
    def empty(cls) -> ExecutionTable:
        return cls([], array("l"), array("q"), array("q"), *(array("d") for _ in range(5)))

    @classmethod
    def of(cls, executions: Iterable[Execution]) -> ExecutionTable:
        """A table of these executions (already one: itself)."""
        if isinstance(executions, ExecutionTable):
            return executions
        table = cls.empty()
        table.extend(executions)
        return table

    def extend(self, executions: Iterable[Execution]) -> None:
        """Add executions that come after every one held (a live run's new batch)."""
        numbers = self._numbers
        kinds = self.kinds
        if not isinstance(self.index, array):
            self.index = array("q", self.index)
        start = len(self)
        compile_ms, execute_ms, start_ms = self._rest_columns()
        for e in executions:
            kind = kind_of(e)
            key = kind.key()
            number = numbers.get(key)
            if number is None:
                number = numbers[key] = len(kinds)
                kinds.append(kind)
            self.index.append(e.index)
            self.step.append(e.step)
            self.sync_ms.append(e.sync_ms)
            self.trace_ms.append(e.trace_ms)
            compile_ms.append(e.compile_ms)
            execute_ms.append(e.execute_ms)
            start_ms.append(e.start_ms)
            self.kind.append(number)  # last: see extend_columns
        self._grown(start)

    def extend_columns(self, kinds: Sequence[Kind], kind: array, index: array, step: array, sync_ms: array,
                       trace_ms: array, compile_ms: array, execute_ms: array, start_ms: array) -> None:
        """Add executions given as columns, after every one held: kind[i] numbers one of
        `kinds` (a reader's list, which may hold this table's kinds in the same order:
        then no number changes)."""
        start = len(self)
        numbering = {}
        for number in set(kind):
            found = kinds[number]
            key = found.key()
            mine = self._numbers.get(key)
            if mine is None:
                mine = self._numbers[key] = len(self.kinds)
                self.kinds.append(found)
            numbering[number] = mine
        if any(number != mine for number, mine in numbering.items()):
            kind = array("l", map(numbering.__getitem__, kind))
        if not isinstance(self.index, array):
            self.index = array("q", self.index)
        compile_column, execute_column, start_column = self._rest_columns()
        # The kinds last: a reader on another thread trusts positions below len(self.kind).
        for column, values in ((self.index, index), (self.step, step), (self.sync_ms, sync_ms),
                               (self.trace_ms, trace_ms), (compile_column, compile_ms),
                               (execute_column, execute_ms), (start_column, start_ms), (self.kind, kind)):
            column.extend(values)
        self._grown(start)

    def _grown(self, start: int) -> None:
        """Executions from position `start` on were added: bring what is worked out from
        the columns up to date, in time proportional to what was added."""
        found = self.__dict__.get("positions")
        if found is not None:
            found.extend(array("l") for _ in range(len(self.kinds) - len(found)))
            appends = [positions.append for positions in found]
            for position in range(start, len(self)):
                appends[self.kind[position]](position)
        self.__dict__.pop("in_order", None)
        contiguous = start > 0 and self.index[-1] - self.index[start - 1] == len(self) - start
        if self.__dict__.get("_by_index", 0) is not None or not contiguous:
            self.__dict__.pop("_by_index", None)

    def head(self, count: int) -> ExecutionTable:
        """The first `count` executions as a table of their own: what another thread reads
        while this one goes on growing (it never sees a half-added row)."""
        kinds = self.kinds[:]
        rest = tuple(column[:count] for column in self._rest_columns())
        table = ExecutionTable(kinds, self.kind[:count], self.index[:count], self.step[:count],
                               self.sync_ms[:count], self.trace_ms[:count], *rest)
        found = self.__dict__.get("positions")
        if found is not None:
            found = [positions[:bisect.bisect_left(positions, count)] for positions in found[:len(kinds)]]
            table.__dict__["positions"] = found + [array("l") for _ in range(len(kinds) - len(found))]
        return table

    @cached_property
    def _numbers(self) -> dict[tuple, int]:
        return {kind.key(): number for number, kind in enumerate(self.kinds)}

    def __len__(self) -> int:
        return len(self.kind)

    @overload
    def __getitem__(self, position: int) -> Execution: ...
    @overload
    def __getitem__(self, position: slice) -> list[Execution]: ...
    def __getitem__(self, position: int | slice) -> Execution | list[Execution]:
        return self.get(position, len(self))

    def get(self, position: int | slice, length: int) -> Execution | list[Execution]:
        """As table[position], for a table of its first `length` executions."""
        if isinstance(position, slice):
            return [self._make(p) for p in range(*position.indices(length))]
        if position < 0:
            position += length
        if not 0 <= position < length:
            raise IndexError("execution position out of range")
        return self._make(position)

    def __iter__(self) -> Iterator[Execution]:
        return map(self._make, range(len(self)))

    def _make(self, p: int) -> Execution:
        k = self.kinds[self.kind[p]]
        # One by one while that is the less to read: a few of a million rows, not most of a
        # thousand (a recompile explained per miss of a 1,229-row run read 1,099 rows alone).
        if self._rest is None and self._load_one is not None and self._loaded_one < min(ONE_BY_ONE, len(self) >> 4):
            self._loaded_one += 1
            compile_ms, execute_ms, start_ms = self._load_one(self.index[p])
        else:
            columns = self._rest_columns()
            compile_ms, execute_ms, start_ms = columns[0][p], columns[1][p], columns[2][p]
        return Execution(self.index[p], self.step[p], k.cause, k.detail, k.frame, k.stack_id, k.graph, k.nodes,
                         k.cache, self.sync_ms[p], self.trace_ms[p], compile_ms, execute_ms,
                         start_ms, dict(k.fallback_ops), dict(k.counters), k.call, k.context)

    def kind_at(self, position: int) -> Kind:
        return self.kinds[self.kind[position]]

    # What analysis asks: where each kind occurs, and groups of kinds by some key.

    @cached_property
    def positions(self) -> list[array]:
        """Per kind, the positions of its executions, in order."""
        found = [array("l") for _ in self.kinds]
        appends = [a.append for a in found]
        for position, number in enumerate(self.kind):
            appends[number](position)
        return found

    def kinds_by(self, key: Callable[[Kind], Hashable | None]) -> dict[Hashable, list[int]]:
        """key(kind) -> the numbers of the kinds with that key, both in order of their first
        execution. Kinds whose key is None, and kinds no execution has, are left out."""
        found: dict[Hashable, list[int]] = {}
        for number in self.in_order:
            value = key(self.kinds[number])
            if value is not None:
                found.setdefault(value, []).append(number)
        return found

    def merged(self, numbers: list[int]) -> Sequence[int]:
        """The positions of executions of these kinds, in order."""
        if not numbers:
            return []
        if len(numbers) == 1:
            return self.positions[numbers[0]]
        return sorted(chain.from_iterable(self.positions[number] for number in numbers))

    def where(self, test: Callable[[Kind], bool]) -> Sequence[int]:
        """The positions of executions whose kind passes the test, in order."""
        return self.merged([number for number in self.in_order if test(self.kinds[number])])

    def group_by(self, key: Callable[[Kind], Hashable | None]) -> dict[Hashable, Sequence[int]]:
        """key(kind) -> the positions of executions of kinds with that key, in order (see
        kinds_by)."""
        return {value: self.merged(numbers) for value, numbers in self.kinds_by(key).items()}

    @cached_property
    def in_order(self) -> list[int]:
        """The numbers of the kinds that occur, in order of their first execution."""
        return [number for _, number in sorted((p[0], n) for n, p in enumerate(self.positions) if p)]

    def sum(self, column: array, positions: Iterable[int]) -> float:
        return sum(map(column.__getitem__, positions))

    def indices(self, positions: Sequence[int]) -> tuple[int, ...]:
        """The execution indices at these positions."""
        if isinstance(self.index, range):
            start = self.index.start
            return tuple(map(start.__add__, positions)) if start else tuple(positions)
        return tuple(map(self.index.__getitem__, positions))

    def sum_at(self, column: array, indices: Iterable[int]) -> float:
        """The sum of a column over the executions with these indices (those held)."""
        total = 0.0
        if self._by_index is None and self.index:
            first, size = self.index[0], len(self)
            for index in indices:
                if 0 <= index - first < size:
                    total += column[index - first]
            return total
        for index in indices:
            position = self.position_of(index)
            if position is not None:
                total += column[position]
        return total

    @cached_property
    def _by_index(self) -> dict[int, int] | None:
        """index -> position where indices have gaps; None where position = index - first."""
        if not self.index or self.index[-1] - self.index[0] == len(self.index) - 1:
            return None
        return {index: position for position, index in enumerate(self.index)}

    def position_of(self, index: int) -> int | None:
        """The position of the execution with this index, if held."""
        by_index = self._by_index
        if by_index is not None:
            return by_index.get(index)
        if not self.index:
            return None
        position = index - self.index[0]
        return position if 0 <= position < len(self.index) else None


class Prefix(Sequence[Execution]):
    """The first `count` executions of a table that another thread may still be growing,
    without copying them."""

    def __init__(self, table: ExecutionTable, count: int) -> None:
        self.table = table
        self.count = count

    def __len__(self) -> int:
        return self.count

    @overload
    def __getitem__(self, position: int) -> Execution: ...
    @overload
    def __getitem__(self, position: slice) -> list[Execution]: ...
    def __getitem__(self, position: int | slice) -> Execution | list[Execution]:
        return self.table.get(position, self.count)
