"""lazyviz's cost on a real decode loop on PyTorch/XLA: greedy decoding with a tiny
GPT-2 (bench/_decode_loop.py), two cached executions (the sync's and a `bool(tensor)` in
transformers' mask code) and one read a token, a few milliseconds a token.

Untraced, `lazyviz run --capture light` and `--capture full` (with source lines, the
default) run as three processes side by side and decode in turns: a few tokens each, one
process at a time, the order rotating every round. This machine's speed drifts by 1.5x
within minutes, far more than the 3% asked of lazyviz; turns a fraction of a second
apart see the same machine. A process also runs a little faster or slower than another
all along (1-3% here, three untraced processes against each other), so the bench runs
several sets of fresh processes and resamples sets, then rounds, for its interval.
Between turns it waits a little (--gap), so that work a process leaves behind
(lazyviz's writer commits every 0.1 s) is not done in another's turn. Beside the wall
clock, the CPU time of the script's thread: lazyviz's work there is in it, and the
machine's other load much less so (the writer's own is in bench/cpu_per_step.py).

    PJRT_DEVICE=CPU .venv-xla/bin/python bench/decode_loop.py [--sets 3] [--rounds 40] [--turn 8]

With --instructions it counts instead, with valgrind's callgrind: the instructions the
script's thread runs a token while the timed tokens decode (collection is on only then),
untraced / light / full, one process each, one after another (lazyviz's writer thread is
not counted: bench/cpu_per_step.py measures it). Instruction counts do not move with the
machine's load (its wall clock swings by 10%), so a 1% difference is seen at once. Needs
valgrind and its headers (apt-get install valgrind) and a C compiler; a run takes minutes.

    PJRT_DEVICE=CPU .venv-xla/bin/python bench/decode_loop.py --instructions [--tokens 20]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _callgrind

LOOP = Path(__file__).with_name("_decode_loop.py")
MODES = ("untraced", "light", "full")


class Decoder:
    """One process of the loop, decoding when told."""

    def __init__(self, mode: str, warmup: int, folder: Path) -> None:
        loop = [str(LOOP), str(warmup), "relay"]
        command = [sys.executable, *loop] if mode == "untraced" else [
            sys.executable, "-m", "lazyviz", "run", "--no-tui", "--force", "--backend", "xla", "--capture", mode,
            "-o", str(folder / f"{mode}.trace"), *loop]
        self.mode = mode
        self.errors = (folder / f"{mode}.stderr").open("w+")
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.errors, text=True)

    def read(self) -> object:
        for line in self.process.stdout:
            if line.startswith("LAZYVIZ-BENCH "):
                return json.loads(line.split(" ", 1)[1])
        self.errors.seek(0)
        sys.exit(f"bench: {self.mode} ended early:\n{self.errors.read()}")

    def decode(self, tokens: int) -> tuple[list[float], float]:
        self.process.stdin.write(f"{tokens}\n")
        self.process.stdin.flush()
        turn = self.read()
        return turn["ms"], turn["cpu_ms"]

    def finish(self) -> None:
        self.process.stdin.write("end\n")
        self.process.stdin.close()
        if self.process.wait() != 0:
            self.errors.seek(0)
            sys.exit(f"bench: {self.mode} failed:\n{self.errors.read()}")


def pooled(mode: str, rounds: list[int], wall: dict[str, list[list[float]]],
           cpu: dict[str, list[float]]) -> tuple[float, float]:
    """The median token's wall milliseconds, and the CPU milliseconds a token, over these rounds."""
    tokens = [ms for round_ in rounds for ms in wall[mode][round_]]
    return statistics.median(tokens), sum(cpu[mode][round_] for round_ in rounds) / len(tokens)


def report(wall: dict[str, list[list[float]]], cpu: dict[str, list[float]], sets: int,
           resamples: int = 2000) -> list[str]:
    """Each mode against untraced over all rounds; the 90% interval from resampling the
    sets, then the rounds in each (a round's turns stay together: they share the drift)."""
    rounds = len(wall["untraced"]) // sets
    everything = list(range(sets * rounds))
    draw = random.Random(0)
    samples = [[chosen * rounds + draw.randrange(rounds) for chosen in draw.choices(range(sets), k=sets)
                for _ in range(rounds)] for _ in range(resamples)]
    low, high = int(resamples * 0.05), int(resamples * 0.95)
    base_ms, base_cpu = pooled("untraced", everything, wall, cpu)
    lines = []
    for mode in MODES:
        ms, cpu_ms = pooled(mode, everything, wall, cpu)
        ratios = [[a / b for a, b in zip(pooled(mode, chosen, wall, cpu), pooled("untraced", chosen, wall, cpu))]
                  for chosen in samples]
        walls, cpus = sorted(r[0] for r in ratios), sorted(r[1] for r in ratios)
        lines.append(f"{mode:<10}{ms:>9.3f} ms{ms / base_ms:>9.3f}x  {walls[low]:.3f}-{walls[high]:.3f}x"
                     f"{cpu_ms:>14.3f} ms{cpu_ms / base_cpu:>9.3f}x  {cpus[low]:.3f}-{cpus[high]:.3f}x")
    return lines


