"""Tracing overhead on the transformer+AdamW sample: untraced, `--capture light`,
`--capture full --no-source-lines`, `--capture full` (with source lines, the default) and
the backend's raw dump, in one run, side by side.

    python bench/overhead.py [--steps 30] [--warmup 3] [--rounds 3]
    python bench/overhead.py --tiny 20000 [--rounds 3]     # cost per execution, in us
    python bench/overhead.py --in-process [--steps 10] [--rounds 6]   # ts, steadier
    PJRT_DEVICE=CPU .venv-xla/bin/python bench/overhead.py --backend xla

On `ts` the raw dump is torch's LTC_SAVE_TENSORS_FILE; on `xla` it is what a user turns on
to see each graph's IR and where it came from: XLA_SAVE_TENSORS_FILE with XLA_IR_DEBUG=1
and PT_XLA_DEBUG_LEVEL=2 (lazyviz's full capture takes the IR from the HLO XLA dumps
once per compile instead).

Each mode runs in its own process (the backend initialises once per process), and the
rounds interleave the modes so that machine noise hits them alike. Processes differ among
themselves too (on this 2-core machine an untraced process's median step moved 74-82 ms
across three runs in ten minutes), so `--in-process` runs all modes in one process instead, in
alternating blocks of steps with `lazyviz.trace` started and stopped around each traced
block: what tracing costs while it is on, without lazyviz's start-up.
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
TINY_LOOP = Path(__file__).with_name("_tiny_loop.py")
ALTERNATING_LOOP = Path(__file__).with_name("_alternating_loop.py")


def step_times(mode: str, warmup: int, steps: int, folder: Path, backend: str, tiny: int = 0) -> list[float]:
    """Per-step ms of the transformer loop; with tiny, [seconds] of that many tiny steps."""
    loop = [str(TINY_LOOP), str(tiny)] if tiny else [str(LOOP), str(warmup), str(steps), backend]
    env = dict(os.environ)
    if mode == "untraced":
        command = [sys.executable, *loop]
    elif mode == "raw dump":
        dump = folder / "raw-dump.txt"
        for old in folder.glob("raw-dump.txt*"):
            old.unlink()
        if backend == "xla":
            env.update(XLA_SAVE_TENSORS_FILE=str(dump), XLA_SAVE_TENSORS_FMT="text", XLA_IR_DEBUG="1",
                       PT_XLA_DEBUG_LEVEL="2", PT_XLA_DEBUG_FILE=str(folder / "raw-debug.txt"))
        else:
            env.update(LTC_SAVE_TENSORS_FILE=str(dump), LTC_SAVE_TENSORS_FMT="text")
        command = [sys.executable, *loop]
    else:
        capture = mode.split()[1]
        lines = [] if mode.endswith("+ lines") or capture == "light" else ["--no-source-lines"]
        command = [sys.executable, "-m", "lazyviz", "run", "--no-tui", "--force", "--backend", backend,
                   "--capture", capture, *lines, "-o", str(folder / f"{mode.split(' ', 1)[1].replace(' + ', '-')}.trace"), *loop]
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"bench: {mode} failed:\n{result.stderr}")
    line = next(text for text in result.stdout.splitlines() if text.startswith("LAZYVIZ-BENCH "))
    return json.loads(line.split(" ", 1)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, help="steps per process (30), or per block with --in-process (10)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, help="rounds of all modes (3; with --in-process 6)")
    parser.add_argument("--backend", choices=("ts", "xla"), default="ts")
    parser.add_argument("--tiny", type=int, metavar="N", default=0,
                        help="instead: N executions of `x = x + 1; mark_step()` (ts), timed loop only, "
                             "and lazyviz's cost per execution in microseconds")
    parser.add_argument("--in-process", action="store_true",
                        help="instead: every mode in one process, in alternating blocks of --steps steps (ts)")
    options = parser.parse_args()
    if options.tiny:
        tiny_loop(options.tiny, options.rounds or 3)
        return
    if options.in_process:
        if options.backend == "xla":
            # XLA reads its debug settings once, when torch_xla is imported: after a traced
            # block, an "untraced" one would still pay for them.
            parser.error("--in-process runs on ts only")
        in_process(options.warmup, options.steps or 10, options.rounds or 6)
        return
    options.steps, options.rounds = options.steps or 30, options.rounds or 3

    # "full + lines" is full as `lazyviz run` records by default: each IR node tagged with
    # the line that built it.
    modes = ["untraced", "lazyviz light", "lazyviz full", "lazyviz full + lines", "raw dump"]
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(options.rounds):
            # Rotate the order each round, so no mode always runs first or after another.
            for mode in modes[round_ % len(modes):] + modes[:round_ % len(modes)]:
                times[mode] += step_times(mode, options.warmup, options.steps, Path(folder), options.backend)
        sizes = {path.name: path.stat().st_size for pattern in ("*.trace", "raw-dump.txt*")
                 for path in sorted(Path(folder).glob(pattern))}

    baseline = statistics.median(times["untraced"])
    print(f"transformer+AdamW on {options.backend}, {options.steps} steps x {options.rounds} rounds "
          f"after {options.warmup} warm-up")
    print(f"{'mode':<22}{'median step ms':>16}{'vs untraced':>14}")
    for mode in modes:
        median = statistics.median(times[mode])
        print(f"{mode:<22}{median:>16.2f}{median / baseline:>13.3f}x")
    print("file sizes (last round): " + ", ".join(f"{k} {v / 1024:.0f} KiB" for k, v in sizes.items()))


def in_process(warmup: int, steps: int, rounds: int) -> None:
    modes = ["untraced", "lazyviz light", "lazyviz full", "lazyviz full + lines"]
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, str(ALTERNATING_LOOP), str(warmup), str(steps), str(rounds), folder, *modes]
        result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"bench: the in-process loop failed:\n{result.stderr}")
    line = next(text for text in result.stdout.splitlines() if text.startswith("LAZYVIZ-BENCH "))
    blocks: list[tuple[str, list[float]]] = json.loads(line.split(" ", 1)[1])
    # Each traced block against the untraced block just before it: a slow minute on the
    # machine moves both.
    ratios: dict[str, list[float]] = {mode: [] for mode in modes[1:]}
    for (_, before), (mode, traced) in zip(blocks[::2], blocks[1::2]):
        ratios[mode].append(statistics.median(traced) / statistics.median(before))
    untraced = [ms for mode, times in blocks if mode == "untraced" for ms in times]
    print(f"transformer+AdamW on ts in one process: {rounds} rounds of blocks of {steps} steps, each traced "
          f"block after an untraced one")
    print(f"{'mode':<22}{'median step ms':>16}{'vs the block before':>21}{'range':>18}")
    print(f"{'untraced':<22}{statistics.median(untraced):>16.2f}")
    for mode in modes[1:]:
        median = statistics.median(ms for m, times in blocks if m == mode for ms in times)
        low, high = min(ratios[mode]), max(ratios[mode])
        print(f"{mode:<22}{median:>16.2f}{statistics.median(ratios[mode]):>20.3f}x{low:>10.3f}-{high:.3f}x")


def tiny_loop(executions: int, rounds: int) -> None:
    modes = ["untraced", "lazyviz light", "lazyviz full + lines"]
    seconds: dict[str, list[float]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(rounds):
            for mode in modes[round_ % len(modes):] + modes[:round_ % len(modes)]:
                seconds[mode] += step_times(mode, 0, 0, Path(folder), "ts", tiny=executions)
    baseline = statistics.median(seconds["untraced"])
    print(f"tiny steps on ts: {executions} x (x = x + 1; mark_step()), timed loop only, median of {rounds} rounds")
    print(f"{'mode':<22}{'loop s':>10}{'vs untraced':>14}{'us per execution':>18}{'lazyviz us':>12}")
    for mode in modes:
        median = statistics.median(seconds[mode])
        per = median / executions * 1e6
        extra = (median - baseline) / executions * 1e6
        print(f"{mode:<22}{median:>10.2f}{median / baseline:>13.2f}x{per:>18.1f}{extra:>12.1f}")


if __name__ == "__main__":
    main()
