"""A PyTorch/XLA training loop that keeps its compiled graphs across runs, as those who
pay minutes per compile do: torch_xla.runtime.initialize_cache(path) before the first
graph. Its batch size is an argument, so a second run can change it. With
$COUNTERS_FILE set, writes torch_xla's own counts there at the end: the truth."""
import json
import os
import sys

import torch
import torch_xla
import torch_xla.debug.metrics as met
import torch_xla.runtime as xr

CACHE, BATCH = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 8
xr.initialize_cache(CACHE, readonly=False)
device = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(4):
    data, target = torch.randn(BATCH, 16).to(device), torch.randn(BATCH, 4).to(device)
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(data), target)
    loss.backward()
    optimizer.step()
    torch_xla.sync()
print(f"loss {loss.item():.4f}")
if "COUNTERS_FILE" in os.environ:
    names = ("UncachedCompile", "CachedCompile", "PersistentCacheHit", "PersistentCacheMiss",
             "PersistentCacheDeserializeFailure")
    counts = {name: met.counter_value(name) or 0 for name in names}
    counts["ExecuteTime"] = (met.metric_data("ExecuteTime") or (0,))[0]
    with open(os.environ["COUNTERS_FILE"], "w") as out:
        json.dump(counts, out)
