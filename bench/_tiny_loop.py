"""The timed loop for bench/overhead.py --tiny: `x = x + 1; mark_step()` N times, the
smallest step there is, so what lazyviz costs per execution shows undiluted. Prints one
JSON line: [seconds for the timed loop] (TorchScript backend)."""
from __future__ import annotations

import json
import sys
import time

import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
executions = int(sys.argv[1])
x = torch.zeros(4).to("lazy")
for _ in range(100):  # warm-up: the graph compiles once
    x = x + 1
    torch._lazy.mark_step()
started = time.perf_counter()
for _ in range(executions):
    x = x + 1
    torch._lazy.mark_step()
took = time.perf_counter() - started
print("LAZYVIZ-BENCH " + json.dumps([took]))
