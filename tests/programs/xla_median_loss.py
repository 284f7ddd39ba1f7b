"""A loss with torch.median on PyTorch/XLA, where median has no lowering: each step XLA
runs the pending graph to feed median its input on the CPU. --sorted takes the median with
sort instead (lazyviz's advice), which lowers. With $COUNTERS_FILE set, writes torch_xla's
own counts there at the end: the truth to check against."""
import json
import os
import sys

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

device = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Linear(8, 8).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    x = torch.randn(16, 8).to(device)
    err = model(x) - x
    middle = torch.sort(err.flatten())[0][(err.numel() - 1) // 2] if "--sorted" in sys.argv else torch.median(err)
    loss = (err - middle).abs().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    torch_xla.sync()
xm.wait_device_ops()
print("loss", round(loss.item(), 4))
if "COUNTERS_FILE" in os.environ:
    counts = {name: (met.metric_data(name) or (0,))[0] for name in ("CompileTime", "ExecuteTime")}
    counts.update({name: met.counter_value(name) for name in met.counter_names() if name.startswith("aten::")})
    with open(os.environ["COUNTERS_FILE"], "w") as out:
        json.dump(counts, out)
