"""Inference through torch.compile(backend="openxla"), as PyTorch/XLA serves it: dynamo
traces the model, torch_xla's bridge compiles each FX graph to one XLA graph. Three
batches of 8 rows, then two of 16: dynamo traces again for the new size and XLA compiles
again. The batches of 16 are scaled on the device before the call, so each is still
pending there: the bridge runs it first (as it traces, then at the call). The outputs
are read after the calls. With $COUNTERS_FILE set,
writes torch_xla's own counts there at the end: the truth."""
import json
import os

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

device = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
compiled = torch.compile(model, backend="openxla")
outputs = []
with torch.no_grad():
    for rows in (8, 8, 8, 16, 16):
        batch = torch.randn(rows, 16).to(device)
        if rows == 16:
            batch = batch * 2
        outputs.append(compiled(batch))
for out in outputs:  # read after the calls: no read between them
    print(out.shape[0], f"{out.sum().item():.4f}")
xm.wait_device_ops()
if "COUNTERS_FILE" in os.environ:
    counts = {name: (met.metric_data(name) or (0,))[0] for name in ("CompileTime", "ExecuteTime")}
    counts.update({name: met.counter_value(name) or 0 for name in ("UncachedCompile", "CachedCompile")})
    with open(os.environ["COUNTERS_FILE"], "w") as out:
        json.dump(counts, out)
