"""lazyviz's cost on a real decode loop on PyTorch/XLA: greedy decoding with a tiny
GPT-2 (bench/_decode_loop.py), two cached executions (the sync's and a `bool(tensor)` in
transformers' mask code) and one read a token, a few milliseconds a token.
Untraced, `lazyviz run --capture light` and `--capture full` (with
source lines, the default), each in its own process, the rounds interleaving the modes
so that machine noise hits them alike; each traced run against the untraced run of the
same round.

    PJRT_DEVICE=CPU .venv-xla/bin/python bench/decode_loop.py [--tokens 200] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

LOOP = Path(__file__).with_name("_decode_loop.py")
MODES = ("untraced", "light", "full")


def token_times(mode: str, warmup: int, tokens: int, folder: Path) -> list[float]:
    loop = [str(LOOP), str(warmup), str(tokens)]
    command = [sys.executable, *loop] if mode == "untraced" else [
        sys.executable, "-m", "lazyviz", "run", "--no-tui", "--force", "--backend", "xla", "--capture", mode,
        "-o", str(folder / f"{mode}.trace"), *loop]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"bench: {mode} failed:\n{result.stderr}")
    line = next(text for text in result.stdout.splitlines() if text.startswith("LAZYVIZ-BENCH "))
    return json.loads(line.split(" ", 1)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    medians: dict[str, list[float]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(options.rounds):
            for mode in MODES[round_ % 3:] + MODES[:round_ % 3]:  # no mode always first
                medians[mode].append(statistics.median(token_times(mode, options.warmup, options.tokens, Path(folder))))
    print(f"greedy decoding, tiny GPT-2 on xla: {options.tokens} tokens x {options.rounds} rounds "
          f"after {options.warmup} warm-up")
    print(f"{'mode':<10}{'median ms a token':>19}{'vs untraced, same round':>26}{'range':>16}")
    for mode in MODES:
        ratios = [ms / base for ms, base in zip(medians[mode], medians["untraced"])]
        print(f"{mode:<10}{statistics.median(medians[mode]):>19.3f}{statistics.median(ratios):>25.3f}x"
              f"{min(ratios):>9.3f}-{max(ratios):.3f}x")


if __name__ == "__main__":
    main()
