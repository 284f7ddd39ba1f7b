"""word_language_model's Transformer variant in miniature: the model caches its causal
mask as a plain tensor attribute (`self.src_mask`, neither a parameter nor a buffer),
the whole model is saved with torch.save(model, f), loaded back under safe_globals and
evaluated on the device it was moved to. --device cpu or lazy."""
import argparse

import torch
from torch import nn


class MaskedModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.out = nn.Linear(8, 16)
        self.src_mask = None

    def forward(self, tokens):
        if self.src_mask is None or self.src_mask.size(0) != len(tokens):
            self.src_mask = torch.triu(torch.ones(len(tokens), len(tokens), device=tokens.device), diagonal=1)
        hidden = self.embed(tokens)
        mixed = hidden + (self.src_mask @ hidden.transpose(0, 1).reshape(len(tokens), -1)).reshape(hidden.shape) * 0.1
        return self.out(mixed)


parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu")
args = parser.parse_args()
if args.device == "lazy":
    import torch._lazy.ts_backend
    torch._lazy.ts_backend.init()
torch.manual_seed(0)
device = torch.device(args.device)
model = MaskedModel().to(device)
tokens = torch.arange(12).reshape(6, 2).to(device) % 16
for step in range(3):
    model.zero_grad()
    loss = model(tokens).logsumexp(-1).mean()
    loss.backward()
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-0.1)
    print(f"step {step} loss {loss.item():.4f}")
with open("model.pt", "wb") as f:
    torch.save(model, f)
with open("model.pt", "rb") as f, torch.serialization.safe_globals([MaskedModel, nn.Embedding, nn.Linear]):
    model = torch.load(f)
with torch.no_grad():
    print(f"evaluated {model(tokens).logsumexp(-1).mean().item():.4f}")
