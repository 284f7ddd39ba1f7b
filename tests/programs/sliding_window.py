"""A window slid over data on the lazy device by a Python number: `data[:, step:step + 16]`.
The bounds are baked into each step's graph as constants, so every step compiles anew."""
import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to("lazy")
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.randn(64, 32).to("lazy")
for step in range(8):
    window = data[:, step:step + 16]
    loss = model(window).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    torch._lazy.mark_step()
print(f"loss {loss.item():.4f}")
