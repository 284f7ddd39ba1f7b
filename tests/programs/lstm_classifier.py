"""pytorch/examples' mnist_rnn in miniature, ported to the lazy device by its device line:
an nn.LSTM over the image's rows (batch_first), batch norm, two linear layers, Adadelta,
the loss printed every few batches. On TS nn.LSTM's forward unbinds the sequence, which
falls back and hands back pieces on the host: the next op raises."""
import argparse

import torch
import torch._lazy
import torch._lazy.ts_backend
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(input_size=28, hidden_size=32, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(32)
        self.fc1 = nn.Linear(32, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, input):
        input = input.reshape(-1, 28, 28)
        output, hidden = self.rnn(input)
        output = output[:, -1, :]
        output = self.batchnorm(output)
        output = F.relu(self.fc1(output))
        return F.log_softmax(self.fc2(output), dim=1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--log-interval", type=int, default=2)
    args = parser.parse_args()
    torch._lazy.ts_backend.init()
    torch.manual_seed(1)
    device = torch.device("lazy")
    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=1.0)
    images, labels = torch.rand(args.batches, 8, 1, 28, 28), torch.randint(0, 10, (args.batches, 8))
    model.train()
    for batch_idx in range(args.batches):
        data, target = images[batch_idx].to(device), labels[batch_idx].to(device)
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print(f"Train batch {batch_idx}\tLoss: {loss.item():.6f}")


if __name__ == "__main__":
    main()
