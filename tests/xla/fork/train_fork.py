"""A training loop on forkxla, as its users write one: the fork's device and its own
names (`import forkxla.core.xla_model as xm`), and the loss read every step without the
fork's sync(), so one graph holds every step's work."""
import sys

import forkxla
import forkxla.core.xla_model as xm
import torch

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 6
torch.manual_seed(0)
device = forkxla.device()
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(32, 8).to(device), torch.randn(32, 1).to(device)
for step in range(STEPS):
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 2 == 1:
        print(f"step {step} loss {loss.item():.4f}")
xm.wait_device_ops()
print("on", loss.device.type)
