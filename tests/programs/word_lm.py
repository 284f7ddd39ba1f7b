"""A Transformer language model as people first port one to a lazy device, written here
in the shape of pytorch/examples' word_language_model: a corpus of words from text
files batched into columns on the device, batches cut out of it with Python slice
bounds (`source[i:i + length]`), a causal mask, clip_grad_norm_, a hand-written SGD
update, `.item()` of every loss, an evaluation pass, and no mark_step() anywhere."""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
import torch._lazy
import torch._lazy.ts_backend
from torch import nn


def read_words(path: Path, vocabulary: dict[str, int]) -> torch.Tensor:
    ids = []
    for line in path.read_text(encoding="utf-8").splitlines():
        for word in [*line.split(), "<eos>"]:
            ids.append(vocabulary.setdefault(word, len(vocabulary)))
    return torch.tensor(ids, dtype=torch.int64)


def into_columns(ids: torch.Tensor, columns: int) -> torch.Tensor:
    rows = ids.size(0) // columns
    return ids[: rows * columns].view(columns, -1).t().contiguous().to("lazy")


def cut(source: torch.Tensor, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    length = min(length, len(source) - 1 - start)
    return source[start:start + length], source[start + 1:start + 1 + length].reshape(-1)


class LanguageModel(nn.Module):
    def __init__(self, words: int, width: int, heads: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.width = width
        self.embed = nn.Embedding(words, width)
        layer = nn.TransformerEncoderLayer(width, heads, hidden, dropout=0.2)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.decode = nn.Linear(width, words)
        position = torch.arange(512).unsqueeze(1)
        scale = torch.exp(torch.arange(0, width, 2) * (-math.log(10000.0) / width))
        table = torch.zeros(512, 1, width)
        table[:, 0, 0::2], table[:, 0, 1::2] = torch.sin(position * scale), torch.cos(position * scale)
        self.register_buffer("positions", table)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        mask = torch.triu(torch.full((len(tokens), len(tokens)), float("-inf"), device=tokens.device), diagonal=1)
        hidden = self.embed(tokens) * math.sqrt(self.width) + self.positions[: tokens.size(0)]
        return torch.log_softmax(self.decode(self.encoder(hidden, mask)), dim=-1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True)  # train.txt, valid.txt
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--length", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=20.0)
    options = parser.parse_args()

    torch._lazy.ts_backend.init()
    torch.manual_seed(1111)
    vocabulary: dict[str, int] = {}
    train = into_columns(read_words(options.data / "train.txt", vocabulary), options.batch_size)
    valid = into_columns(read_words(options.data / "valid.txt", vocabulary), 10)
    model = LanguageModel(len(vocabulary), options.width, 2, options.width, 2).to("lazy")
    criterion = nn.NLLLoss()

    model.train()
    total = 0.0
    for batch, start in enumerate(range(0, train.size(0) - 1, options.length)):
        tokens, targets = cut(train, start, options.length)
        model.zero_grad()
        loss = criterion(model(tokens).view(-1, len(vocabulary)), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for parameter in model.parameters():
            parameter.data.add_(parameter.grad, alpha=-options.lr)
        total += loss.item()
        print(f"batch {batch}: loss {loss.item():.3f}")

    model.eval()
    valid_loss = 0.0
    with torch.no_grad():
        for start in range(0, valid.size(0) - 1, options.length):
            tokens, targets = cut(valid, start, options.length)
            valid_loss += len(tokens) * criterion(model(tokens).view(-1, len(vocabulary)), targets).item()
    print(f"valid loss {valid_loss / (len(valid) - 1):.3f}")


if __name__ == "__main__":
    main()
