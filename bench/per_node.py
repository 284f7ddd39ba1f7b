"""What an IR node costs to build, a node: a graph of about 10,000 nodes built in a loop
on torch's TorchScript lazy backend, either from the user's own line (`y = y * 1.0001 +
0.5`: the user's frame is the innermost) or through modules (`--modules`: a stack of
Linear and ReLU called from the user's line, each node some frames of torch's below it):

- untraced: torch alone;
- torch's getter: untraced, with LTC's IR debug on: every node asks torch's own frame
  getter for the whole Python stack and keeps it (the anchor);
- light: `lazyviz.trace(capture="light")`: no source lines;
- full: `lazyviz.trace(capture="full")`: every node asks lazyviz's getter for the user's line.

Only the building is measured: the graph is cut (mark_step) outside it. By default the
modes take turns in one process, each the best of its builds, so the machine's drift hits
them alike (ns a node). With --instructions each mode runs in a process of its own under
valgrind's callgrind, collection on only while the graph is built (instructions a node,
which do not move with the machine's load).

    python bench/per_node.py [--nodes 10000] [--rounds 5]
    python bench/per_node.py --instructions
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import _callgrind

MODES = ("untraced", "torch's getter", "light", "full")


def build_and_cut(mode: str, iterations: int, folder: Path, number: int, modules: bool = False) -> tuple[int, float]:
    """One graph built in this mode; (its nodes, seconds the building took)."""
    import torch
    import torch._lazy

    if modules:
        torch.manual_seed(0)
        layers = [layer for _ in range(4) for layer in (torch.nn.Linear(16, 16), torch.nn.ReLU())]
        stack = torch.nn.Sequential(*layers).to("lazy")
        iterations //= 4  # a pass builds some 20 nodes
    from lazyviz.backends.ts import load_hook

    hook = load_hook()
    context: AbstractContextManager = nullcontext()
    if mode in ("light", "full"):
        import lazyviz

        context = lazyviz.trace(folder / f"{number}.trace", capture=mode, backend="ts", force=True)
    collect = _callgrind.switch()
    with context:
        y = torch.ones(16, device="lazy")
        torch._lazy.mark_step()
        if mode == "torch's getter":
            hook.torch_ir_debug(True)  # lazyviz's own modes leave the flag as their trace set it
        if collect is not None:
            collect(1)
        started = time.perf_counter()
        if modules:
            for _ in range(iterations):
                y = stack(y)  # the user's line: the nodes are built in torch's modules below it
        else:
            for _ in range(iterations):
                y = y * 1.0001 + 0.5  # the user's line every node names
        took = time.perf_counter() - started
        if collect is not None:
            collect(0)
        if mode == "torch's getter":
            hook.torch_ir_debug(False)
        nodes = len(torch._C._lazy._get_tensors_text([y]).splitlines()) - 2  # "IR {" ... "}"
        torch._lazy.mark_step()
    return nodes, took


def one(mode: str, iterations: int, modules: bool) -> None:
    """A process of --instructions: one build, counted."""
    import torch._lazy.ts_backend

    torch._lazy.ts_backend.init()
    with tempfile.TemporaryDirectory() as name:
        build_and_cut(mode, 10, Path(name), 0, modules)  # the code objects and lines seen once
        nodes, _ = build_and_cut(mode, iterations, Path(name), 1, modules)
    print(f"LAZYVIZ-BENCH nodes {nodes}", flush=True)


def timed(options: argparse.Namespace) -> None:
    import torch._lazy.ts_backend

    torch._lazy.ts_backend.init()
    iterations = options.nodes // 4
    best = dict.fromkeys(MODES, float("inf"))
    nodes = 0
    with tempfile.TemporaryDirectory() as name:
        for round_ in range(options.rounds):
            for number, mode in enumerate(MODES[round_ % len(MODES):] + MODES[:round_ % len(MODES)]):
                nodes, took = build_and_cut(mode, iterations, Path(name), round_ * len(MODES) + number,
                                            options.modules)
                best[mode] = min(best[mode], took)
    through = " through modules" if options.modules else ""
    print(f"building a graph of {nodes:,} nodes{through} on TorchScript: the best of {options.rounds} builds a mode")
    print(f"{'':<16}{'ns a node':>10}{'vs untraced':>13}")
    for mode in MODES:
        print(f"{mode:<16}{best[mode] / nodes * 1e9:>10.0f}{best[mode] / best['untraced']:>12.2f}x")


def counted(options: argparse.Namespace) -> None:
    with _callgrind.files_folder(options.keep) as folder:
        library = _callgrind.build(folder)
        command = [sys.executable, __file__, "--nodes", str(options.nodes), *(["--modules"] if options.modules else [])]
        counted = {mode: _callgrind.count([*command, "--one", mode], library, folder / str(number),
                                          "LAZYVIZ-BENCH nodes") for number, mode in enumerate(MODES)}
    counts = {mode: instructions for mode, (instructions, _) in counted.items()}
    nodes = int(counted["untraced"][1].split("LAZYVIZ-BENCH nodes")[1].split()[0])
    through = " through modules" if options.modules else ""
    print(f"building a graph of about {nodes:,} nodes{through} on TorchScript, under callgrind: instructions a node")
    print(f"{'':<16}{'instructions':>13}{'vs untraced':>13}")
    for mode, thread in counts.items():
        print(f"{mode:<16}{thread / nodes:>13,.0f}{(thread / counts['untraced'] - 1) * 100:>+12.2f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--instructions", action="store_true", help="count instructions with callgrind instead")
    parser.add_argument("--keep", metavar="DIR", help=_callgrind.KEEP_HELP)
    parser.add_argument("--modules", action="store_true", help="build the nodes through a stack of modules")
    parser.add_argument("--one", choices=MODES, help=argparse.SUPPRESS)  # a process of --instructions
    options = parser.parse_args()
    if options.one:
        one(options.one, options.nodes // 4, options.modules)
    elif options.instructions:
        counted(options)
    else:
        timed(options)


if __name__ == "__main__":
    main()
