"""An MNIST classifier as people port one to a lazy device, written here in the shape of
pytorch/examples' mnist (two convolutions, dropout, two linear layers, Adadelta with a
StepLR schedule, a training loop that logs every N batches, an evaluation loop with
argmax), on random data of MNIST's shapes. --no-mark-step is the first port, without
torch._lazy.mark_step() after the optimizer step."""
from __future__ import annotations

import argparse

import torch
import torch._lazy
import torch._lazy.ts_backend
import torch.nn.functional as F
from torch import nn


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
                                      nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten())
        self.head = nn.Sequential(nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.head(self.features(images)), dim=1)


def random_digits(count: int, seed: int) -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    return torch.utils.data.TensorDataset(torch.randn(count, 1, 28, 28, generator=generator),
                                          torch.randint(0, 10, (count,), generator=generator))


def train_epoch(model, loader, optimizer, options, epoch: int) -> None:
    model.train()
    for batch, (images, labels) in enumerate(loader):
        images, labels = images.to("lazy"), labels.to("lazy")
        optimizer.zero_grad()
        loss = F.nll_loss(model(images), labels)
        loss.backward()
        optimizer.step()
        if not options.no_mark_step:
            torch._lazy.mark_step()
        if batch % options.log_interval == 0:
            print(f"epoch {epoch} batch {batch}: loss {loss.item():.4f}")


def evaluate(model, loader) -> None:
    model.eval()
    total, correct = 0.0, 0
    with torch.no_grad():
        for images, labels in loader:
            images, labels = images.to("lazy"), labels.to("lazy")
            scores = model(images)
            total += F.nll_loss(scores, labels, reduction="sum").item()
            correct += scores.argmax(dim=1).eq(labels).sum().item()
    print(f"test: loss {total / len(loader.dataset):.4f}, {correct}/{len(loader.dataset)} right")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--train-size", type=int, default=200)  # 6 batches of 32 and a last one of 8
    parser.add_argument("--test-size", type=int, default=100)
    parser.add_argument("--no-mark-step", action="store_true")
    options = parser.parse_args()

    torch._lazy.ts_backend.init()
    torch.manual_seed(1)
    train = torch.utils.data.DataLoader(random_digits(options.train_size, 1), batch_size=options.batch_size)
    test = torch.utils.data.DataLoader(random_digits(options.test_size, 2), batch_size=1000)
    model = Classifier().to("lazy")
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    for epoch in range(1, options.epochs + 1):
        train_epoch(model, train, optimizer, options, epoch)
        evaluate(model, test)
        schedule.step()


if __name__ == "__main__":
    main()
