"""A small model trained with AdamW in a loop written for eager devices: no mark_step(),
the loss printed every few iterations. On TS, AdamW's lerp_ falls back once per
parameter, so optimizer.step() syncs once per parameter, each of another shape: no batch
ever changes (every batch is 16 rows)."""
import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(), torch.nn.Linear(24, 6)).to("lazy")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
for iteration in range(6):
    inputs, targets = torch.randn(16, 12).to("lazy"), torch.randn(16, 6).to("lazy")
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if iteration % 3 == 2:
        print(f"iteration {iteration} loss {loss.item():.4f}")
