"""The UI on a big trace: how long 20,000 executions take to appear, how fast the
table scrolls, and how long a 5,000-node IR takes to show, driven by Textual's Pilot.
With --live, how far the UI falls behind a real run doing RATE executions a second.

    python bench/tui.py [--executions 20000] [--nodes 5000] [--live RATE SECONDS]

The trace is written with lazyviz's own writer: real IR lines (a chain of aten ops),
20,000 execution rows over 50 graphs, one of them 5,000 nodes. The live run is
`lazyviz run --no-tui --capture light` of bench/_paced_loop.py (torch's lazy backend),
followed by the UI as `lazyviz run` follows its child.
"""
from __future__ import annotations

import argparse
import asyncio
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lazyviz.trace.schema import GraphRecord, split_row
from lazyviz.trace.synthetic import chain_ir, execution
from lazyviz.trace.writer import TraceWriter, stored


def write_trace(path: Path, executions: int, big_nodes: int) -> None:
    graphs = [f"{g:016x}" for g in range(50)]
    sizes = {graph: big_nodes if number == 7 else 40 for number, graph in enumerate(graphs)}
    writer = TraceWriter(path)
    writer.set_run(argv=["train.py"], backend="ts", capture="full", device="lazy", versions={"torch": "2.13.0"},
                   cwd="/repo")
    repeated: list[tuple] = []
    for index in range(executions):
        graph = graphs[index % 50]
        record = execution(index, step=index // 3, cause=("mark_step", "item", "fallback")[index % 3],
                           line=30 + index % 3, graph=graph, nodes=sizes[graph], cache="miss" if index < 50 else "hit")
        if index < 50:
            ir = chain_ir(sizes[graph], 16 + index, ("aten::mm", "aten::relu", "aten::add", "aten::mul"))
            writer.add_execution(record, GraphRecord(graph, sizes[graph], ir, "graph()", index))
        else:  # as the tracer hands over repeated rows: their kind numbered once
            kind, row = split_row(stored(record))
            repeated.append((row[0], row[1], writer.kind_id(kind), *row[2:]))
            if len(repeated) == 4096:
                writer.add_rows(repeated)
                repeated = []
    writer.add_rows(repeated)
    writer.set_run(exit_status=0, error=None, traceback=None, steps=executions // 3, complete=True, elapsed_s=1.0)
    writer.close()


async def measure(path: Path, executions: int) -> dict[str, float]:
    from lazyviz.tui.app import build_app
    from lazyviz.tui.widgets.code_view import CodeView
    from lazyviz.tui.widgets.executions import ExecutionList

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
        while app.state.latest is None:
            await pilot.pause(0.01)
        analysed = time.perf_counter() - started
        await pilot.press("home")
        started, cpu_started = time.perf_counter(), time.process_time()
        for _ in range(100):
            await pilot.press("pagedown")
        await pilot.pause()
        per_page = (time.perf_counter() - started) / 100
        # Pilot waits for the process to go idle after each key: the wall time is an upper
        # bound, the CPU time what the UI spent on the page
        page_cpu = (time.process_time() - cpu_started) / 100
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
            "table page down (ms)": per_page * 1000,
            "table page down, CPU (ms)": page_cpu * 1000, "big IR selected to shown (s)": ir_shown,
            "IR page down (ms)": ir_page * 1000}


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def follow(folder: Path, rate: float, seconds: float) -> dict[str, float]:
    """Follow a live run: every half second, how many rows the trace holds that the
    table does not show yet, in seconds of the run; and the UI's CPU while it follows."""
    from lazyviz.tui.app import build_app

    path = folder / "live.trace"
    loop = Path(__file__).with_name("_paced_loop.py")
    child = subprocess.Popen([sys.executable, "-m", "lazyviz", "run", "--no-tui", "-f", "--capture", "light",
                              "-o", str(path), str(loop), str(rate), str(seconds)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    app = build_app(path, child)  # as `lazyviz run` builds it
    behind: list[float] = []
    async with app.run_test(size=(120, 40)) as pilot:
        while not path.exists() or not app.state.count:
            await pilot.pause(0.05)
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        wall, cpu = time.perf_counter(), cpu_s()
        while child.poll() is None:
            written = db.execute("SELECT COALESCE(MAX(idx) + 1, 0) FROM executions").fetchone()[0]
            behind.append(max(0, written - app.state.count) / rate)
            await pilot.pause(0.5)
        wall, cpu = time.perf_counter() - wall, cpu_s() - cpu
        ended = time.perf_counter()
        total = db.execute("SELECT COUNT(*) FROM executions").fetchone()[0]
        while app.state.count < total:
            await pilot.pause(0.01)
        caught_up = time.perf_counter() - ended
        db.close()
    return {"executions": total, "behind, median (s)": statistics.median(behind), "behind, max (s)": max(behind),
            "last row shown after the run (s)": caught_up, "UI CPU while following (%)": 100 * cpu / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--executions", type=int, default=20_000)
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--live", type=float, nargs=2, metavar=("RATE", "SECONDS"),
                        help="only follow a live run of RATE executions a second for SECONDS")
    options = parser.parse_args()
    if options.live:
        with tempfile.TemporaryDirectory() as folder:
            figures = asyncio.run(follow(Path(folder), *options.live))
        print(f"live run at {options.live[0]:.0f} executions/s for {options.live[1]:.0f} s:")
        for key, value in figures.items():
            print(f"  {key:<36}{value:>10.2f}")
        return
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
