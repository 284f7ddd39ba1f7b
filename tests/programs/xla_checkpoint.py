"""A loop written for eager CUDA, moved to PyTorch/XLA as users move it (the device
named, no torch_xla.sync()), then a checkpoint of the model and its optimizer's state,
as training scripts end: torch.save reads each of its tensors on its own, a graph each."""
import torch
import torch_xla

device = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
for _ in range(3):
    x = torch.randn(4, 8).to(device)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iterations": 3}, "ckpt.pt")
print("saved a checkpoint after 3 iterations")
