"""A real lazy loop at a set pace, for bench/tui.py --live: `x = x + 1; mark_step()` at
RATE executions a second for SECONDS (TorchScript backend)."""
from __future__ import annotations

import sys
import time

import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
rate, seconds = float(sys.argv[1]), float(sys.argv[2])
x = torch.zeros(4).to("lazy")
started = time.perf_counter()
done = 0
while (now := time.perf_counter() - started) < seconds:
    # Catch up to the pace in bursts, then sleep: a steady `rate` over each 10 ms.
    while done < now * rate:
        x = x + 1
        torch._lazy.mark_step()
        done += 1
    time.sleep(0.01)
print(f"{done} executions in {time.perf_counter() - started:.1f} s")
