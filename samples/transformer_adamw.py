"""A small `nn.TransformerEncoder` trained with AdamW on torch's lazy backend.

lazyviz should show: many executions per step: AdamW's `lerp` (`aten::lerp.Scalar`)
and other ops fall back to the CPU, each forcing the pending graph to run first; the
step's own mark_step execution comes last. `bench/overhead.py` times this loop.
"""
from __future__ import annotations

import argparse

import torch
import torch._lazy
import torch._lazy.ts_backend


def build(device: str = "lazy") -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0, batch_first=True)
    model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False),
                                torch.nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inputs = torch.randn(8, 16, 64).to(device)
    targets = torch.randn(8, 16, 1).to(device)
    return model, optimizer, inputs, targets


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               inputs: torch.Tensor, targets: torch.Tensor, sync=torch._lazy.mark_step) -> torch.Tensor:
    optimizer.zero_grad()
    loss = ((model(inputs) - targets) ** 2).mean()
    loss.backward()
    optimizer.step()
    sync()
    return loss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()

    torch._lazy.ts_backend.init()
    model, optimizer, inputs, targets = build()
    for _ in range(args.steps):
        loss = train_step(model, optimizer, inputs, targets)
    print(f"final loss {loss.cpu().item():.4f}")


if __name__ == "__main__":
    main()
