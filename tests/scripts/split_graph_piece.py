"""A piece of a split reaches a lazy op, as in an attention block: the split's input has
a pending graph (q, k, v from one projection), so the split syncs it at its own line,
falls back, and hands back CPU pieces; the matmul two lines on raises."""
import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
x = torch.randn(4, 12).to("lazy")
qkv = x * 2
q, k, v = qkv.split(4, dim=1)
w = torch.randn(4, 4).to("lazy")
scores = q @ w
print(scores.sum().item())
