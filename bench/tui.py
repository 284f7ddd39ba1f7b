"""The UI on a big trace: how long 20,000 executions take to appear, how fast the
table scrolls, and how long a 5,000-node IR takes to show, driven by Textual's Pilot.

    python bench/tui.py [--executions 20000] [--nodes 5000]

The trace is written with lazyviz's own writer: real IR lines (a chain of aten ops),
20,000 execution rows over 50 graphs, one of them 5,000 nodes.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lazyviz.trace.schema import GraphRecord
from lazyviz.trace.synthetic import chain_ir, execution
from lazyviz.trace.synthetic import write_trace as write_records


def write_trace(path: Path, executions: int, big_nodes: int) -> None:
    graphs = [f"{g:016x}" for g in range(50)]
    sizes = {graph: big_nodes if number == 7 else 40 for number, graph in enumerate(graphs)}
    records = (execution(index, step=index // 3, cause=("mark_step", "item", "fallback")[index % 3],
                         line=30 + index % 3, graph=graphs[index % 50], nodes=sizes[graphs[index % 50]],
                         cache="miss" if index < 50 else "hit")
               for index in range(executions))
    write_records(path, records, [GraphRecord(graph, nodes, chain_ir(nodes, 16 + number, ("aten::mm", "aten::relu",
                                                                                          "aten::add", "aten::mul")),
                                              "graph()", number) for number, (graph, nodes) in enumerate(sizes.items())])


async def measure(path: Path, executions: int) -> dict[str, float]:
    from tui.app import build_app
    from tui.widgets.code_view import CodeView
    from tui.widgets.executions import ExecutionList

    app = build_app(path, poll_s=0.05)
    started = time.perf_counter()
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one(ExecutionList)
        while not table.rows:
            await pilot.pause(0.01)
        first = time.perf_counter() - started
        while len(table.rows) < executions:
            await pilot.pause(0.01)
        shown = time.perf_counter() - started
        while app.analysis is None:
            await pilot.pause(0.01)
        analysed = time.perf_counter() - started
        await pilot.press("home")
        started = time.perf_counter()
        for _ in range(100):
            await pilot.press("pagedown")
        await pilot.pause()
        per_page = (time.perf_counter() - started) / 100
        table.select(7)  # a 5,000-node graph
        started = time.perf_counter()
        view = app.query_one("#ir-view", CodeView)
        while "execution 7:" not in view.text:
            await pilot.pause(0.005)
        await pilot.pause()
        ir_shown = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(50):
            view.scroll_page_down(animate=False)
            await pilot.pause()
        ir_page = (time.perf_counter() - started) / 50
    return {"first rows on screen (s)": first, "all rows in the table (s)": shown, "findings and timing (s)": analysed,
            "table page down (ms)": per_page * 1000, "big IR selected to shown (s)": ir_shown,
            "IR page down (ms)": ir_page * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--executions", type=int, default=20_000)
    parser.add_argument("--nodes", type=int, default=5_000)
    options = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        # A small trace in the same run: the Pilot's own cost per key and per start-up.
        for name, executions, nodes in (("small", 300, 40), ("big", options.executions, options.nodes)):
            path = Path(folder) / f"{name}.trace"
            write_trace(path, executions, nodes)
            results[name] = asyncio.run(measure(path, executions))
    print(f"{'':<32}{'300 rows, 40-node IR':>22}{f'{options.executions} rows, {options.nodes}-node IR':>30}")
    for key in results["big"]:
        print(f"{key:<32}{results['small'][key]:>22.3f}{results['big'][key]:>30.3f}")


if __name__ == "__main__":
    main()
