"""The first answer on a heavy trace: hundreds of big distinct graphs that recompile.

1. A real one: a Hugging Face BERT classifier fine-tuned as its examples write it
   (tests/programs/bert_classifier.py --adamw: per-batch padding, AdamW, clip_grad_norm_;
   about 1,200 executions and 1,100 distinct graphs of up to 1,400 nodes, a 10 MB trace).
   `report` (text and JSON) as a user runs it, a fresh process: wall time and peak RSS;
   and the UI (Textual's Pilot, 80x24): when its first finding and fix line show, and
   when the whole analysis is in.
2. Synthetic ones from the real writer: N distinct graphs of NODES nodes, a new input
   shape at every step (one recompile a step), for several N: `report` should grow
   linearly with N.
3. Real runs that recompile at every step (bench/_recompile_loop.py: a transformer layer
   trained with a new input shape each step), for several numbers of steps (--real).

    python bench/heavy_report.py [--trace EXISTING] [--graphs 1000 3000 10000] [--nodes 300] [--real 500 1500]
                                 [--repeat 5]
"""
from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from reports import timed  # a fresh process's wall time and peak RSS

from lazyviz import open as lazyviz_open
from lazyviz.trace.schema import GraphRecord
from lazyviz.trace.synthetic import execution
from lazyviz.trace.writer import TraceWriter

ROOT = Path(__file__).resolve().parent.parent


def real_trace(folder: Path) -> Path:
    trace = folder / "bert.trace"
    subprocess.run([sys.executable, "-m", "lazyviz", "run", "--no-tui", "-o", str(trace),
                    str(ROOT / "tests/programs/bert_classifier.py"), "--adamw"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return trace


def shape_ir(nodes: int, length: int) -> str:
    """A transformer-like step's IR at one sequence length: every node carries the length."""
    ops = ("aten::mm", "aten::add", "aten::relu", "aten::mul", "aten::view_copy")
    lines = ["IR {", f"  %0 = [Float[4,{length},64]] lazy_tensors::device_data(), device=CPU0, NodeType=D",
             "  %1 = [Float[64,64]] lazy_tensors::device_data(), device=CPU0, NodeType=D"]
    for index in range(2, nodes):
        lines.append(f"  %{index} = [Float[4,{length},64]] {ops[index % len(ops)]}(%{index - 1}, %1), NodeType=N")
    lines[-1] += ", ROOT=0"
    return "\n".join(lines + ["}"]) + "\n"


def synthetic_trace(path: Path, graphs: int, nodes: int) -> None:
    """One mark_step a step, each at a new input length: `graphs` distinct graphs."""
    writer = TraceWriter(path)
    writer.set_run(argv=["train.py"], backend="ts", capture="full", device="lazy", versions={"torch": "2.13.0"},
                   cwd="/repo", start_time="2026-11-26T10:00:00")
    for step in range(graphs):
        graph = f"g{step:06x}"
        record = GraphRecord(graph, nodes, shape_ir(nodes, 8 + step), "graph()", step)
        writer.add_execution(execution(step, graph=graph, nodes=nodes, cache="miss"), record)
    writer.set_run(exit_status=0, error=None, traceback=None, steps=graphs, complete=True, elapsed_s=1.0)
    writer.close()


async def ui_first_answer(trace: Path) -> tuple[float, float, float]:
    """(seconds until the first finding shows, until a finding's fix line shows, until the
    whole analysis is in) for `lazyviz view TRACE` at 80x24."""
    from lazyviz.tui.app import build_app
    from lazyviz.tui.widgets.findings_strip import FindingsStrip

    started = time.perf_counter()
    app = build_app(trace)
    first = fix = whole = None
    async with app.run_test(size=(80, 24)) as pilot:
        while whole is None and time.perf_counter() - started < 120:
            await pilot.pause(0.02)
            strip = app.query_one(FindingsStrip)
            if first is None and any(not strip.get_option_at_index(i).disabled for i in range(strip.option_count)):
                first = time.perf_counter() - started  # a finding, not "looking for problems…"
            shown = app.query_one("#fix").finding  # display alone reads True before its CSS applies
            if fix is None and shown is not None and shown.fix:
                fix = time.perf_counter() - started
            if app.state.latest is not None and app.state.latest.analysis.complete and app.state.opened:
                whole = time.perf_counter() - started
    return first or float("nan"), fix or float("nan"), whole or float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, help="an existing heavy trace instead of running the BERT program")
    parser.add_argument("--graphs", type=int, nargs="*", default=[1000, 3000, 10000])
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--real", type=int, nargs="*", default=[], help="steps of real runs that recompile every step")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each report on the real trace")
    options = parser.parse_args()
    lazyviz = [sys.executable, "-m", "lazyviz"]
    with tempfile.TemporaryDirectory() as folder:
        trace = options.trace or real_trace(Path(folder))
        print(f"real trace: {trace} ({trace.stat().st_size / 1e6:.1f} MB)")
        # Runs here vary up to 2x on a busy machine: the least and the median of a few.
        print(f"{'command':<22} {'least s':>8} {'median s':>9} {'peak MB':>8}   ({options.repeat} runs each)")
        for fmt in ("text", "json"):
            runs = sorted(timed([*lazyviz, "report", "--format", fmt, str(trace)]) for _ in range(options.repeat))
            print(f"{'report --format ' + fmt:<22} {runs[0][0]:8.2f} {runs[len(runs) // 2][0]:9.2f} "
                  f"{max(peak for _, peak in runs):8.0f}")
        first, fix, whole = asyncio.run(ui_first_answer(trace))
        print(f"{'view: first finding':<22} {first:8.2f}")
        print(f"{'view: first fix line':<22} {fix:8.2f}")
        print(f"{'view: whole analysis':<22} {whole:8.2f}")
        if options.graphs:
            print(f"\nsynthetic: a new input shape every step, {options.nodes} nodes a graph")
            print(f"{'graphs':>8} {'report s':>9} {'per 1k':>7} {'peak MB':>8}")
            for count in options.graphs:
                path = Path(folder) / f"synthetic-{count}.trace"
                synthetic_trace(path, count, options.nodes)
                seconds, peak = timed([*lazyviz, "report", str(path)])
                print(f"{count:8d} {seconds:9.2f} {seconds / count * 1000:7.3f} {peak:8.0f}")
        if options.real:
            print("\nreal: a transformer layer, a new input shape every step (TorchScript backend)")
            print(f"{'steps':>8} {'graphs':>7} {'report s':>9} {'per 1k':>7} {'peak MB':>8}")
            for steps in options.real:
                path = Path(folder) / f"real-{steps}.trace"
                subprocess.run([*lazyviz, "run", "--no-tui", "-o", str(path), str(ROOT / "bench/_recompile_loop.py"),
                                "--steps", str(steps)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                graphs = len(lazyviz_open(path).ir_texts())
                seconds, peak = timed([*lazyviz, "report", str(path)])
                print(f"{steps:8d} {graphs:7d} {seconds:9.2f} {seconds / graphs * 1000:7.3f} {peak:8.0f}")


if __name__ == "__main__":
    main()
