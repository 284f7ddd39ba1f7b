"""The timed loop for bench/overhead.py: the transformer+AdamW sample, run traced or
not by the caller; prints one JSON line of per-step wall times (ms) after warm-up."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "samples"))

from transformer_adamw import build, train_step

warmup, steps, backend = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "ts"
if backend == "xla":
    import torch_xla

    model, optimizer, inputs, targets = build(torch_xla.device())
    sync = torch_xla.sync
else:
    import torch._lazy.ts_backend

    torch._lazy.ts_backend.init()
    model, optimizer, inputs, targets = build()
    sync = torch._lazy.mark_step
for _ in range(warmup):
    train_step(model, optimizer, inputs, targets, sync)
times = []
for _ in range(steps):
    started = time.perf_counter()
    train_step(model, optimizer, inputs, targets, sync)
    times.append((time.perf_counter() - started) * 1000)
print("LAZYVIZ-BENCH " + json.dumps(times))
