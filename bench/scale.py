"""Reading at scale: how long `report`, `report --format json` and `check` take, and
their peak memory, on traces of 100,000 and 1,000,000 executions, side by side.

The traces are written by the real trace writer from a synthetic run (a training loop:
one mark_step execution per step, an `.item()` every 10 steps, a recompile every 5,000
steps, a fallback every 50,000), which takes seconds; `--real N` instead records N tiny
steps of a real loop on torch's lazy backend (minutes for a million).

    python bench/scale.py [--sizes 100000 1000000] [--real 0]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lazyviz.trace.schema import GraphRecord, split_row
from lazyviz.trace.synthetic import chain_ir, execution
from lazyviz.trace.writer import TraceWriter, stored

ROOT = Path(__file__).resolve().parent.parent


def synthetic_trace(path: Path, executions: int) -> float:
    """Write a trace of a long training run; returns the seconds it took."""
    started = time.perf_counter()
    writer = TraceWriter(path)
    writer.set_run(argv=["train.py"], backend="ts", capture="full", device="lazy", versions={"torch": "2.13.0"},
                   cwd="/repo", start_time="2026-11-23T10:00:00")
    step, graphs = 0, set()
    index = 0
    repeated: list[tuple] = []
    while index < executions:
        batch_graph = f"g{step // 5000:04x}"
        rows = [("mark_step", "mark_step()", 40, batch_graph, 120)]
        if step % 10 == 9:
            rows.insert(0, ("item", "Tensor.item()", 38, "loss", 12))
        if step % 50_000 == 49_999:
            rows.insert(0, ("fallback", "aten::nonzero", 35, "pre", 30))
        for cause, detail, line, graph, nodes in rows:
            if index == executions:
                break
            new = graph not in graphs
            graphs.add(graph)
            record = execution(index, step=step, cause=cause, detail=detail, file="/repo/train.py", line=line,
                               function="main", graph=graph, nodes=nodes, cache="miss" if new else "hit",
                               start_ms=index * 2.0, fallback_ops={detail: 1} if cause == "fallback" else {})
            if new:
                writer.add_execution(record, GraphRecord(graph, nodes, chain_ir(nodes, rows=16 + len(graphs) % 4),
                                                         "graph()", index))
            else:  # as the tracer's repeated rows arrive: rows of a kind numbered once
                kind, row = split_row(stored(record))
                repeated.append((row[0], row[1], writer.kind_id(kind), *row[2:]))
                if len(repeated) == 4096:
                    writer.add_rows(repeated)
                    repeated = []
            index += 1
        step += 1
    writer.add_rows(repeated)
    writer.set_run(exit_status=0, error=None, traceback=None, steps=step, complete=True, elapsed_s=index * 0.002)
    writer.close()
    return time.perf_counter() - started


def graphs_trace(path: Path, graphs: int, nodes: int = 200) -> float:
    """A run that compiles a new graph every step (a shape that keeps changing): as many
    distinct graphs as steps, each `nodes` long. Returns the seconds it took."""
    started = time.perf_counter()
    writer = TraceWriter(path)
    writer.set_run(argv=["train.py"], backend="ts", capture="full", device="lazy", versions={"torch": "2.13.0"},
                   cwd="/repo", start_time="2026-11-23T10:00:00")
    for step in range(graphs):
        graph = f"g{step:05x}"
        record = execution(step, step=step, file="/repo/train.py", line=40, function="main", graph=graph, nodes=nodes,
                           cache="miss", start_ms=step * 2.0)
        writer.add_execution(record, GraphRecord(graph, nodes, chain_ir(nodes, rows=16 + step), "graph()", step))
    writer.set_run(exit_status=0, error=None, traceback=None, steps=graphs, complete=True, elapsed_s=graphs * 0.002)
    writer.close()
    return time.perf_counter() - started


def real_trace(path: Path, executions: int) -> float:
    started = time.perf_counter()
    loop = Path(__file__).with_name("_tiny_loop.py")
    subprocess.run([sys.executable, "-m", "lazyviz", "run", "--no-tui", "-f", "--capture", "light", "-o", str(path),
                    str(loop), str(executions)], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def timed(command: list[str]) -> tuple[float, float, int]:
    """(seconds, peak RSS in MB, exit status) of one child process, from its own rusage."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--real", type=int, default=0, metavar="N", help="also a real loop of N tiny steps")
    parser.add_argument("--graphs", type=int, default=1500, metavar="N",
                        help="also a run of N distinct 200-node graphs, one per step (0: none)")
    parser.add_argument("--write", nargs=2, metavar=("PATH", "N"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.write:
        print(synthetic_trace(Path(options.write[0]), int(options.write[1])))
        return
    lazyviz = [sys.executable, "-m", "lazyviz"]
    with tempfile.TemporaryDirectory() as folder:
        traces = []
        for size in options.sizes:
            path = Path(folder) / f"synthetic-{size}.trace"
            # In a child: a child's peak RSS counts from its parent's at the fork, so this
            # process must stay small for the readers' peaks to be their own.
            took = float(subprocess.run([sys.executable, __file__, "--write", str(path), str(size)], check=True,
                                        capture_output=True, text=True).stdout)
            traces.append((f"synthetic {size:,}", path, took, size))
        if options.graphs:
            path = Path(folder) / f"graphs-{options.graphs}.trace"
            traces.append((f"{options.graphs:,} graphs", path, graphs_trace(path, options.graphs), options.graphs))
        if options.real:
            path = Path(folder) / f"real-{options.real}.trace"
            traces.append((f"real loop {options.real:,}", path, real_trace(path, options.real), options.real))
        print(f"{'trace':<22}{'MB':>8}{'B/exec':>8}  {'command':<22}{'seconds':>9}{'peak MB':>9}")
        for name, path, took, count in traces:
            size = path.stat().st_size
            print(f"{name:<22}{size / 2**20:>8.1f}{size / count:>8.0f}  {'(written)':<22}{took:>9.2f}")
            for label, args in (("report", ["report", str(path)]),
                                ("report --format json", ["report", str(path), "--format", "json", "-f",
                                                          "-o", str(Path(folder) / "r.json")]),
                                ("check", ["check", str(path)]),
                                *([("report --format html", ["report", str(path), "--format", "html", "-f", "-o",
                                                             str(Path(folder) / "r.html")])] if "graphs" in name else [])):
                seconds, peak, status = timed([*lazyviz, *args])
                note = "" if status in (0, 1) else f"  (exit {status})"
                print(f"{'':<38}{label:<22}{seconds:>9.2f}{peak:>9.0f}{note}")


if __name__ == "__main__":
    main()
