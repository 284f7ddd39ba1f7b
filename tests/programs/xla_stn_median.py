"""A spatial transformer whose loss takes a median, on PyTorch/XLA (the program of issue
#61, as a user wrote it): grid_sample and its backward fall back, and so does median.
XLA counts median's fallback before the read of its inputs runs, in the window of the
execution before. --sorted takes the median with sort (which lowers). With
$COUNTERS_FILE set, writes torch_xla's own counts there at the end: the truth."""
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_xla
import torch_xla.debug.metrics as met


class STN(nn.Module):
    def __init__(self):
        super().__init__()
        self.loc = nn.Sequential(nn.Flatten(), nn.Linear(16 * 16, 6))
        nn.init.zeros_(self.loc[1].weight)
        with torch.no_grad():
            self.loc[1].bias.copy_(torch.tensor([1.0, 0, 0, 0, 1.0, 0]))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(16 * 16, 4))

    def forward(self, x):
        theta = self.loc(x).view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        x = F.grid_sample(x, grid, align_corners=False)
        return self.head(x)


def main():
    torch.manual_seed(0)
    device = torch_xla.device()
    model = STN().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(5):
        x = torch.randn(8, 1, 16, 16).to(device)
        y = torch.randn(8, 4).to(device)
        opt.zero_grad()
        err = (model(x) - y).abs()
        if "--sorted" in sys.argv:
            loss = err.mean() + 0.1 * torch.sort(err.flatten())[0][(err.numel() - 1) // 2]
        else:
            loss = err.mean() + 0.1 * torch.median(err)
        loss.backward()
        opt.step()
        torch_xla.sync()
    print(f"loss {loss.item():.4f}")
    if "COUNTERS_FILE" in os.environ:
        counts = {name: (met.metric_data(name) or (0,))[0] for name in ("CompileTime", "ExecuteTime")}
        counts.update({name: met.counter_value(name) for name in met.counter_names() if name.startswith("aten::")})
        with open(os.environ["COUNTERS_FILE"], "w") as out:
            json.dump(counts, out)


if __name__ == "__main__":
    main()
