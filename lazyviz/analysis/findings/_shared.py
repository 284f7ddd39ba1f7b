"""What several finders read: a site's steady graph growth, the lines that built a graph,
runs of consecutive executions, a test's name before a message."""
from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Sequence

from lazyviz.analysis.graphs import IRGraphs
from lazyviz.trace.model import Execution
from lazyviz.trace.table import ExecutionTable


def in_test(context: str | None) -> str:
    """"test_x.py::test_y: " under pytest, where each test is judged on its own."""
    return f"{context.rpartition('/')[2]}: " if context else ""



MIN_GROWING_SYNCS = 3  # syncs at one site before steady growth is a pattern, not chance


def growing_sites(table: ExecutionTable) -> dict[str, tuple[Sequence[int], int]]:
    """Sites whose graph grows by a steady amount at nearly every sync: site -> (the
    positions of its executions, the median growth in nodes). Where one line syncs
    two kinds of graph in turn (generate()'s call: its end-of-sequence check falls back,
    then its `if` reads a flag), each kind is looked at alone too: the fallback's graph
    grows by the whole decode step, the flag's by a little, and side by side neither
    difference is steady."""
    growing = {}
    nodes_of = [kind.nodes for kind in table.kinds]
    kinds_of_sync: dict | None = None  # (cause, detail) -> its kinds, made once where needed
    for site, numbers in table.kinds_by(lambda kind: kind.site).items():
        if len(numbers) == 1:
            continue  # one graph, one size: no growth
        found = _steady_growth(table.merged(numbers), table, nodes_of)
        if found is None:
            kinds_of_sync = kinds_of_sync or table.kinds_by(lambda kind: (kind.cause, kind.detail))
            here = set(numbers)
            alone = []
            for family in kinds_of_sync.values():
                members = [n for n in family if n in here]
                if 1 < len(members) < len(numbers):
                    alone.append(_steady_growth(table.merged(members), table, nodes_of, net=True))
            # The kind that carries the loop's work: the most nodes added over its syncs.
            found = max((f for f in alone if f is not None), key=lambda f: len(f[0]) * f[1], default=None)
        if found is not None:
            growing[site] = found
    return growing


def _steady_growth(positions: Sequence[int], table: ExecutionTable, nodes_of: Sequence[int],
                   net: bool = False) -> tuple[Sequence[int], int] | None:
    """(positions, the median growth) where these syncs' graphs grow by a steady amount.
    net: and grow over the whole run by at least half of that at every sync (two graphs
    taking turns, 35 -> 108 -> 34 -> 99, step up as often as down but never grow)."""
    if len(positions) < MIN_GROWING_SYNCS:
        return None
    sizes = list(map(nodes_of.__getitem__, map(table.kind.__getitem__, positions)))
    growths = sorted(Counter(map(operator.sub, sizes[1:], sizes[:-1])).items())
    # The median and how many are near it, from the counts of each growth.
    total = len(sizes) - 1
    seen, median = 0, 0
    for growth, count in growths:
        seen += count
        if seen > total // 2:
            median = growth
            break
    steady = sum(count for growth, count in growths if median / 2 <= growth <= median * 2)
    if net and sizes[-1] - sizes[0] < median * total / 2:
        return None
    return (positions, median) if median >= 4 and steady >= max(2, total * 3 // 4) else None


def growing_graphs(executions: Sequence[Execution]) -> set[str]:
    table = ExecutionTable.of(executions)
    return {table.kind_at(p).graph for positions, _ in growing_sites(table).values() for p in positions}


def lines_that_built(graphs: IRGraphs, graph_id: str, limit: int = 3) -> str:
    """", built at lm.py:140 (412 nodes), lm.py:152 (96)": the lines that built most of a
    graph's ops, where the IR records them; "" where it does not."""
    graph = graphs.parsed(graph_id)
    if graph is None:
        return ""
    lines = graph.built_at
    if not lines:
        return ""
    shown = [f"{line} ({count} node{'s' if count != 1 else ''})" for line, count in lines.most_common(limit)]
    return ", built at " + ", ".join(shown)


def runs_of(positions: Sequence[int]) -> list[list[int]]:
    """Positions split where another execution came between."""
    runs: list[list[int]] = []
    for position in positions:
        if runs and runs[-1][-1] == position - 1:
            runs[-1].append(position)
        else:
            runs.append([position])
    return runs

