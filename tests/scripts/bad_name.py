"""Raises an error whose text holds a terminal escape sequence."""
import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
torch._lazy.mark_step()
(torch.ones(2, device="lazy") + 1).sum().item()
raise ValueError("bad \x1b]0;pwned\x07\x1b[31mred")
