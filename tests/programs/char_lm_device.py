"""A character-level language model in miniature, written as public ones are: the device
from a flag (--device cpu|lazy, the backend set up only for lazy), the loss read every
--log-every steps and no mark_step() unless --mark-step, then a sample read a character
at a time from a context that grows by one token (its last block_size tokens). Flags
give it the shapes other edits answer: --adam, --clip, --argmax, --lstm, --save PATH,
--best (the best loss kept by `if`), --split (the heads split with .split), --attention
(torch's scaled_dot_product_attention), --schedule (a learning rate indexed by the step)."""
import argparse

import torch
from torch import nn
from torch.nn import functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cpu")
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--log-every", type=int, default=10)
parser.add_argument("--tokens", type=int, default=6)
parser.add_argument("--mark-step", action="store_true")
parser.add_argument("--adam", action="store_true")
parser.add_argument("--clip", action="store_true")
parser.add_argument("--argmax", action="store_true")
parser.add_argument("--lstm", action="store_true")
parser.add_argument("--save", default="")
parser.add_argument("--best", action="store_true")
parser.add_argument("--split", action="store_true")
parser.add_argument("--attention", action="store_true")
parser.add_argument("--schedule", action="store_true")
args = parser.parse_args()
if args.device == "lazy":
    import torch._lazy.ts_backend

    torch._lazy.ts_backend.init()

text = "the quick brown fox jumps over the lazy dog. " * 8
chars = sorted(set(text))
data = torch.tensor([chars.index(c) for c in text])
block_size, vocab = 8, len(chars)


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, 16)
        self.positions = nn.Embedding(block_size, 16)
        self.rnn = nn.LSTM(16, 16, batch_first=True) if args.lstm else None
        self.head = nn.Linear(16, vocab)

    def forward(self, idx):
        positions = torch.arange(idx.size(1), device=idx.device)
        hidden = torch.tanh(self.tokens(idx) + self.positions(positions))
        if args.split:
            left, right = hidden.split(8, dim=2)
            hidden = torch.cat([right, left], dim=2)
        if args.attention:
            hidden = F.scaled_dot_product_attention(hidden, hidden, hidden, is_causal=True)
        if self.rnn is not None:
            hidden, _ = self.rnn(hidden)
        return self.head(hidden)


torch.manual_seed(0)
model = TinyLM().to(args.device)
optimizer = torch.optim.Adam(model.parameters(), lr=0.05) if args.adam else torch.optim.SGD(model.parameters(), lr=0.5)
best_loss = torch.tensor(float("inf"), device=args.device)
scale = torch.linspace(1.0, 0.5, args.steps).to(args.device)
for step in range(args.steps):
    starts = torch.randint(len(data) - block_size - 1, (4,))
    x = torch.stack([data[i:i + block_size] for i in starts]).to(args.device)
    y = torch.stack([data[i + 1:i + block_size + 1] for i in starts]).to(args.device)
    loss = F.cross_entropy(model(x).view(-1, vocab), y.view(-1))
    if args.schedule:
        loss = loss * scale[step]
    optimizer.zero_grad()
    loss.backward()
    if args.clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    if args.best:  # noqa: SIM102 - the flag apart: the choice below is one lazyviz can move to the device
        if loss < best_loss:
            best_loss = loss.detach()
    if (step + 1) % args.log_every == 0:
        print(f"step {step + 1}: loss {loss.item():.4f}")
    if args.mark_step and args.device == "lazy":
        torch._lazy.mark_step()

if args.save:
    torch.save(model.state_dict(), args.save)
    print("saved", sorted(torch.load(args.save)))
model.eval()
sample = "t"
with torch.no_grad():
    idx = torch.tensor([[chars.index("t")]], device=args.device)
    for _ in range(args.tokens):
        logits = model(idx[:, -block_size:])
        best = int(logits[0, -1].argmax()) if args.argmax else int(logits[0, -1].max(0).indices)
        sample += chars[best]
        idx = torch.cat([idx, torch.tensor([[best]], device=args.device)], dim=1)
print("sample:", sample)
if args.best:
    print(f"best loss {best_loss.item():.4f}")
