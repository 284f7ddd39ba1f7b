"""The in-process loop for `bench/overhead.py --in-process`: the transformer+AdamW sample
in one process, in blocks of steps that alternate untraced and traced (lazyviz.trace
started and stopped around each traced block), so that what differs between processes
(where memory lands, which core, a neighbour's load) falls on every mode alike. Prints
one JSON line: the blocks in the order they ran, each [mode, per-step wall times (ms)].

    python bench/_alternating_loop.py WARMUP STEPS_PER_BLOCK ROUNDS FOLDER MODE...
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "samples"))

import torch._lazy.ts_backend
from transformer_adamw import build, train_step

import lazyviz

# A block's first steps after a trace starts are its warm-up: each site's first hit goes
# to Python once, as it does once per run under `lazyviz run`.
BLOCK_WARMUP = 2
CAPTURES = {"lazyviz light": ("light", False), "lazyviz full": ("full", False), "lazyviz full + lines": ("full", True)}


def main() -> None:
    warmup, steps, rounds, folder, modes = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]), sys.argv[5:]
    torch._lazy.ts_backend.init()
    model, optimizer, inputs, targets = build()
    sync = torch._lazy.mark_step
    for _ in range(warmup):
        train_step(model, optimizer, inputs, targets, sync)
    blocks: list[tuple[str, list[float]]] = []
    for round_ in range(rounds):
        # Each traced block sits between two untraced ones; the order of the traced modes
        # rotates per round.
        traced = [mode for mode in modes if mode != "untraced"]
        traced = traced[round_ % len(traced):] + traced[:round_ % len(traced)]
        for mode in [m for t in traced for m in ("untraced", t)]:
            session = None
            if mode != "untraced":
                capture, lines = CAPTURES[mode]
                session = lazyviz.trace(folder / "block.trace", capture=capture, source_lines=lines, force=True)
                session.__enter__()
            for _ in range(BLOCK_WARMUP):
                train_step(model, optimizer, inputs, targets, sync)
            times = []
            for _ in range(steps):
                started = time.perf_counter()
                train_step(model, optimizer, inputs, targets, sync)
                times.append((time.perf_counter() - started) * 1000)
            blocks.append((mode, times))
            if session is not None:
                session.__exit__(None, None, None)
    print("LAZYVIZ-BENCH " + json.dumps(blocks))


if __name__ == "__main__":
    main()
