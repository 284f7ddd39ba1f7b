"""Ops PyTorch/XLA cannot lower, forward and backward: F.grid_sample (and its backward,
which autograd's thread runs without a Python frame, so XLA writes no analysis for its
execution) and torch.median in the loss. With $COUNTERS_FILE set, writes torch_xla's own
counts there at the end: the truth to check against."""
import json
import os

import torch
import torch.nn.functional as F
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

device = torch_xla.device()
torch.manual_seed(0)
conv = torch.nn.Conv2d(1, 2, 3, padding=1).to(device)
optimizer = torch.optim.SGD(conv.parameters(), lr=0.1)
for _ in range(5):
    images = torch.randn(2, 1, 8, 8).to(device)
    grid = (torch.rand(2, 8, 8, 2) * 2 - 1).to(device)
    warped = F.grid_sample(conv(images), grid, align_corners=False)
    loss = (warped - torch.median(warped)).abs().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    torch_xla.sync()
xm.wait_device_ops()
print("trained")
if "COUNTERS_FILE" in os.environ:
    counts = {name: (met.metric_data(name) or (0,))[0] for name in ("CompileTime", "ExecuteTime")}
    counts["compile_ms"] = (met.metric_data("CompileTime") or (0, 0))[1] / 1e6
    counts.update({name: met.counter_value(name) for name in met.counter_names() if name.startswith("aten::")})
    with open(os.environ["COUNTERS_FILE"], "w") as out:
        json.dump(counts, out)
