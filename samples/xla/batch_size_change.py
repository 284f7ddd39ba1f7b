"""PyTorch/XLA: the batch size changes mid-run, 16 for the first half of the steps, 24 after.

lazyviz should show: a compile at the first step with batch 24 (a recompile after
warm-up), explained as the batch dimension of the input changing 16 -> 24, at the
line that builds the input; every other step after warm-up is a cache hit.
Run with PJRT_DEVICE=CPU on a machine without an accelerator.
"""
import argparse

import torch
import torch_xla


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--change-at", type=int, help="the first step with batch 24 (default: half way)")
    args = parser.parse_args()
    change_at = args.steps // 2 if args.change_at is None else args.change_at

    device = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    for step in range(args.steps):
        batch = 16 if step < change_at else 24
        inputs = torch.randn(batch, 32).to(device)
        targets = torch.randn(batch, 1).to(device)
        optimizer.zero_grad()
        loss = ((model(inputs) - targets) ** 2).mean()
        loss.backward()
        optimizer.step()
        torch_xla.sync()
    print(f"final loss {loss.cpu().item():.4f}")


if __name__ == "__main__":
    main()
