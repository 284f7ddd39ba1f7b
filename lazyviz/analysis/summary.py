"""The run at a glance: counts, fallbacks, and the sync sites that cost the most."""
from __future__ import annotations

import statistics
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import islice
from typing import overload

from lazyviz.trace.model import Execution
from lazyviz.trace.table import ExecutionTable


@dataclass(frozen=True)
class SiteStats:
    site: str
    function: str
    causes: dict[str, int]
    executions: int
    total_ms: float

    @property
    def mean_ms(self) -> float:
        return self.total_ms / self.executions if self.executions else 0.0


@dataclass(frozen=True)
class Summary:
    executions: int
    steps: int
    graphs: int
    misses: int
    causes: dict[str, int]
    fallbacks: dict[str, int]
    sync_ms: float
    trace_ms: float
    sites: list[SiteStats]  # every sync site, most executions first
    # Host<->device copies the backend counted (XLA): TRANSFERS' names -> the run's total.
    transfers: dict[str, int] = field(default_factory=dict)

    @property
    def slowest_sites(self) -> list[SiteStats]:
        return sorted(self.sites, key=lambda s: s.total_ms, reverse=True)


# The counters the XLA backend adds for host<->device copies: how many, and their bytes.
TRANSFERS = ("TransferToDevice", "TransferToDeviceBytes", "TransferFromDevice", "TransferFromDeviceBytes")

# XLA's Post Compilation Analysis, in GB with six decimals: "Graph input size: 0.001049 GB".
_MEMORY = {"Graph input size": "inputs", "Graph output size": "outputs", "Aliased Input size": "aliased_inputs",
           "Intermediate tensor size": "intermediates", "Compiled program size": "program"}


def split_hlo(backend_text: str) -> tuple[str, str]:
    """(what the backend reported, the HLO it compiled) of a graph's backend text: on
    XLA the HLO module follows the analyses, after a line that says which HLO it is; ""
    where none was recorded (TorchScript, light capture)."""
    at = backend_text.find("\nHloModule ")
    if at < 0:
        return backend_text, ""
    head = backend_text.rfind("\n", 0, at) + 1
    start = head if backend_text.startswith("# ", head) else at + 1
    return backend_text[:start].rstrip("\n"), backend_text[start:]


def graph_memory(backend_text: str) -> dict[str, int]:
    """A graph's memory as XLA reported it after compiling it (inputs, outputs, aliased
    inputs, intermediates, program), in bytes; {} where the backend says nothing of it."""
    memory = {}
    for line in split_hlo(backend_text)[0].splitlines():
        name, sep, value = line.partition(": ")
        key = _MEMORY.get(name.strip())
        if sep and key and value.endswith(" GB"):
            try:
                memory[key] = round(float(value[:-3]) * (1 << 30))
            except ValueError:
                continue
    return memory


def summarize(executions: Sequence[Execution], steps: int | None = None,
              after_last_execution: Mapping[str, int] | None = None,
              fallbacks_after: Mapping[str, int] | None = None) -> Summary:
    """after_last_execution: counters that moved after the last execution (the run's,
    when the executions are all of it), counted in the totals; fallbacks_after: the ops
    that fell back after it (RunInfo.fallbacks_after_last_execution: a split whose pieces
    the script raised on), counted in the fallbacks as the backend counts them."""
    table = ExecutionTable.of(executions)
    causes: Counter[str] = Counter()
    fallbacks: Counter[str] = Counter()
    transfers: Counter[str] = Counter()
    sync_ms = table.sync_ms
    for kind, positions in zip(table.kinds, table.positions):
        causes[kind.cause] += len(positions)
        for op, calls in kind.fallback_ops.items():
            fallbacks[op] += calls * len(positions)
        for name in TRANSFERS:
            if name in kind.counters:
                transfers[name] += kind.counters[name] * len(positions)
    for name in TRANSFERS:
        if after_last_execution and after_last_execution.get(name):
            transfers[name] += after_last_execution[name]
    fallbacks.update(fallbacks_after or {})
    sites = []
    for site, numbers in table.kinds_by(lambda kind: kind.site).items():
        first = table.kinds[numbers[0]]
        site_causes: Counter[str] = Counter()
        for number in numbers:
            site_causes[table.kinds[number].cause] += len(table.positions[number])
        sites.append(SiteStats(site=site, function=first.frame.function if first.frame else "?",
                               causes=dict(site_causes), executions=sum(site_causes.values()),
                               total_ms=sum(table.sum(sync_ms, table.positions[n]) for n in numbers)))
    sites.sort(key=lambda s: (-s.executions, s.site))
    if steps is None:
        steps = max(table.step, default=0)
    return Summary(
        executions=len(table),
        steps=steps,
        graphs=len({kind.graph for kind, positions in zip(table.kinds, table.positions) if positions}),
        misses=sum(len(positions) for kind, positions in zip(table.kinds, table.positions) if kind.is_miss),
        causes=dict(causes.most_common()),
        fallbacks=dict(fallbacks.most_common()),
        sync_ms=sum(sync_ms),
        trace_ms=sum(table.trace_ms),
        sites=sites,
        transfers=dict(transfers),
    )


