"""SVG export of a ~5,000-node graph: lazyviz's collapsed drawing against Graphviz's
`dot` on the raw graph, in one run.

    python bench/svg_export.py [--iterations 1000] [--raw-timeout 300]

The graph is real: samples/missing_mark_step.py traced with enough iterations that the
missing mark_step() piles up about 5,000 IR nodes.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, timeout: float | None = None) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "lazyviz", *args], capture_output=True, text=True,
                            timeout=timeout)
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--raw-timeout", type=float, default=300)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        trace = str(Path(folder) / "big.trace")
        _, result = run_cli("run", "--no-tui", "-o", trace, str(ROOT / "samples" / "missing_mark_step.py"),
                            "--steps", str(options.iterations))
        if result.returncode != 0:
            sys.exit(result.stderr)
        sys.path.insert(0, str(ROOT))
        import lazyviz

        with lazyviz.open(trace) as opened:
            nodes = opened.execution(0).nodes
        print(f"graph: {nodes} IR nodes (missing_mark_step.py, {options.iterations} iterations)")
        print(f"{'export':<34}{'seconds':>10}")
        for name, extra in (("lazyviz svg (collapsed)", []),
                            ("lazyviz svg --max-nodes 1000", ["--max-nodes", "1000"]),
                            ("dot on the raw graph", ["--max-nodes", str(nodes + 1)])):
            svg = str(Path(folder) / "out.svg")
            try:
                seconds, result = run_cli("export", trace, "--execution", "0", "-o", svg, "--force", *extra,
                                          timeout=options.raw_timeout)
                if result.returncode == 0:
                    shown = f"{seconds:10.2f}"
                elif "took over" in result.stderr:  # lazyviz stops dot after 120 s
                    shown = f"{'> ' + str(round(seconds)):>10} (dot stopped, unfinished)"
                else:
                    shown = f"  failed: {result.stderr.strip()}"
            except subprocess.TimeoutExpired:
                shown = f"  > {options.raw_timeout:.0f} (stopped)"
            print(f"{name:<34}{shown}")


if __name__ == "__main__":
    main()
