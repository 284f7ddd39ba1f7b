"""A user debugging with LTC's own tools: a dump asked for at run time (as PyTorch's
test/lazy/test_debug_util.py does) unless one is set already, torch._lazy.debug's
helpers, and every counter printed at the end. Traced, all of it must read the same."""
import json
import os
import sys

import torch
import torch._lazy
import torch._lazy.debug
import torch._lazy.metrics
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
torch.manual_seed(0)


def train(steps):
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("lazy")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = model(torch.randn(3, 5).to("lazy")).sum()
        loss.backward()
        optimizer.step()
        if _ == 0:
            print(torch._lazy.debug.dump_ir([loss], "text"))
            print(torch._lazy.debug.render_ir_graph([loss]))
        torch._lazy.mark_step()


if len(sys.argv) > 1:
    os.environ["LTC_SAVE_TENSORS_FILE"] = sys.argv[1]
train(4)
print(json.dumps({name: torch._lazy.metrics.counter_value(name) for name in sorted(torch._lazy.metrics.counter_names())}))
