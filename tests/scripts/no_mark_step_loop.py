"""A training loop that never calls mark_step() and logs loss.item() each iteration:
the item() syncs only the loss, so the optimizer's parameter updates pile up and the
graph grows with every iteration."""
import sys

import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)).to("lazy")
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(int(sys.argv[1]) if len(sys.argv) > 1 else 8):
    inputs, targets = torch.randn(8, 16).to("lazy"), torch.randn(8, 1).to("lazy")
    optimizer.zero_grad()
    loss = ((model(inputs) - targets) ** 2).mean()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
