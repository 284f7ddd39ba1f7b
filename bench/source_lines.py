"""What per-node source lines cost: building one transformer step's graph (forward and
backward, 2 encoder layers) with `source_lines` on and off, alternating traces in one
process so machine noise hits both alike; the best of 5 builds per trace, 8 traces each.

    python bench/source_lines.py

Graph building is where the cost lands (each new IR node walks to the user's frame);
execution is unchanged, so a whole step pays a smaller share than printed here.
"""
from __future__ import annotations

import sqlite3
import tempfile
import time
from pathlib import Path

import torch
import torch._lazy
import torch._lazy.ts_backend

import lazyviz


def main() -> None:
    torch._lazy.ts_backend.init()
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True), 2)
    layer = layer.to("lazy")
    x = torch.randn(8, 16, 64).to("lazy")

    def build() -> float:
        started = time.perf_counter()
        layer(x).pow(2).mean().backward()
        took = time.perf_counter() - started
        torch._lazy.mark_step()
        return took

    for _ in range(3):
        build()
    best: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(8):
            for lines in (True, False) if round_ % 2 else (False, True):
                with lazyviz.trace(Path(folder) / f"lines-{lines}-{round_}.trace", source_lines=lines):
                    best[lines].append(min(build() for _ in range(5)))
        with sqlite3.connect(Path(folder) / "lines-True-0.trace") as db:
            nodes = db.execute("SELECT MAX(nodes) FROM kinds").fetchone()[0]
    off, on = min(best[False]) * 1000, min(best[True]) * 1000
    print(f"building one step's graph ({nodes} nodes): source lines off {off:.2f} ms, on {on:.2f} ms "
          f"({on / off:.3f}x, {(on - off) / nodes * 1000:.2f} us per node)")


if __name__ == "__main__":
    main()
