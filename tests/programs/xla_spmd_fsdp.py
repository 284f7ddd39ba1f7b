"""A small transformer trained with FSDPv2 (SPMD), its parameters split over every device."""
import numpy as np
import torch
import torch.nn as nn
import torch_xla
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr
from torch_xla.experimental.spmd_fully_sharded_data_parallel import SpmdFullyShardedDataParallel as FSDPv2

xr.use_spmd()


def main(steps: int = 3) -> None:
    torch.manual_seed(0)
    devices = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(devices), (devices, 1), ("fsdp", "tensor"))
    xs.set_global_mesh(mesh)
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True, dropout=0.0)
    model = FSDPv2(nn.Sequential(layer, nn.Flatten(), nn.Linear(8 * 32, 4)).to(torch_xla.device()))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        x = torch.randn(16, 8, 32).to(torch_xla.device())
        y = torch.randn(16, 4).to(torch_xla.device())
        xs.mark_sharding(x, mesh, ("fsdp", None, None))
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        torch_xla.sync()
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
