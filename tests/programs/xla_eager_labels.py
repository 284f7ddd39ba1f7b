"""PyTorch/XLA in eager mode, as its own guide steers users: every op outside a
compiled function runs at once, one small graph each, and the training step is traced
and compiled whole by torch_xla.compile. The labels are made on the host each step and
moved in (`torch.randint(...).to(device)`): an eager execution per step of their own.
With $COUNTERS_FILE set, writes torch_xla's own counts there at the end: the truth."""
import json
import os
import sys

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 6

torch_xla.experimental.eager_mode(True)
device = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss_fn = torch.nn.CrossEntropyLoss()
data = torch.randn(32, 16).to(device)


@torch_xla.compile
def train_step(data: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    optimizer.zero_grad()
    loss = loss_fn(model(data), labels)
    loss.backward()
    optimizer.step()
    return loss


for _ in range(STEPS):
    labels = torch.randint(0, 10, (32,)).to(device)
    loss = train_step(data, labels)
print(f"loss {loss.item():.4f}")
xm.wait_device_ops()
if "COUNTERS_FILE" in os.environ:
    names = ("CompileTime", "ExecuteTime", "EagerOpCompileTime", "EagerOpExecuteTime")
    counts = {name: (met.metric_data(name) or (0,))[0] for name in names}
    counts.update({name: met.counter_value(name) or 0 for name in ("UncachedCompile", "CachedCompile")})
    with open(os.environ["COUNTERS_FILE"], "w") as out:
        json.dump(counts, out)
