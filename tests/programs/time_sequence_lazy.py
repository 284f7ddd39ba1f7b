"""pytorch/examples' time_sequence_prediction ported to the lazy device as a user first
tries it: two nn.LSTMCell over a sine wave, the sequence walked with input.split(1, dim=1),
LBFGS. On torch 2.13's TorchScript backend the cell's kernel takes a view (as_strided) that
has no lowering and cannot fall back. As written, the split's pieces come back on the CPU
and the first cell raises; --narrow walks the sequence with narrow (lazyviz's advice for
that), and the cell's view raises; --cells also writes each cell from ops that lower
(lazyviz's advice for that), and the model trains.

    python time_sequence_lazy.py [--steps 1] [--narrow] [--cells]
"""
import argparse
import math

import torch
import torch._lazy
import torch._lazy.ts_backend
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1)
parser.add_argument("--narrow", action="store_true")
parser.add_argument("--cells", action="store_true")
args = parser.parse_args()
args.narrow = args.narrow or args.cells
torch._lazy.ts_backend.init()
device = torch.device("lazy")


def lowered_cell(cell: nn.LSTMCell, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]):
    h, c = state
    gates = x @ cell.weight_ih.t() + cell.bias_ih + h @ cell.weight_hh.t() + cell.bias_hh
    i, f, g, o = (gates.narrow(1, k * cell.hidden_size, cell.hidden_size) for k in range(4))
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    h = torch.sigmoid(o) * torch.tanh(c)
    return h, c


class Sequence(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, 16)
        self.lstm2 = nn.LSTMCell(16, 16)
        self.linear = nn.Linear(16, 1)

    def cell(self, module, x, state):
        return lowered_cell(module, x, state) if args.cells else module(x, state)

    def forward(self, input):
        outputs = []
        h_t = torch.zeros(input.size(0), 16, dtype=torch.double, device=device)
        c_t = torch.zeros(input.size(0), 16, dtype=torch.double, device=device)
        h_t2 = torch.zeros(input.size(0), 16, dtype=torch.double, device=device)
        c_t2 = torch.zeros(input.size(0), 16, dtype=torch.double, device=device)
        pieces = [input.narrow(1, t, 1) for t in range(input.size(1))] if args.narrow else input.split(1, dim=1)
        for input_t in pieces:
            h_t, c_t = self.cell(self.lstm1, input_t, (h_t, c_t))
            h_t2, c_t2 = self.cell(self.lstm2, h_t, (h_t2, c_t2))
            outputs += [self.linear(h_t2)]
        return torch.cat(outputs, dim=1)


torch.manual_seed(0)
waves = torch.tensor([[math.sin((t + shift) / 5.0) for t in range(9)] for shift in range(0, 40, 5)],
                     dtype=torch.double)
input, target = waves[:, :-1].to(device), waves[:, 1:].to(device)
seq = Sequence().double().to(device)
optimizer = torch.optim.LBFGS(seq.parameters(), lr=0.8, max_iter=2)
for step in range(args.steps):
    def closure():
        optimizer.zero_grad()
        loss = ((seq(input) - target) ** 2).mean()
        loss.backward()
        return loss
    loss = optimizer.step(closure)
    torch._lazy.mark_step()
    print("step", step, "loss", round(loss.item(), 5))
