"""Two threads build lazy graphs at once, each a new graph at every round (a longer
chain), so most nodes are built once their lines are known."""
import threading

import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
ROUNDS = 40


def adds() -> None:
    for length in range(1, ROUNDS + 1):
        x = torch.ones(8, device="lazy")
        for _ in range(length):
            x = x + 1
        x.cpu()


def muls() -> None:
    for length in range(1, ROUNDS + 1):
        y = torch.ones(8, device="lazy")
        for _ in range(length):
            y = y * 1.5
        y.cpu()


threads = [threading.Thread(target=adds), threading.Thread(target=muls)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("done")
