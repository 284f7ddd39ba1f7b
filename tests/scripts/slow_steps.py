"""Steps spaced out in time, so a reader can watch the trace grow."""
import sys
import time

import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
x = torch.ones(4, device="lazy")
for step in range(int(sys.argv[1])):
    x = x + step
    torch._lazy.mark_step()
    print(f"step {step}", flush=True)
    time.sleep(float(sys.argv[2]))
