"""A variational autoencoder as people port one to a lazy device, written here in the
shape of pytorch/examples' vae (784-400-20 encoder, reparameterisation, 20-400-784
decoder, binary cross-entropy plus the KL term written as `-0.5 * torch.sum(...)`,
Adam, `.item()` of the loss every batch), on random data of MNIST's shapes. On torch
2.13's TorchScript backend Adam's lerp_ falls back and the pending graph then fails
to run (a Python number, a Double on the device, meets Float in a matmul)."""
from __future__ import annotations

import argparse

import torch
import torch._lazy
import torch._lazy.ts_backend
import torch.nn.functional as F
from torch import nn


class Autoencoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(784, 400)
        self.mean, self.log_variance = nn.Linear(400, 20), nn.Linear(400, 20)
        self.expand, self.output = nn.Linear(20, 400), nn.Linear(400, 784)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden = F.relu(self.hidden(images.view(-1, 784)))
        mean, log_variance = self.mean(hidden), self.log_variance(hidden)
        code = mean + torch.randn_like(mean) * torch.exp(0.5 * log_variance)
        return torch.sigmoid(self.output(F.relu(self.expand(code)))), mean, log_variance


def loss_of(rebuilt: torch.Tensor, images: torch.Tensor, mean: torch.Tensor, log_variance: torch.Tensor) -> torch.Tensor:
    reconstruction = F.binary_cross_entropy(rebuilt, images.view(-1, 784), reduction="sum")
    divergence = -0.5 * torch.sum(1 + log_variance - mean.pow(2) - log_variance.exp())
    return reconstruction + divergence


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--train-size", type=int, default=200)
    options = parser.parse_args()

    torch._lazy.ts_backend.init()
    torch.manual_seed(1)
    generator = torch.Generator().manual_seed(1)
    images = torch.rand(options.train_size, 1, 28, 28, generator=generator)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images), batch_size=options.batch_size)
    model = Autoencoder().to("lazy")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(1, options.epochs + 1):
        total = 0.0
        for (batch,) in loader:
            batch = batch.to("lazy")
            optimizer.zero_grad()
            rebuilt, mean, log_variance = model(batch)
            loss = loss_of(rebuilt, batch, mean, log_variance)
            loss.backward()
            total += loss.item()
            optimizer.step()
        print(f"epoch {epoch}: loss {total / len(loader.dataset):.4f}")


if __name__ == "__main__":
    main()
