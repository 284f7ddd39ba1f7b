"""A correctly written PyTorch/XLA loop: Linear-ReLU-Linear, AdamW, torch_xla.sync() per
step. torch's optimizers update one parameter at a time on XLA (foreach is CUDA-only),
which must not read as a loop without mark_step(). With $COUNTERS_FILE set, writes
torch_xla's own compile and execute counts there at the end: the truth to check against."""
import json
import os

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

device = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(6):
    inputs, targets = torch.randn(8, 16).to(device), torch.randn(8, 4).to(device)
    optimizer.zero_grad()
    loss = ((model(inputs) - targets) ** 2).mean()
    loss.backward()
    optimizer.step()
    torch_xla.sync()
print("trained")
xm.wait_device_ops()  # the last execution's ExecuteTime sample comes when it has run
if "COUNTERS_FILE" in os.environ:
    counts = {name: (met.metric_data(name) or (0,))[0] for name in ("CompileTime", "ExecuteTime")}
    with open(os.environ["COUNTERS_FILE"], "w") as out:
        json.dump(counts, out)
