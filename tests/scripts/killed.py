"""Three steps, a pause longer than the writer's commit window (0.1 s), then SIGKILL to
itself: the trace must keep those three executions."""
import os
import signal
import time

import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
x = torch.ones(4, device="lazy")
for _ in range(3):
    x = x + 1
    torch._lazy.mark_step()
time.sleep(0.5)  # a SIGKILL loses at most the last commit window
os.kill(os.getpid(), signal.SIGKILL)
