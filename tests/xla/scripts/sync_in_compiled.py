"""A read inside a function compiled with torch_xla.compile(full_graph=True): XLA prints
its Unexpected Execution Analysis and raises at that sync."""
import torch
import torch_xla

device = torch_xla.device()
weights = torch.ones(4, device=device)


def step_fn(inputs: torch.Tensor) -> torch.Tensor:
    loss = (weights * inputs).sum()
    if loss.item() > 100:
        loss = loss * 0
    return loss


compiled = torch_xla.compile(step_fn, full_graph=True, name="step")
for _ in range(2):
    print(compiled(torch.ones(4, device=device)))
