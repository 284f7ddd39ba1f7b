"""Two threads read lazy values at once, one with .cpu(), one with .item()."""
import threading

import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()


def reads_cpu() -> None:
    x = torch.ones(8, device="lazy")
    for _ in range(100):
        x = x + 1
        x.cpu()


def reads_item() -> None:
    y = torch.ones(8, device="lazy")
    for _ in range(100):
        y = y * 1.0001
        y.sum().item()


threads = [threading.Thread(target=reads_cpu), threading.Thread(target=reads_item)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("done")
