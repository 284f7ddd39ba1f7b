"""A window slid over the data by a Python number: `data[:, step:step + 16]`. PyTorch/XLA
builds it as an xla::select node whose bounds its IR text does not print, so every
step's graph reads the same while XLA compiles each anew; the HLO it compiled holds the
bounds. With $COUNTERS_FILE set, writes torch_xla's own counts there at the end: the
truth to check against."""
import json
import os

import torch
import torch_xla
import torch_xla.debug.metrics as met

device = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.randn(64, 32).to(device)
for step in range(6):
    window = data[:, step:step + 16]
    loss = model(window).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    torch_xla.sync()
print(f"loss {loss.item():.4f}")
if "COUNTERS_FILE" in os.environ:
    with open(os.environ["COUNTERS_FILE"], "w") as out:
        json.dump({"UncachedCompile": met.counter_value("UncachedCompile"),
                   "CachedCompile": met.counter_value("CachedCompile")}, out)
