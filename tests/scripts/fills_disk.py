"""A new, larger graph every step (the batch grows by one row): hundreds of graphs whose
IR and TorchScript fill a small disk quickly. argv[1]: steps."""
import sys

import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
total = 0.0
for step in range(1, int(sys.argv[1]) + 1):
    x = torch.ones(step, 3, device="lazy")
    for _ in range(60):
        x = torch.tanh(x) * 1.5 + 0.25
    torch._lazy.mark_step()
    total += float(x.sum().cpu())
print(f"total {total:.3f}")
