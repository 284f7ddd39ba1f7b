"""The real run for bench/heavy_report.py --real: a small transformer layer trained on
the lazy device with a new sequence length at every step (a new graph and a recompile
each step, as a decode loop or per-batch padding without buckets makes them)."""
from __future__ import annotations

import argparse

import torch
import torch._lazy
import torch._lazy.ts_backend


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    torch._lazy.ts_backend.init()
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=2, dim_feedforward=64, dropout=0.0,
                                             batch_first=True).to("lazy")
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.01)
    for step in range(args.steps):
        batch, length = 1 + step // 64, 4 + step % 64  # a new shape at every step, never a large one
        inputs = torch.randn(batch, length, 32).to("lazy")
        loss = layer(inputs).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch._lazy.mark_step()
    print(f"final loss {loss.cpu().item():.4f}")


if __name__ == "__main__":
    main()