def graph_stats(executions: Sequence[Execution]) -> list[dict]:
    """Per distinct graph: node count, how often it ran, its first execution."""
    table = ExecutionTable.of(executions)
    return [{"id": graph, "nodes": table.kind_at(positions[0]).nodes, "executions": len(positions),
             "first_execution": table.index[positions[0]]}
            for graph, positions in table.group_by(lambda kind: kind.graph).items()]


def chart_scale(step_totals: Sequence[float]) -> float:
    """The top of a per-step time chart. The first step also holds the script's start-up
    (imports, model building), so with enough steps it does not set the scale."""
    body = step_totals[1:] if len(step_totals) >= 5 else step_totals
    return max(body, default=0.0) or max(step_totals, default=0.0) or 1.0


@dataclass(frozen=True)
class StepTime:
    step: int
    trace_ms: float  # Python tracing between graphs, over the step's executions
    sync_ms: float
    executions: int
    compiled: bool  # a cache miss happened in the step

    @property
    def total_ms(self) -> float:
        return self.trace_ms + self.sync_ms


class StepTimes(Sequence[StepTime]):
    """Time per step, in step order, as columns: a run of a million steps is a few arrays,
    not a million objects. Each item is a StepTime, built when asked."""

    def __init__(self) -> None:
        self.step = array("q")
        self.trace_ms = array("d")
        self.sync_ms = array("d")
        self.executions = array("q")
        self.compiled = bytearray()

    def __len__(self) -> int:
        return len(self.step)

    @overload
    def __getitem__(self, n: int) -> StepTime: ...
    @overload
    def __getitem__(self, n: slice) -> list[StepTime]: ...
    def __getitem__(self, n: int | slice) -> StepTime | list[StepTime]:
        if isinstance(n, slice):
            return [self[i] for i in range(*n.indices(len(self)))]
        return StepTime(self.step[n], self.trace_ms[n], self.sync_ms[n], self.executions[n], bool(self.compiled[n]))

    @cached_property
    def total_ms(self) -> array:
        return array("d", map(float.__add__, self.trace_ms, self.sync_ms))

    @cached_property
    def median_ms(self) -> float:
        return statistics.median(self.total_ms) if self else 0.0


def step_times(executions: Iterable[Execution]) -> StepTimes:
    """Time per step, in step order: the one computation the report, HTML, UI and
    `lazyviz diff` share."""
    table = ExecutionTable.of(executions)
    misses = [kind.is_miss for kind in table.kinds]
    found = StepTimes()
    columns = (table.step, table.trace_ms, table.sync_ms, table.kind)
    if any(map(int.__gt__, table.step, islice(table.step, 1, None))):
        # Steps out of order (rows merged from threads): add up per step, then sort.
        totals: dict[int, list] = {}
        for step, trace_ms, sync_ms, kind in zip(*columns, strict=True):
            entry = totals.get(step)
            if entry is None:
                entry = totals[step] = [0.0, 0.0, 0, False]
            entry[0] += trace_ms
            entry[1] += sync_ms
            entry[2] += 1
            entry[3] = entry[3] or misses[kind]
        rows = [(step, *entry) for step, entry in sorted(totals.items())]
    else:
        # In order, as a run writes them: one pass, a step at a time.
        rows = []
        current, trace_total, sync_total, count, compiled = -1, 0.0, 0.0, 0, False
        for step, trace_ms, sync_ms, kind in zip(*columns, strict=True):
            if step != current:
                if count:
                    rows.append((current, trace_total, sync_total, count, compiled))
                current, trace_total, sync_total, count, compiled = step, 0.0, 0.0, 0, False
            trace_total += trace_ms
            sync_total += sync_ms
            count += 1
            compiled = compiled or misses[kind]
        if count:
            rows.append((current, trace_total, sync_total, count, compiled))
    # A third of a million steps: tuples in a list, then each column at once.
    for column, values in zip((found.step, found.trace_ms, found.sync_ms, found.executions, found.compiled),
                              zip(*rows), strict=False):
        column.extend(values)
    return found
