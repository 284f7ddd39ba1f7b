"""The timed loop for bench/overhead.py: the transformer+AdamW sample, run traced or
not by the caller; prints one JSON line of per-step wall times (ms) after warm-up."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "samples"))

import torch._lazy.ts_backend  # noqa: E402

from transformer_adamw import build, train_step  # noqa: E402

warmup, steps = int(sys.argv[1]), int(sys.argv[2])
torch._lazy.ts_backend.init()
model, optimizer, inputs, targets = build()
for _ in range(warmup):
    train_step(model, optimizer, inputs, targets)
times = []
for _ in range(steps):
    started = time.perf_counter()
    train_step(model, optimizer, inputs, targets)
    times.append((time.perf_counter() - started) * 1000)
print("LAZYVIZ-BENCH " + json.dumps(times))
