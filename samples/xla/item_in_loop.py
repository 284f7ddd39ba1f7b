"""PyTorch/XLA: logging the loss with `.item()` every step, an extra execution per step.

lazyviz should show: two executions per step, one caused by `item` at the
`loss.item()` line in the logging call and one by `mark_step` (here
`xm.mark_step()`); the fix is to log every N steps or from a step closure
(`xm.add_step_closure`). Run with PJRT_DEVICE=CPU on a machine without an accelerator.
"""
import argparse

import torch
import torch_xla
import torch_xla.core.xla_model as xm


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()

    device = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.randn(16, 32).to(device)
    targets = torch.randn(16, 1).to(device)

    for step in range(args.steps):
        optimizer.zero_grad()
        loss = ((model(inputs) - targets) ** 2).mean()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
        xm.mark_step()


if __name__ == "__main__":
    main()
