"""A step whose graph holds a tensor no device could: XLA fails the execution, and the
error surfaces at the next read of a result (`.item()`), not at the sync."""
import torch
import torch_xla

device = torch_xla.device()
weights = torch.ones(4, device=device)
scratch = torch.zeros(2**37, device=device)  # 512 GiB of float32
total = (scratch + 1).sum() + weights.sum()
torch_xla.sync()
print(total.item())
