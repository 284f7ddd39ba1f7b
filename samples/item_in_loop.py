"""Logging the loss with `.item()` every step: an extra execution per step.

lazyviz should show: two executions per step, one caused by `item` at the
`loss.item()` line in the logging call and one by `mark_step`; the fix is to log
every N steps or from a step closure.
"""
import argparse

import torch
import torch._lazy
import torch._lazy.ts_backend


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()

    torch._lazy.ts_backend.init()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to("lazy")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.randn(16, 32).to("lazy")
    targets = torch.randn(16, 1).to("lazy")

    for step in range(args.steps):
        optimizer.zero_grad()
        loss = ((model(inputs) - targets) ** 2).mean()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
        torch._lazy.mark_step()


if __name__ == "__main__":
    main()
