"""Prints what a script can see of how it was started, then exits with argv[1]."""
import sys

import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()  # lazyviz initialised the backend already: must still work
x = torch.ones(3, device="lazy") * 2
torch._lazy.mark_step()
print("argv", sys.argv)
print("name", __name__)
print("path0", sys.path[0])
print("sum", x.sum().item())
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
