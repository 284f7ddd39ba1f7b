"""A two-layer MLP on an SPMD mesh of every device (PyTorch/XLA), in one of four layouts:

  data      the batch split over the devices, the weights whole (data parallel)
  megatron  Megatron's tensor-parallel layout: w1 split by columns, w2 by rows
  wrong     that layout with w2 annotated by columns too (one line wrong)
  2d        a (data, model) mesh: the batch over data, Megatron's layout over model
  loader    data parallel with the batch split by the loader (MpDeviceLoader's
            input_sharding), as pytorch/xla's SPMD examples split theirs

Usage: xla_spmd_mlp.py LAYOUT [STEPS]
"""
import sys

import numpy as np
import torch
import torch_xla
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr

xr.use_spmd()


def main(layout: str, steps: int) -> None:
    torch.manual_seed(0)
    device = torch_xla.device()
    devices = xr.global_runtime_device_count()
    shape = {"data": (devices, 1), "loader": (devices, 1), "2d": (2, devices // 2)}.get(layout, (1, devices))
    mesh = xs.Mesh(np.arange(devices), shape, ("data", "model"))
    w1 = torch.randn(64, 256, device=device, requires_grad=True)
    w2 = torch.randn(256, 64, device=device, requires_grad=True)
    if layout not in ("data", "loader"):
        xs.mark_sharding(w1, mesh, (None, "model"))
    if layout in ("megatron", "2d"):
        xs.mark_sharding(w2, mesh, ("model", None))
    if layout == "wrong":
        xs.mark_sharding(w2, mesh, (None, "model"))
    opt = torch.optim.SGD([w1, w2], lr=0.01)
    batches = [torch.randn(64, 64) for _ in range(steps)]
    if layout == "loader":
        import torch_xla.distributed.parallel_loader as pl

        batches = pl.MpDeviceLoader(batches, device, input_sharding=xs.ShardingSpec(mesh, ("data", None)))
    for batch in batches:
        x = batch.to(device)
        if layout in ("data", "2d"):
            xs.mark_sharding(x, mesh, ("data", None))
        opt.zero_grad()
        h = torch.relu(x @ w1)
        out = h @ w2
        loss = out.pow(2).mean()
        loss.backward()
        opt.step()
        torch_xla.sync()
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
