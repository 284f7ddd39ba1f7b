"""A Hugging Face GPT-2 from a tiny random config (no download) trained on the lazy
device with AdamW, as a user first tries it. On torch 2.13's TorchScript backend the
attention's `.split(...)` falls back to the CPU and hands back pieces that are not lazy
tensors: the first op that uses one raises. --narrow applies the workaround (split as
narrow, which lowers), and the model trains."""
import sys

import torch
import torch._lazy
import torch._lazy.ts_backend
from transformers import GPT2Config, GPT2LMHeadModel

torch._lazy.ts_backend.init()
torch.manual_seed(0)
if "--narrow" in sys.argv:
    split = torch.Tensor.split

    def split_by_narrow(tensor: torch.Tensor, size: object, dim: int = 0) -> tuple[torch.Tensor, ...]:
        if tensor.device.type != "lazy" or not isinstance(size, int):
            return split(tensor, size, dim)
        dim = dim % tensor.dim()
        return tuple(tensor.narrow(dim, start, min(size, tensor.size(dim) - start))
                     for start in range(0, tensor.size(dim), size))

    torch.Tensor.split = split_by_narrow  # type: ignore[method-assign]

config = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=1000, n_positions=64, use_cache=False,
                    attn_implementation="eager", bos_token_id=0, eos_token_id=0)
model = GPT2LMHeadModel(config).to("lazy")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(3):
    tokens = torch.randint(0, 1000, (2, 16)).to("lazy")
    loss = model(tokens, labels=tokens).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    torch._lazy.mark_step()
    print(step, round(loss.item(), 3))
