"""A piece of a split lazy tensor reaches a lazy op: split falls back to the CPU and
its pieces are not lazy tensors, so the add raises (before any graph runs)."""
import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
x = torch.randn(4, 6).to("lazy")
query, key = x.split(3, dim=1)
scores = query + x[:, 3:]
print(scores.sum().item())