def relay(options: argparse.Namespace, wall: dict[str, list[list[float]]], cpu: dict[str, list[float]]) -> None:
    """One set of processes, decoding in turns; each turn's times added to wall and cpu."""
    with tempfile.TemporaryDirectory() as folder:
        decoders = [Decoder(mode, options.warmup, Path(folder)) for mode in MODES]
        for decoder in decoders:
            assert decoder.read() == "ready"
        for round_ in range(options.rounds):
            for decoder in decoders[round_ % 3:] + decoders[:round_ % 3]:  # no mode always first
                time.sleep(options.gap)
                times, cpu_ms = decoder.decode(options.turn)
                wall[decoder.mode].append(times)
                cpu[decoder.mode].append(cpu_ms)
        for decoder in decoders:
            decoder.finish()


def instructions(options: argparse.Namespace) -> None:
    """Each mode once under callgrind: the script's thread's instructions a token."""
    with _callgrind.files_folder(options.keep) as folder:
        library = _callgrind.build(folder)
        loop = [str(LOOP), str(options.warmup), str(options.tokens)]
        commands = {"untraced": [sys.executable, *loop]}
        for mode in MODES[1:]:
            commands[mode] = [sys.executable, "-m", "lazyviz", "run", "--no-tui", "--force", "--backend", "xla",
                              "--capture", mode, "-o", str(folder / f"{mode}.trace"), *loop]
        counts = {mode: _callgrind.count(command, library, folder / mode, 'LAZYVIZ-BENCH "counted"')[0]
                  for mode, command in commands.items() if mode in options.modes}
    print(f"greedy decoding, tiny GPT-2 on xla, under callgrind: instructions a token over {options.tokens} tokens "
          f"after {options.warmup} warm-up")
    print(f"{'':<10}{'script thread':>15}{'vs untraced':>13}")
    for mode, thread in counts.items():
        versus = f"{(thread / counts['untraced'] - 1) * 100:>+12.2f}%" if "untraced" in counts else ""
        print(f"{mode:<10}{thread / options.tokens:>15,.0f}{versus}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", type=int, default=3, help="sets of three fresh processes, one after another")
    parser.add_argument("--rounds", type=int, default=40, help="rounds of turns a set")
    parser.add_argument("--turn", type=int, default=8, help="tokens a process decodes in its turn")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--gap", type=float, default=0.15, help="seconds between turns")
    parser.add_argument("--instructions", action="store_true", help="count instructions with callgrind instead")
    parser.add_argument("--keep", metavar="DIR", help=_callgrind.KEEP_HELP)
    parser.add_argument("--modes", type=lambda text: text.split(","), default=list(MODES),
                        help="with --instructions: these of untraced,light,full only (each takes minutes)")
    parser.add_argument("--tokens", type=int, default=20, help="tokens counted with --instructions")
    options = parser.parse_args()
    if unknown := set(options.modes) - set(MODES):
        parser.error(f"--modes: no mode {', '.join(sorted(unknown))} (untraced, light, full)")
    if options.instructions:
        instructions(options)
        return
    wall: dict[str, list[list[float]]] = {mode: [] for mode in MODES}  # each round's token times
    cpu: dict[str, list[float]] = {mode: [] for mode in MODES}  # each round's CPU milliseconds
    for _ in range(options.sets):
        relay(options, wall, cpu)
    print(f"greedy decoding, tiny GPT-2 on xla: {options.sets} sets of processes, {options.rounds} rounds of "
          f"{options.turn} tokens a process each, after {options.warmup} warm-up")
    print(f"{'':<10}{'wall a token':>12}{'vs untraced':>12}  {'90% interval':<13}"
          f"{'script thread CPU':>17}{'vs untraced':>12}  90% interval")
    print("\n".join(report(wall, cpu, options.sets)))


if __name__ == "__main__":
    main()
