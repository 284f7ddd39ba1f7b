"""A loop without mark_step(), where every sync compiles a bigger graph than the last
(the case lazyviz is most often run on): untraced, `--capture light` and `--capture
full` (with source lines) side by side, each mode in its own process, the rounds
interleaved. For each: the loop's own seconds, and how long after the script's last
output `lazyviz run` printed its summary (the trace's analysis of every graph).

    python bench/growing_graph.py [--iterations 150] [--rounds 2]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOOP = Path(__file__).with_name("_growing_loop.py")


def run(mode: str, iterations: int, folder: Path) -> tuple[float, float]:
    """(the loop's seconds, seconds from the script's last line to the summary's first)."""
    command = [sys.executable, str(LOOP), str(iterations)]
    if mode != "untraced":
        command = [sys.executable, "-m", "lazyviz", "run", "--no-tui", "--force", "--capture", mode.split()[1],
                   "-o", str(folder / "growing.trace"), *command[1:]]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    loop_s, last_line, summary = 0.0, 0.0, 0.0
    for line in process.stdout:
        if line.startswith("LAZYVIZ-BENCH "):
            loop_s, last_line = json.loads(line.split(" ", 1)[1])[0], time.perf_counter()
        elif line.startswith("lazyviz: ") and last_line and not summary:
            summary = time.perf_counter()
    if process.wait() != 0:
        sys.exit(f"bench: {mode} failed")
    return loop_s, (summary - last_line if summary else 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=2)
    options = parser.parse_args()
    modes = ["untraced", "lazyviz light", "lazyviz full"]
    results: dict[str, list[tuple[float, float]]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(options.rounds):
            for mode in modes[round_ % len(modes):] + modes[:round_ % len(modes)]:
                results[mode].append(run(mode, options.iterations, Path(folder)))
    baseline = statistics.median(loop for loop, _ in results["untraced"])
    print(f"a loop without mark_step(), {options.iterations} syncs of a growing graph, median of {options.rounds}")
    print(f"{'mode':<16}{'loop s':>9}{'vs untraced':>14}{'summary after s':>18}")
    for mode in modes:
        loop = statistics.median(loop for loop, _ in results[mode])
        after = f"{statistics.median(after for _, after in results[mode]):.2f}" if mode != "untraced" else ""
        print(f"{mode:<16}{loop:>9.2f}{loop / baseline:>13.2f}x{after:>18}")


if __name__ == "__main__":
    main()
