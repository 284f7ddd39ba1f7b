"""A loop with no `mark_step()`: the graph grows every iteration and runs once, huge,
at the end when the result is printed.

lazyviz should show: a single execution (caused by `item` at the final print) whose
graph repeats the loop body's ops once per iteration; the fix is a mark_step() per
iteration.
"""
import argparse

import torch
import torch._lazy
import torch._lazy.ts_backend


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()

    torch._lazy.ts_backend.init()
    torch.manual_seed(0)
    weight = torch.randn(8, 8).to("lazy")
    state = torch.randn(4, 8).to("lazy")
    for _ in range(args.steps):
        state = torch.tanh(state @ weight) * 0.5 + state
    print(f"state norm {state.pow(2).sum().item():.4f}")


if __name__ == "__main__":
    main()
