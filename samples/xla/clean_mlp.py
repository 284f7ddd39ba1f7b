"""PyTorch/XLA: a clean training loop, with the steps run by `torch_xla.step()`.

lazyviz should show: one execution per step, caused by `mark_step` (the sync at
the end of each `torch_xla.step()` block, and `xm.optimizer_step`'s barrier-free
update inside it); compiles in the first steps only, cache hits after warm-up;
no findings. Run with PJRT_DEVICE=CPU on a machine without an accelerator.
"""
import argparse

import torch
import torch_xla
import torch_xla.core.xla_model as xm


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()

    device = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.randn(16, 32).to(device)
    targets = torch.randn(16, 1).to(device)

    for _ in range(args.steps):
        with torch_xla.step():
            optimizer.zero_grad()
            loss = ((model(inputs) - targets) ** 2).mean()
            loss.backward()
            xm.optimizer_step(optimizer)
    print(f"final loss {loss.cpu().item():.4f}")


if __name__ == "__main__":
    main()
