"""A character-level GPT trained from scratch, as nanoGPT's and the tutorials' loops are
written: random batches from one text, SGD with momentum, the loss and the step time
printed every few iterations, a checkpoint with the optimizer's state at the end, and no
mark_step() anywhere (the loop was written for eager CUDA). `train.py N` runs N
iterations; xla_train.py runs it on PyTorch/XLA."""
import os
import sys
import time

import torch
from model import GPT, GPTConfig

device = os.environ.get("GPT_DEVICE", "lazy")  # xla_train.py names PyTorch/XLA's
if device == "lazy":
    import torch._lazy
    import torch._lazy.ts_backend

    torch._lazy.ts_backend.init()
torch.manual_seed(1337)

text = "the quick brown fox jumps over the lazy dog. " * 40
chars = sorted(set(text))
stoi = {ch: i for i, ch in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)

max_iters = int(sys.argv[1]) if len(sys.argv) > 1 else 8
batch_size, block_size, log_interval = 4, 16, 2


def get_batch():
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x.to(device), y.to(device)


model = GPT(GPTConfig(len(chars), block_size=block_size)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

for it in range(max_iters):
    t0 = time.time()
    xb, yb = get_batch()
    logits, loss = model(xb, yb)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if it % log_interval == 0:
        dt = time.time() - t0
        print(f"iter {it}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms")

checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter_num": max_iters}
torch.save(checkpoint, "ckpt.pt")
print(f"saved a checkpoint after {max_iters} iterations")
