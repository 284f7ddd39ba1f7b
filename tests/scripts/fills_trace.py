"""Many distinct graphs (a new shape each step): a trace that keeps growing. argv: the
steps (default 120) and the ops per step, in threes (default 10: 30 ops)."""
import sys

import torch
import torch._lazy
import torch._lazy.ts_backend

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 120
depth = int(sys.argv[2]) if len(sys.argv) > 2 else 10
torch._lazy.ts_backend.init()
total = 0.0
for step in range(1, steps + 1):
    x = torch.ones(step, 3, device="lazy")
    for _ in range(depth):
        x = torch.tanh(x) * 1.5 + 0.25
    torch._lazy.mark_step()
    total += float(x.sum().cpu())
print(f"total {total:.3f}")
