"""A loop without mark_step() that reads its value every 50 iterations: the graph grows by
300 nodes a read until the process cannot hold it. Run under a memory limit, LTC's
allocator raises RuntimeError ("can't allocate memory") as eager code would."""
import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
x = torch.ones(256, 256, device="lazy") * 0.01
for i in range(1, 100000):
    x = x @ x * 0.5 + 1.0
    if i % 50 == 0:
        print(i, float(x.sum()))
