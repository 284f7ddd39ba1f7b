"""How long each report takes on a real trace, and how big it is: the text summary, the
JSON report and the HTML page, on the transformer+AdamW sample (125 executions, 72
graphs at 3 steps). Each report runs as a user runs it, a fresh `lazyviz report`
process; wall time and peak memory (RSS) are that process's.

    python bench/reports.py [--steps 3] [--trace EXISTING.trace]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(command: list[str]) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of one child process, from its own rusage."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"{' '.join(command)} exited {child.returncode}")
    return elapsed, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--trace", type=Path, help="an existing trace instead of running the sample")
    options = parser.parse_args()
    lazyviz = [sys.executable, "-m", "lazyviz"]
    with tempfile.TemporaryDirectory() as folder:
        trace = options.trace
        if trace is None:
            trace = Path(folder) / "t.trace"
            subprocess.run([*lazyviz, "run", "--no-tui", "-o", str(trace), str(ROOT / "samples/transformer_adamw.py"),
                            "--steps", str(options.steps)], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        print(f"trace: {trace} ({trace.stat().st_size / 1e6:.1f} MB)")
        print(f"{'report':<8} {'seconds':>8} {'peak MB':>8} {'output':>10}")
        for fmt in ("text", "json", "html"):
            output = Path(folder) / f"report.{fmt}"
            seconds, peak = timed([*lazyviz, "report", "--format", fmt, "-o", str(output), str(trace)])
            print(f"{fmt:<8} {seconds:8.2f} {peak:8.0f} {output.stat().st_size / 1e3:8.0f} KB")


if __name__ == "__main__":
    main()
