"""One module called from two lines of the script and from a helper of its own: below
the user's line the frames are the same code objects, at the same instructions."""
import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
layer = torch.nn.Linear(8, 8).to("lazy")


def helper(x):
    return layer(x * 3)


x = torch.ones(2, 8, device="lazy")
for _ in range(3):
    a = layer(x)
    b = layer(x * 2)
    c = helper(x)
    torch._lazy.mark_step()
