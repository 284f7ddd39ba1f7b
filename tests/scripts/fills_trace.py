"""Many distinct graphs (a new shape each step): a trace that keeps growing."""
import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
total = 0.0
for step in range(1, 121):
    x = torch.ones(step, 3, device="lazy")
    for _ in range(10):
        x = torch.tanh(x) * 1.5 + 0.25
    torch._lazy.mark_step()
    total += float(x.sum().cpu())
print(f"total {total:.3f}")
