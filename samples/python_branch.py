"""A penalty switched on by a Python `if` part way through training.

lazyviz should show: one recompile after warm-up, at the first step that takes the
branch: ops were added (the L2 penalty's), built at the line inside the branch; the
fix says the step's code took another path.
"""
import argparse

import torch
import torch._lazy
import torch._lazy.ts_backend


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()

    torch._lazy.ts_backend.init()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to("lazy")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    penalty_from = args.steps // 2
    l2 = torch.tensor(1e-4).to("lazy")  # a tensor: torch 2.13's lazy core mixes up a Python 1e-4 here

    for step in range(args.steps):
        inputs = torch.randn(16, 32).to("lazy")
        loss = model(inputs).pow(2).mean()
        if step >= penalty_from:
            loss = loss + l2 * sum((p * p).sum() for p in model.parameters())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch._lazy.mark_step()
    print(f"final loss {loss.cpu().item():.4f}")


if __name__ == "__main__":
    main()
