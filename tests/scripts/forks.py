"""Forks (os.fork, then multiprocessing with fork) and syncs lazy tensors in the children."""
import multiprocessing
import os
import sys

import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
x = torch.ones(4, device="lazy")
torch._lazy.mark_step()


def child_work(tag: str) -> None:
    y = x + 1
    torch._lazy.mark_step()
    print(tag, y.sum().item(), flush=True)


pid = os.fork()
if pid == 0:
    child_work("forked child")
    os._exit(0)
os.waitpid(pid, 0)
process = multiprocessing.get_context("fork").Process(target=child_work, args=("mp child",))
process.start()
process.join(60)
print("parent", (x * 2).sum().item(), "child exit", process.exitcode)
sys.exit(process.exitcode)
