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
    positions of its executions, the median growth in nodes)."""
    growing = {}
    nodes_of = [kind.nodes for kind in table.kinds]
    for site, numbers in table.kinds_by(lambda kind: kind.site).items():
        if len(numbers) == 1:
            continue  # one graph, one size: no growth
        positions = table.merged(numbers)
        if len(positions) < MIN_GROWING_SYNCS:
            continue
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
        if median >= 4 and steady >= max(2, total * 3 // 4):
            growing[site] = (positions, median)
    return growing


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

