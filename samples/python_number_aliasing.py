"""A hand-written SGD step whose learning rate warms up to the weight decay's value.

lazyviz should show: one recompile after warm-up, at the step where the learning rate
first equals the weight decay. torch uploads each Python number the step uses as a small
device buffer and gives equal numbers one shared buffer; which inputs share a buffer is
part of the compile-cache key, so the same IR compiles again. The explanation names the
two inputs and the line that made them (`p.sub_(...)`), and the fix is to pass such
values as tensors.
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
    model = torch.nn.Linear(32, 1).to("lazy")
    weight_decay = 0.01
    warmup_steps = 4

    for step in range(args.steps):
        lr = 0.01 * min(1.0, (step + 1) / warmup_steps)  # 0.0025, 0.005, 0.0075, 0.01, 0.01, ...
        inputs = torch.randn(16, 32).to("lazy")
        loss = model(inputs).pow(2).mean()
        model.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p.sub_(p.grad * lr + p * weight_decay)
        torch._lazy.mark_step()
    print(f"final loss {loss.cpu().item():.4f}")


if __name__ == "__main__":
    main()
