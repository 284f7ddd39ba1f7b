"""A PyTorch/XLA training loop in the style of pytorch/xla's own examples
(train_decoder_only_base.py): fake data through MpDeviceLoader, the step function
under torch_xla.compile(full_graph=True), Adam, a step closure every N steps that
checks the loss for NaN (a new op: one execution of its own), and the parameters
broadcast from the master first. Each library sync is not a step: the steps are the
batches. With $COUNTERS_FILE set, writes torch_xla's own compile and execute counts
there at the end: the truth to check against."""
import itertools
import json
import os
import sys

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.distributed.parallel_loader as pl
import torch_xla.utils.utils as xu

STEPS, LOG_EVERY = int(sys.argv[1]) if len(sys.argv) > 1 else 8, 5

device = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(64, 16), torch.nn.Linear(16, 64)).to(device)
xm.broadcast_master_param(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = torch.nn.CrossEntropyLoss()
fake = xu.SampleGenerator(data=(torch.zeros(4, 8, dtype=torch.int64), torch.zeros(4, 8, dtype=torch.int64)),
                          sample_count=1000)
loader = pl.MpDeviceLoader(fake, device)


def step_fn(data: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    optimizer.zero_grad()
    loss = loss_fn(model(data).view(-1, 64), target.view(-1))
    loss.backward()
    optimizer.step()
    return loss


def log(step: int, loss: torch.Tensor) -> None:
    print(f"step {step} loss {loss.item():.4f}")
    assert not torch.isnan(loss).item(), "loss became NaN"


compiled_step = torch_xla.compile(step_fn, full_graph=True, name="step_fn")
for step, (data, target) in enumerate(itertools.islice(loader, STEPS)):
    loss = compiled_step(data, target)
    if step % LOG_EVERY == 0:
        xm.add_step_closure(log, args=(step, loss))
xm.wait_device_ops()
if "COUNTERS_FILE" in os.environ:
    counts = {name: (met.metric_data(name) or (0,))[0] for name in ("CompileTime", "ExecuteTime")}
    with open(os.environ["COUNTERS_FILE"], "w") as out:
        json.dump(counts, out)
