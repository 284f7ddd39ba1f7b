"""Writes its pid to argv[1], then runs steps until a signal ends it."""
import os
import sys
import time

import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
with open(sys.argv[1] + ".tmp", "w") as pid_file:
    pid_file.write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
x = torch.ones(4, device="lazy")
step = 0
while True:
    x = x + 1
    torch._lazy.mark_step()
    if step == 0:
        print("running", flush=True)
    step += 1
    time.sleep(0.05)
