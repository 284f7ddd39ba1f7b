"""A correctly written lazy training loop (mark_step() after every optimizer step) with
the optimizer named on the command line: torch's optimizers update one parameter at a
time on a lazy device, which must never read as a loop without mark_step()."""
import sys

import torch
import torch._lazy
import torch._lazy.ts_backend

OPTIMIZERS = {
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-3),
    "sgd": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    "adadelta": lambda params: torch.optim.Adadelta(params),
}

torch._lazy.ts_backend.init()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
                            torch.nn.Linear(32, 4)).to("lazy")
optimizer = OPTIMIZERS[sys.argv[1]](model.parameters())
for _ in range(6):
    inputs, targets = torch.randn(8, 16).to("lazy"), torch.randn(8, 4).to("lazy")
    optimizer.zero_grad()
    loss = ((model(inputs) - targets) ** 2).mean()
    loss.backward()
    optimizer.step()
    torch._lazy.mark_step()
print("trained")
