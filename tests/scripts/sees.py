"""Prints what a script can see of how it was started: argv, its SIGINT handler, and
whether it was interrupted; then runs one lazy graph."""
import signal
import sys

import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
print("argv0", sys.argv[0], "file", __file__.rsplit("/", 1)[-1])
print("sigint", signal.getsignal(signal.SIGINT))
print("value", (torch.ones(2, device="lazy") * 3).sum().item())
