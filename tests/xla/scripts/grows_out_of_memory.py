"""A loop without torch_xla.sync() that reads its value every 50 iterations: the graph
grows by 300 nodes a read until the process cannot hold it."""
import torch
import torch_xla

x = torch.ones(256, 256, device=torch_xla.device()) * 0.01
for i in range(1, 100000):
    x = x @ x * 0.5 + 1.0
    if i % 50 == 0:
        print(i, float(x.sum()), flush=True)
