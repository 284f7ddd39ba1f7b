"""A tensor made without device= joins lazy ones in a list (torch.cat, as a KV cache
grows): the lazy core's assert says only "GetTensorList only supports lists of valid
tensors"."""
import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
x = torch.randn(4, 6).to("lazy")
torch._lazy.mark_step()
y = torch.cat([x, torch.ones(4, 6)])
print(y.sum().item())
