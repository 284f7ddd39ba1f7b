"""A training loop ported to PyTorch/XLA without torch_xla.sync(): the loss's .item()
syncs every iteration, and each sync runs (and compiles) the work of every iteration so
far. With $COUNTERS_FILE set, writes torch_xla's own counts there at the end: the truth
to check against."""
import json
import os

import torch
import torch_xla
import torch_xla.debug.metrics as met

device = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Linear(8, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(8):
    inputs = torch.randn(16, 8).to(device)
    loss = model(inputs).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    print(step, round(loss.item(), 4))
if "COUNTERS_FILE" in os.environ:
    with open(os.environ["COUNTERS_FILE"], "w") as out:
        json.dump({"UncachedCompile": met.counter_value("UncachedCompile"),
                   "CachedCompile": met.counter_value("CachedCompile") or 0}, out)
