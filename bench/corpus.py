"""The corpus of real programs (tests/programs) from finding to fix, for README's table:
each program traced as written, its findings and how many have an edit, then
`lazyviz fix --try --until-clean` on a copy: the rounds kept and the whole way from the
first run to the last (executions per step, recompiles after warm-up, sync time, output).

    python bench/corpus.py [NAME ...]                                  # TorchScript programs
    PJRT_DEVICE=CPU .venv-xla/bin/python bench/corpus.py --backend xla  # PyTorch/XLA ones

Each program runs in a folder of its own under a temporary directory (the word LM with a
small corpus written there), so nothing in the repository changes.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "tests" / "programs"
# name -> the program's arguments, as the tests run it (small sizes, a few steps).
TS = {
    "mnist_lazy.py": ["--epochs", "1", "--batch-size", "32"],
    "vae_lazy.py": ["--epochs", "1", "--batch-size", "32"],
    "word_lm.py": ["--data", "."],
    "time_sequence_lazy.py": ["--narrow"],
    "gpt2_tiny.py": ["--narrow"],
    "bert_classifier.py": ["--steps", "12"],
    "euler_sampler.py": [],
    "best_loss.py": [],
    "sliding_window.py": [],
    "clean_optimizers.py": ["adam"],
}
XLA = {
    "xla_euler_sampler.py": [],
    "xla_best_loss.py": [],
    "xla_slice_bound.py": [],
    "xla_adamw.py": [],
    "xla_median_loss.py": [],
    "xla_no_sync.py": [],
    "xla_fallbacks.py": [],
}


def lazyviz(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lazyviz", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=1800)


def cell(text: str, label: str) -> tuple[str, str]:
    """The before and after values of one row of --try's table (units dropped)."""
    line = next((line for line in text.splitlines() if line.strip().startswith(label)), "")
    words = [word for word in line.strip()[len(label):].split() if word != "ms"]
    return (words[0], words[-1]) if len(words) >= 2 else ("-", "-")


def one(name: str, args: list[str], work: Path) -> str:
    folder = work / name.removesuffix(".py")
    folder.mkdir()
    shutil.copy(PROGRAMS / name, folder)
    if name == "word_lm.py":
        sys.path.insert(0, str(ROOT / "tests"))
        from test_real_programs import fake_corpus

        fake_corpus(folder)
    trace = str(work / f"{name}.trace")
    lazyviz("run", "--no-tui", "-o", trace, name, *args, cwd=folder)
    said = lazyviz("fix", trace, cwd=folder).stderr
    counts = re.search(r"(\d+) findings?(?:, (\d+) with an edit below)?", said)
    findings, edits = (int(counts.group(1)), int(counts.group(2) or 0)) if counts else (0, 0)
    if not edits:
        return f"| {name} | {findings} | 0 | - | - | - | - | - |"
    trial = lazyviz("fix", trace, "--try", "--until-clean", cwd=folder).stderr
    rounds = len(re.findall(r"^  round \d+ \(kept\)", trial, re.MULTILINE))
    whole = trial.split("the whole way", 1)[-1]
    per_step, recompiles, sync = (cell(whole, label) for label in
                                  ("executions per step", "recompiles after warm-up", "sync time"))
    output = next((line.split("output: ", 1)[1] for line in whole.splitlines() if "output: " in line), "")
    output = ("same" if output.startswith("the same") else
              "differs, as the edit says" if "; expected: " in trial else
              "not comparable (dropout)" if "random numbers" in whole else output[:40])
    return (f"| {name} | {findings} | {edits} | {rounds} | {per_step[0]} -> {per_step[1]} | "
            f"{recompiles[0]} -> {recompiles[1]} | {sync[0]} -> {sync[1]} ms | {output} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*")
    parser.add_argument("--backend", choices=("ts", "xla"), default="ts")
    options = parser.parse_args()
    programs = TS if options.backend == "ts" else XLA
    print("| program | findings | with an edit | rounds kept | executions per step | recompiles after warm-up "
          "| sync time | output |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for name, args in programs.items():
            if not options.names or name in options.names:
                print(one(name, args, Path(folder)), flush=True)


if __name__ == "__main__":
    main()
