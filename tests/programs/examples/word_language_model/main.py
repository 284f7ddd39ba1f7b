"""pytorch/examples' word_language_model in miniature, as people first port it to a lazy
device: the corpus read from `../data/wikitext-2` (the repo's layout: data beside the
example folders), a Transformer trained with a hand-written SGD update and no
mark_step(), the log line with `ms/batch` (a time: it differs between any two runs), an
evaluation, and the whole model saved with `torch.save(model, f)`."""
import argparse
import math
import os
import time

import torch
import torch._lazy
import torch._lazy.ts_backend
import torch.nn as nn

parser = argparse.ArgumentParser(description="PyTorch Wikitext-2 Transformer Language Model")
parser.add_argument("--data", type=str, default="../data/wikitext-2", help="location of the data corpus")
parser.add_argument("--emsize", type=int, default=32, help="size of word embeddings")
parser.add_argument("--lr", type=float, default=20, help="initial learning rate")
parser.add_argument("--clip", type=float, default=0.25, help="gradient clipping")
parser.add_argument("--batch_size", type=int, default=4, metavar="N", help="batch size")
parser.add_argument("--bptt", type=int, default=12, help="sequence length")
parser.add_argument("--dropout", type=float, default=0.2, help="dropout applied to layers (0 = no dropout)")
parser.add_argument("--seed", type=int, default=1111, help="random seed")
parser.add_argument("--log-interval", type=int, default=2, metavar="N", help="report interval")
parser.add_argument("--save", type=str, default="model.pt", help="path to save the final model")


class Corpus:
    def __init__(self, path):
        self.words = {}
        self.train = self.tokenize(os.path.join(path, "train.txt"))
        self.valid = self.tokenize(os.path.join(path, "valid.txt"))

    def tokenize(self, path):
        ids = []
        with open(path, encoding="utf8") as f:
            for line in f:
                for word in line.split() + ["<eos>"]:
                    ids.append(self.words.setdefault(word, len(self.words)))
        return torch.tensor(ids, dtype=torch.int64)


def batchify(data, bsz, device):
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous().to(device)


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)


class TransformerModel(nn.Module):
    def __init__(self, ntoken, ninp, dropout):
        super().__init__()
        self.ninp = ninp
        self.encoder = nn.Embedding(ntoken, ninp)
        layer = nn.TransformerEncoderLayer(ninp, 2, ninp, dropout)
        self.transformer_encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.decoder = nn.Linear(ninp, ntoken)

    def forward(self, src):
        mask = torch.triu(torch.full((len(src), len(src)), float("-inf"), device=src.device), diagonal=1)
        output = self.transformer_encoder(self.encoder(src) * math.sqrt(self.ninp), mask)
        return torch.log_softmax(self.decoder(output), dim=-1)


def evaluate(model, criterion, data_source, ntokens, bptt):
    model.eval()
    total_loss = 0.0
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, bptt):
            data, targets = get_batch(data_source, i, bptt)
            total_loss += len(data) * criterion(model(data).view(-1, ntokens), targets).item()
    return total_loss / (len(data_source) - 1)


def main():
    args = parser.parse_args()
    torch._lazy.ts_backend.init()
    torch.manual_seed(args.seed)
    device = torch.device("lazy")
    corpus = Corpus(args.data)
    train_data = batchify(corpus.train, args.batch_size, device)
    val_data = batchify(corpus.valid, 10, device)
    ntokens = len(corpus.words)
    model = TransformerModel(ntokens, args.emsize, args.dropout).to(device)
    criterion = nn.NLLLoss()

    model.train()
    total_loss = 0.0
    start_time = time.time()
    batches = len(range(0, train_data.size(0) - 1, args.bptt))
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        data, targets = get_batch(train_data, i, args.bptt)
        model.zero_grad()
        loss = criterion(model(data).view(-1, ntokens), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-args.lr)
        total_loss += loss.item()
        if batch % args.log_interval == 0 and batch > 0:
            cur_loss = total_loss / args.log_interval
            elapsed = time.time() - start_time
            print("| epoch {:3d} | {:5d}/{:5d} batches | lr {:02.2f} | ms/batch {:5.2f} | loss {:5.2f} | ppl {:8.2f}".format(
                1, batch, batches, args.lr, elapsed * 1000 / args.log_interval, cur_loss, math.exp(cur_loss)))
            total_loss = 0.0
            start_time = time.time()

    val_loss = evaluate(model, criterion, val_data, ntokens, args.bptt)
    print("| end of epoch   1 | valid loss {:5.4f} |".format(val_loss))
    with open(args.save, "wb") as f:
        torch.save(model, f)


if __name__ == "__main__":
    main()
