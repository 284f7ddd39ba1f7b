"""A tensor made without device= meets a lazy one: the add raises."""
import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
x = torch.randn(4, 6).to("lazy")
torch._lazy.mark_step()
y = x + torch.ones(4, 6)
print(y.sum().item())
