"""Per-sample loss weights whose dtype changes half way through the run.

lazyviz should show: one recompile after warm-up, at the step where the weights start
to come from a float64 source (here a list of Python floats given dtype=torch.double,
as a NumPy array would be): an input's dtype changed, Float[16] -> Double[16], built at
the line that moves the weights to the device. The fix is to cast once, where the
weights are made.
"""
import argparse

import torch
import torch._lazy
import torch._lazy.ts_backend


def load_weights(step: int, switch_at: int) -> torch.Tensor:
    values = [1.0 + 0.1 * (i % 3) for i in range(16)]
    if step < switch_at:
        return torch.tensor(values)
    return torch.tensor(values, dtype=torch.double)  # a float64 source, as NumPy gives


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()

    torch._lazy.ts_backend.init()
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 1).to("lazy")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    for step in range(args.steps):
        inputs = torch.randn(16, 32).to("lazy")
        weights = load_weights(step, args.steps // 2).to("lazy")
        loss = (model(inputs).squeeze(1).pow(2) * weights).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch._lazy.mark_step()
    print(f"final loss {loss.cpu().item():.4f}")


if __name__ == "__main__":
    main()
