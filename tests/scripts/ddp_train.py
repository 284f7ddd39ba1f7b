"""Data-parallel training on the lazy device under torchrun (gloo): gradients are
all-reduced every step. With --diverge-at N, rank 1 gets a batch of 24 at step N while
the others keep 16, so it compiles a graph they do not. With --crash-at N, rank 1 raises at step N."""
import argparse

import torch
import torch._lazy
import torch._lazy.ts_backend
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--diverge-at", type=int, default=-1)
parser.add_argument("--crash-at", type=int, default=-1, help="rank 1 raises at this step")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch._lazy.ts_backend.init()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to("lazy")
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(args.steps):
    if rank == 1 and step == args.crash_at:
        raise RuntimeError(f"rank 1 gives up at step {step}")
    batch = 24 if (rank == 1 and step == args.diverge_at) else 16
    inputs, targets = torch.randn(batch, 8).to("lazy"), torch.randn(batch, 1).to("lazy")
    optimizer.zero_grad()
    ((model(inputs) - targets) ** 2).mean().backward()
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad)
    optimizer.step()
    torch._lazy.mark_step()
print(f"rank {rank} done", flush=True)
dist.destroy_process_group()
