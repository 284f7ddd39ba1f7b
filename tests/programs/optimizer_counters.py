"""A correctly written training loop with an optimizer that keeps state (momentum SGD,
Adam, AdamW: Adam's lerp_ falls back), which prints LTC's own counters at the end, as a
user checking their loop would: traced in any capture mode, it must print what it prints
untraced.

    python optimizer_counters.py sgd|adam|adamw
"""
import sys

import torch
import torch._lazy
import torch._lazy.metrics as metrics
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
                            torch.nn.Linear(32, 4)).to("lazy")
make = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
        "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3)}[sys.argv[1]]
optimizer = make(model.parameters())
for _ in range(4):
    inputs, targets = torch.randn(8, 16).to("lazy"), torch.randn(8, 4).to("lazy")
    optimizer.zero_grad()
    loss = ((model(inputs) - targets) ** 2).mean()
    loss.backward()
    optimizer.step()
    torch._lazy.mark_step()
print({name: metrics.counter_value(name) for name in sorted(metrics.counter_names())})
