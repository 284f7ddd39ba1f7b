"""`F.mse_loss` has no lowering on torch's TorchScript lazy backend: it falls back to
the CPU, which forces its inputs to execute first, every step.

lazyviz should show: fallbacks `aten::mse_loss` (forward) and
`aten::mse_loss_backward` (in `loss.backward()`), each forcing an extra execution
per step, at the lines that call them; the fix is `((out - y) ** 2).mean()`.
"""
import argparse

import torch
import torch._lazy
import torch._lazy.ts_backend
import torch.nn.functional as F


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()

    torch._lazy.ts_backend.init()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to("lazy")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.randn(16, 32).to("lazy")
    targets = torch.randn(16, 1).to("lazy")

    for _ in range(args.steps):
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        torch._lazy.mark_step()
    print(f"final loss {loss.cpu().item():.4f}")


if __name__ == "__main__":
    main()
