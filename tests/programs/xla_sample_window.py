"""A sample loop as character-level language models write it: the context fed to the
model is the last block_size tokens, `idx[:, -block_size:]`, from a start shorter than
that. Eager PyTorch clamps the bound to the sequence's start; PyTorch/XLA 2.9 raises
"Value out of range". --device cpu or xla."""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu")
args = parser.parse_args()
if args.device == "xla":
    import torch_xla

    device = torch_xla.device()
else:
    device = torch.device(args.device)

torch.manual_seed(0)
block_size, vocab = 8, 11
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 16), torch.nn.Linear(16, vocab)).to(device)
idx = torch.zeros((1, 1), dtype=torch.long, device=device)
with torch.no_grad():
    for _ in range(4):
        logits = model(idx[:, -block_size:])
        idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
print("sample:", idx.cpu().tolist())
