"""Runs a few lazy steps, then says which journal its own trace (argv[1]) is using while
it is written, and which files lie beside it."""
import os
import sqlite3
import sys

import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
x = torch.ones(4, device="lazy")
for _ in range(3):
    x = x * 2
    torch._lazy.mark_step()
trace = os.path.abspath(sys.argv[1])
db = sqlite3.connect(f"file:{trace}?mode=ro", uri=True)
print("journal:", db.execute("PRAGMA journal_mode").fetchone()[0])
db.close()
print("beside:", " ".join(sorted(os.listdir(os.path.dirname(trace)))))
