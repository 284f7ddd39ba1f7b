"""A project whose model lives in a package the script imports through PYTHONPATH (or a
`pip install -e .`), not beside it."""
import torch
import torch._lazy
import torch._lazy.ts_backend
from pkg.model import Net

torch._lazy.ts_backend.init()
torch.manual_seed(0)
net = Net().to("lazy")
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for _ in range(3):
    loss = net(torch.randn(4, 8).to("lazy"))
    loss.backward()
    opt.step()
    opt.zero_grad()
    torch._lazy.mark_step()
print("done")
