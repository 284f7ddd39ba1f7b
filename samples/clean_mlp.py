"""A clean MLP training loop on torch's lazy backend.

lazyviz should show: one execution per step, caused by mark_step at the
`torch._lazy.mark_step()` line; two cache misses while the graph warms up (the first
step also runs the parameters' initialisation), then only hits; no fallbacks.
"""
import argparse

import torch
import torch._lazy
import torch._lazy.ts_backend


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()

    torch._lazy.ts_backend.init()
    torch.manual_seed(0)
    device = "lazy"
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.randn(16, 32).to(device)
    targets = torch.randn(16, 1).to(device)

    for _ in range(args.steps):
        optimizer.zero_grad()
        loss = ((model(inputs) - targets) ** 2).mean()
        loss.backward()
        optimizer.step()
        torch._lazy.mark_step()
    print(f"final loss {loss.cpu().item():.4f}")


if __name__ == "__main__":
    main()
