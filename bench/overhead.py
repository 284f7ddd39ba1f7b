"""Tracing overhead on the transformer+AdamW sample: untraced, `--capture light`,
`--capture full` and torch's raw LTC_SAVE_TENSORS_FILE dump, in one run, side by side.

    python bench/overhead.py [--steps 30] [--warmup 3] [--rounds 3]

Each mode runs in its own process (the backend initialises once per process), and the
rounds interleave the modes so that machine noise hits them alike.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

LOOP = Path(__file__).with_name("_training_loop.py")


def step_times(mode: str, warmup: int, steps: int, folder: Path) -> list[float]:
    loop = [str(LOOP), str(warmup), str(steps)]
    env = dict(os.environ)
    if mode == "untraced":
        command = [sys.executable, *loop]
    elif mode == "raw LTC dump":
        dump = folder / "ltc-dump.txt"
        dump.unlink(missing_ok=True)
        env.update(LTC_SAVE_TENSORS_FILE=str(dump), LTC_SAVE_TENSORS_FMT="text")
        command = [sys.executable, *loop]
    else:
        capture = mode.split()[-1]
        command = [sys.executable, "-m", "lazyviz", "run", "--no-tui", "--capture", capture,
                   "-o", str(folder / f"{capture}.trace"), *loop]
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"bench: {mode} failed:\n{result.stderr}")
    line = next(l for l in result.stdout.splitlines() if l.startswith("LAZYVIZ-BENCH "))
    return json.loads(line.split(" ", 1)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()

    modes = ["untraced", "lazyviz light", "lazyviz full", "raw LTC dump"]
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(options.rounds):
            # Rotate the order each round, so no mode always runs first or after another.
            for mode in modes[round_ % len(modes):] + modes[:round_ % len(modes)]:
                times[mode] += step_times(mode, options.warmup, options.steps, Path(folder))
        sizes = {name: os.path.getsize(Path(folder) / name) for name in ("light.trace", "full.trace", "ltc-dump.txt")}

    baseline = statistics.median(times["untraced"])
    print(f"transformer+AdamW, {options.steps} steps x {options.rounds} rounds after {options.warmup} warm-up")
    print(f"{'mode':<16}{'median step ms':>16}{'vs untraced':>14}")
    for mode in modes:
        median = statistics.median(times[mode])
        print(f"{mode:<16}{median:>16.2f}{median / baseline:>13.3f}x")
    print("file sizes (last round): " + ", ".join(f"{k} {v / 1024:.0f} KiB" for k, v in sizes.items()))


if __name__ == "__main__":
    main()
