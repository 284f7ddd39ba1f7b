"""lazyviz's cost per step on the traced thread's own CPU clock, which a busy shared
machine disturbs far less than wall time: a tiny step (`x = x + 1; mark_step()`, every
execution a cache hit from the same line) and a fallback step (`torch.lerp`, which this
backend runs on the CPU: each step syncs inside the op as well as at mark_step).

    python bench/cpu_per_step.py [--steps 3000] [--rounds 1]
    PJRT_DEVICE=CPU .venv-xla/bin/python bench/cpu_per_step.py --backend xla [--after 1100] [--rounds 5]

On PyTorch/XLA the fallback step is replaced by a copies step: the tiny step plus a
small batch copied to the device and the result read back, both timed after --after
steps, enough that XLA's metrics hold all the samples they keep (reading a metric costs
more as it fills; --after 100000 shows whether the cost grows with the run). A column
"reports" runs untraced with only XLA's analyses and HLO dump on, as lazyviz turns them
on: XLA's own share of lazyviz's cost. The
device runs each graph on threads of its own: the traced thread's clock
holds what lazyviz and the XLA reports it turns on cost the script's own thread, which
is where they run (XLA writes its analyses at the sync).

Each mode runs in its own process (`lazyviz.trace` around the loop); the figure is the
least CPU time per step over 5 chunks of the loop, so a chunk that a neighbour slowed
does not count. The chunks start after 0.3 s of the loop: the writer's first window
(0.1 s) sets off the process's first full garbage collection since torch's import, 80-90
ms once, which put the writer at 30-38 us a step over a TorchScript loop of 3,000 steps.
The trace writer's thread runs beside the script and competes for the same cores: its
own CPU per step for the whole timed loop is printed beside it ("writer": from a window
after the warm-up to one after the loop, so every row of the loop's is in it). What this
leaves out: time spent waiting for the GIL; bench/overhead.py measures wall time.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

# The timed part, shared by both children: the least CPU time per step over 5 chunks.
LEAST = r"""
def writer_cpu():
    # The trace writer's thread: its CPU time, which competes with the script's for the cores.
    import threading
    writer = next((t for t in threading.enumerate() if t.name == "lazyviz-trace-writer"), None)
    return time.clock_gettime(time.pthread_getcpuclockid(writer.ident)) if writer else 0.0

def least_cpu_us():
    # Past the writer's first windows and the full collection the first sets off (see above).
    warm = time.perf_counter()
    while time.perf_counter() - warm < 0.3:
        loop(50)
    chunk = steps // 5
    best = []
    time.sleep(0.15)  # the writer takes its rows once a window (0.1 s): the warm-up's first
    writer_started = writer_cpu()
    for _ in range(5):
        started = time.thread_time()
        loop(chunk)
        best.append((time.thread_time() - started) / chunk * 1e6)
    time.sleep(0.15)  # then all of the timed loop's
    # Printed first: "writer <us per step>", then the traced thread's figure.
    print("writer", (writer_cpu() - writer_started) / (chunk * 5) * 1e6)
    return min(best)
"""

CHILD = r"""
import os, sys, time
import torch, torch._lazy, torch._lazy.ts_backend
torch._lazy.ts_backend.init()
kind, mode, steps, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
a = torch.zeros(64).to("lazy")
b = torch.ones(64).to("lazy")

def loop(n):
    global a
    for _ in range(n):
        if kind == "tiny":
            a = a + 1
        else:
            a = torch.lerp(a + 1, b, 0.1)
        torch._lazy.mark_step()
""" + LEAST + r"""
if mode == "untraced":
    print(least_cpu_us())
else:
    import lazyviz
    with lazyviz.trace(path, capture=mode):
        print(least_cpu_us())
"""

# XLA reads its debug settings at import: lazyviz starts before torch_xla is imported.
CHILD_XLA = r"""
import sys, time
kind, mode, steps, path, after = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
if mode == "reports":  # untraced, with the reports lazyviz turns on: XLA's own share of the cost
    import os
    os.environ.update(PT_XLA_DEBUG_LEVEL="2", PT_XLA_DEBUG_FILE=path + ".analysis",
                      XLA_FLAGS=f"--xla_dump_to={path}.hlo --xla_dump_hlo_as_text --xla_dump_hlo_pass_re=^$")
elif mode != "untraced":
    import lazyviz
    recording = lazyviz.trace(path, capture=mode, backend="xla")
    recording.start()
import torch, torch_xla
device = torch_xla.device()
a = torch.zeros(64, device=device)

def loop(n):
    global a
    for _ in range(n):
        if kind == "tiny":
            a = a + 1
        else:  # a batch to the device and a value back, as a training step has
            a = a + torch.ones(64).to(device)
        torch_xla.sync()
        if kind == "copies":
            a.cpu()
""" + LEAST + r"""
loop(after)  # XLA keeps 1,024 samples a metric and its analyses grow: a long run's steady state
print(least_cpu_us())
if mode in ("light", "full"):
    recording.stop()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--backend", choices=("ts", "xla"), default="ts")
    parser.add_argument("--after", type=int, default=1100,
                        help="XLA: steps run before the timed ones (the cost must not grow with the run)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every mode this many times, interleaved, and keep each mode's least "
                             "(a shared machine's neighbours only ever add)")
    options = parser.parse_args()
    # On XLA, "xla reports": untraced with only XLA's analyses and HLO dump turned on, as
    # lazyviz turns them on: what XLA itself costs of lazyviz's figure.
    modes = ["untraced", "reports", "light", "full"] if options.backend == "xla" else ["untraced", "light", "full"]
    child, kinds = (CHILD_XLA, ("tiny", "copies")) if options.backend == "xla" else (CHILD, ("tiny", "fallback"))
    print(f"{'step':<10}" + "".join(f"{mode:>32}" for mode in modes))
    with tempfile.TemporaryDirectory() as folder:
        for kind in kinds:
            least: dict[str, tuple[float, float]] = {}  # mode -> (us, writer) of its least round
            for round_ in range(options.rounds):
                for mode in modes:
                    trace = Path(folder) / f"{kind}-{mode}-{round_}.trace"
                    result = subprocess.run([sys.executable, "-c", child, kind, mode, str(options.steps), str(trace),
                                             str(options.after)],
                                            capture_output=True, text=True, check=True)
                    lines = result.stdout.strip().splitlines()
                    measured = (float(lines[-1]),
                                next(float(line.split()[1]) for line in lines if line.startswith("writer ")))
                    least[mode] = min(least.get(mode, measured), measured)
            cells = []
            baseline = None
            for mode in modes:
                us, writer = least[mode]
                baseline = us if baseline is None else baseline
                cells.append(f"{us:8.1f} us" + ("" if mode == "untraced" else f" ({us - baseline:+.1f})"
                                                 if mode == "reports" else f" ({us - baseline:+.1f}, writer {writer:.1f})"))
            print(f"{kind:<10}" + "".join(f"{cell:>32}" for cell in cells))


if __name__ == "__main__":
    main()
