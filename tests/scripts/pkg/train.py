"""Run as `-m pkg.train`."""
import sys

import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
y = torch.arange(6, device="lazy").float().reshape(2, 3)
print("module", __name__, sys.argv[1:], y.tolist())
