"""Three steps, then SIGKILL to itself: the trace must keep those three executions."""
import os
import signal

import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
x = torch.ones(4, device="lazy")
for _ in range(3):
    x = x + 1
    torch._lazy.mark_step()
os.kill(os.getpid(), signal.SIGKILL)
