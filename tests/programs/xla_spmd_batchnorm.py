"""Data parallel on an SPMD mesh (PyTorch/XLA): a convolution, batch norm and another
convolution, the batch split over every device. XLA's partitioner does not split
BatchNorm over the batch on CPU: it gathers the whole batch, and what follows runs on
all of it on every device. --manual takes the batch statistics from reductions (mean and
var over the batch), which it splits with an all-reduce of the statistics.

Usage: xla_spmd_batchnorm.py [--manual]
"""
import sys

import numpy as np
import torch
import torch.nn as nn
import torch_xla
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr

xr.use_spmd()


def main() -> None:
    device = torch_xla.device()
    devices = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(devices), (devices,), ("data",))
    torch.manual_seed(0)
    conv1, bn, conv2 = nn.Conv2d(3, 16, 3).to(device), nn.BatchNorm2d(16).to(device), nn.Conv2d(16, 16, 3).to(device)
    opt = torch.optim.SGD([*conv1.parameters(), *bn.parameters(), *conv2.parameters()], lr=0.01)
    for _ in range(3):
        x = torch.randn(32, 3, 16, 16).to(device)
        xs.mark_sharding(x, mesh, ("data", None, None, None))
        opt.zero_grad()
        c = conv1(x)
        if "--manual" in sys.argv:
            mean, var = c.mean((0, 2, 3), keepdim=True), c.var((0, 2, 3), unbiased=False, keepdim=True)
            h = (c - mean) / torch.sqrt(var + bn.eps) * bn.weight.view(1, -1, 1, 1) + bn.bias.view(1, -1, 1, 1)
        else:
            h = bn(c)
        loss = conv2(torch.relu(h)).mean()
        loss.backward()
        opt.step()
        torch_xla.sync()
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
