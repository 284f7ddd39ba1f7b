"""A graph XLA cannot compile: a custom call to a kernel no one registered for the
CPU. The error comes out of the sync, before anything ran."""
import torch
import torch_xla
from torch_xla.experimental.stablehlo_custom_call import stablehlo_custom_call

device = torch_xla.device()
weights = torch.ones(4, device=device)
torch_xla.sync()
scaled = stablehlo_custom_call([weights * 2], "my_missing_kernel", [[4]], [torch.float32], api_version=1)
total = scaled + 1
torch_xla.sync()
print(total.cpu())
