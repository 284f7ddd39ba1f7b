"""A torchrun job of hundreds of ranks: `lazyviz report`, `lazyviz check
--same-graphs-across-ranks` (the divergence analysis in both) and `lazyviz view` on a
folder of rank traces, beside the same on one rank, so what the rank count costs shows.

    python bench/ranks.py [--ranks 256] [--executions 1000]

Each rank's trace is written with lazyviz's own writer: 1,000 executions over 10 graphs
(a training step's forward, backward and optimizer graphs, an item() and a fallback),
the ranks alike except one whose batch shape changes at step 150 (so the divergence
analysis has work), and one that died early (no end record). Commands run as a user
runs them, a fresh process each; wall time and peak memory (RSS) are that process's.
The UI is driven by Textual's Pilot in this process: the first rows of rank 0, the
Ranks tab's per-step table, and `]` to the next rank.
"""
from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lazyviz.trace.synthetic import write_rank_job


def timed(command: list[str]) -> tuple[float, float, int]:
    """(seconds, peak RSS in MB, exit status) of one `python -m lazyviz` process."""
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "lazyviz", *command], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - started
    assert child.stderr is not None
    if "Traceback" in child.stderr.read().decode():
        raise SystemExit(f"lazyviz {' '.join(command)} printed a traceback")
    return elapsed, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


async def view(folder: Path) -> dict[str, float]:
    from lazyviz.commands.base import open_ranks
    from lazyviz.tui.app import build_app
    from lazyviz.tui.widgets.code_view import CodeView
    from lazyviz.tui.widgets.executions import ExecutionList

    started = time.perf_counter()
    ranks = {rank: trace.path for rank, trace in open_ranks(folder).items()}  # as `lazyviz view` opens them
    app = build_app(next(iter(ranks.values())), ranks=ranks, poll_s=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one(ExecutionList)
        while not table.rows:
            await pilot.pause(0.01)
        first = time.perf_counter() - started
        ranks_view = app.query_one("#ranks-view", CodeView)
        while "ranks;" not in ranks_view.text:
            await pilot.pause(0.01)
        ranks_tab = time.perf_counter() - started
        # `]` is action_switch_rank(1); called here, the clock starts with the switch
        # itself, not with Pilot's round trip for a key press.
        switches, analysed = [math.nan], [math.nan]  # one rank: nothing to switch to
        for _ in range(5 if len(ranks) > 1 else 0):
            before = app.state.trace_path
            started = time.perf_counter()
            app.trace_view.action_switch_rank(1)
            while app.state.trace_path == before or not table.rows:
                await pilot.pause(0.002)
            switches.append(time.perf_counter() - started)
            while app.state.latest is None:
                await pilot.pause(0.002)
            analysed.append(time.perf_counter() - started)
            await pilot.pause(0.3)
    return {"view: first rows of rank 0 (s)": first, "view: Ranks tab filled (s)": ranks_tab,
            "view: ] to the next rank's rows, median (s)": statistics.median(switches[1:] or switches),
            "view: ] to its findings, median (s)": statistics.median(analysed[1:] or analysed)}


def measure(folder: Path) -> dict[str, float]:
    results: dict[str, float] = {}
    for name, command in (("report", ["report", str(folder)]), ("report --format json",
                          ["report", "--format", "json", str(folder)]),
                          ("check --same-graphs-across-ranks", ["check", str(folder), "--same-graphs-across-ranks"])):
        seconds, rss, _ = timed(command)
        results[f"{name} (s)"], results[f"{name}, peak RSS (MB)"] = seconds, rss
    results.update(asyncio.run(view(folder)))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--executions", type=int, default=1000)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = {}
        for count in (1, options.ranks):
            folder = Path(tmp) / f"ranks{count}"
            started = time.perf_counter()
            write_rank_job(folder, count, options.executions, diverge_at=150)
            print(f"wrote {count} rank traces of {options.executions} executions in "
                  f"{time.perf_counter() - started:.1f} s", file=sys.stderr)
            rows[count] = measure(folder)
        print(f"{'':44s} {'1 rank':>10s} {f'{options.ranks} ranks':>10s}")
        for name in rows[1]:
            print(f"{name:44s} {rows[1][name]:10.2f} {rows[options.ranks][name]:10.2f}")


if __name__ == "__main__":
    main()
