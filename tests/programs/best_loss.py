"""A training loop that keeps its best loss as people write it: `if loss < best: best =
loss`, on tensors on the lazy device. The comparison is read on the host at every step:
one extra execution a step, before the step's own.

    python best_loss.py [--steps 8]
"""
import argparse

import torch
import torch._lazy
import torch._lazy.ts_backend

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
args = parser.parse_args()

torch._lazy.ts_backend.init()
torch.manual_seed(0)
device = torch.device("lazy")
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
inputs, targets = torch.randn(64, 16).to(device), torch.randn(64, 1).to(device)
best = torch.tensor(float("inf")).to(device)
for _ in range(args.steps):
    loss = ((model(inputs) - targets) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if loss < best:
        best = loss.detach()
    torch._lazy.mark_step()
print(f"best loss {best.item():.6f}")
