"""The loop for bench/growing_graph.py: a regression trained without mark_step(), as
pytorch/examples' regression does once moved to the lazy device. `loss.item()` syncs
every iteration, but the parameters' update is never cut off, so each sync runs (and
compiles) a graph about 40 nodes bigger than the last. Prints one JSON line: [seconds
for the loop] (TorchScript backend)."""
from __future__ import annotations

import json
import sys
import time

import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
iterations = int(sys.argv[1])
torch.manual_seed(0)
truth = torch.randn(4, 1).to("lazy")
model = torch.nn.Linear(4, 1).to("lazy")
started = time.perf_counter()
for _ in range(iterations):
    x = torch.randn(32).to("lazy").unsqueeze(1)
    features = torch.cat([x ** power for power in range(1, 5)], 1)
    model.zero_grad()
    loss = torch.nn.functional.smooth_l1_loss(model(features), features.mm(truth))
    loss.item()
    loss.backward()
    for parameter in model.parameters():
        parameter.data.add_(-0.1 * parameter.grad)
took = time.perf_counter() - started
print("LAZYVIZ-BENCH " + json.dumps([took]))
