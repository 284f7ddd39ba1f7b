"""Steps spaced out in time, so a reader can watch the trace grow.

Arguments: steps, pause in seconds, and optionally a gate file: after step 0 the
script waits until the gate exists, so a test sees the trace early however slow
the machine is.
"""
import sys
import time
from pathlib import Path

import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
x = torch.ones(4, device="lazy")
gate = Path(sys.argv[3]) if len(sys.argv) > 3 else None
for step in range(int(sys.argv[1])):
    x = x + step
    torch._lazy.mark_step()
    print(f"step {step}", flush=True)
    while step == 0 and gate is not None and not gate.exists():
        time.sleep(0.02)
    time.sleep(float(sys.argv[2]))
