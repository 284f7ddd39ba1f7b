"""Two steps, then an exception with a hostile message."""
import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
x = torch.ones(4, device="lazy")
for _ in range(2):
    x = x * 2
    torch._lazy.mark_step()
raise ValueError("bad <batch> & 'shape'")
