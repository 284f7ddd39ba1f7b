"""Does the patched copy print what the original did? Line by line, the words equal (the
spaces a format's width pads with aside) and the result numbers within a tolerance.
Measurements are told from results by the program itself: a number that moves between
two runs of the unmodified original (`ms/batch`, `tokens/s`, an elapsed time) measures
the run, not the model, and is left out, as is a number whose unit or label says it is a
time or a rate, and a clock time."""
from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

RELATIVE_TOLERANCE = 1e-3  # printed losses of the patched run match when within this

_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|nan|inf")
# A clock time or a date ("20:08:23", "2026-11-27") in a log line: when it was printed.
_CLOCK = re.compile(r"\b\d{1,4}(?::\d{2}){1,2}(?:[.,]\d+)?\b|\b\d{4}-\d{2}-\d{2}\b")
# A unit right after a number that makes it a time or a rate ("72.35ms", "1.2 s", "3.1it/s",
# "900 tok/s"), not a result.
_MEASURE_UNIT = re.compile(r"\s?(?:ms|us|µs|ns|s|sec|secs|seconds?|mins?|minutes?|hrs?|hours?|s/it|[A-Za-z_]*/s(?:ec)?)"
                           r"(?![A-Za-z0-9])")
# Words of a label that make the number after it a time, a rate or a utilisation: what
# training scripts print beside the step's results (`time 1378.08ms`, `iter_dt 72.35`,
# `mfu 12.3%`, `train_runtime`, `samples_per_second`, `ms/batch`).
_MEASURE_WORDS = frozenset({
    "time", "times", "timing", "dt", "elapsed", "runtime", "duration", "latency", "took", "wall", "walltime",
    "throughput", "speed", "fps", "tps", "mfu", "util", "utilization", "utilisation", "eta", "ms", "us", "ns",
    "s", "sec", "secs", "second", "seconds", "per", "flops", "tflops", "gflops", "it"})
# Not "rate": a learning_rate, a dropout_rate or an error_rate is a setting or a result
# (makemore prints its arguments, learning_rate among them); a rate per time has its unit.


def _label(text: str) -> str:
    """The word a printed number belongs to: the last one before it ("loss", "ms/batch")."""
    words = re.findall(r"[A-Za-z_][\w/%]*", text)
    return words[-1] if words else "#"


def _measures(line: str, number: re.Match) -> bool:
    """Is this printed number a measurement (a time, a rate) rather than a result? Told by
    its unit or by its label: a loss, an accuracy or a token stays a result."""
    if _MEASURE_UNIT.match(line, number.end()):
        return True
    if line[number.end():number.end() + 1] == "%" and "mfu" in line[:number.start()].lower():
        return True
    label = _label(line[:number.start()]).lower()
    return any(word in _MEASURE_WORDS for word in re.split(r"[_/\-%]+", label) if word)


def _words(line: str) -> str:
    """A line's words with its numbers as # and runs of spaces as one: `{:5.2f}` pads
    48.90 with a space where it prints 5733.00 without."""
    return " ".join(_NUMBER.sub("#", line).split())


def moving_numbers(first: str, second: str) -> set[tuple[int, int]]:
    """(line, index of the number on it) for each number that differs between two runs of
    the same unmodified program: a measurement of the run (a time per batch, a throughput)
    or a draw of random numbers, not something an edit may change."""
    moving = set()
    for number, (a, b) in enumerate(zip(first.splitlines(), second.splitlines()), 1):
        a, b = _CLOCK.sub("@", a), _CLOCK.sub("@", b)
        if _words(a) != _words(b):
            continue
        for index, (x, y) in enumerate(zip(_NUMBER.finditer(a), _NUMBER.finditer(b))):
            if x.group() != y.group():
                moving.add((number, index))
    return moving


@dataclass(frozen=True)
class OutputCheck:
    """The patched copy's output against the original's."""

    verdict: str  # one phrase for the user
    same: bool  # the results agree (measurements left out; a crashed original: up to where it stopped)
    left_out: int = 0  # numbers that measure time or rate, not compared


def check_output(before: str, after: str, tolerance: float = RELATIVE_TOLERANCE,
                 original_crashed: bool = False, again: str | None = None,
                 random_ops: Sequence[str] = ()) -> OutputCheck:
    """Does the patched run print what the original did? Line by line, the words equal and
    the result numbers within the tolerance. Left out and counted: numbers that moved
    between the original's two runs (`again`, the original run a second time, where it
    was), and those whose unit or label says they measure time or rate, and clock times.
    Where the original crashed, only what it printed before is compared."""
    old, new = before.splitlines(), after.splitlines()
    if original_crashed:
        new = new[:len(old)]
        if not old:
            return OutputCheck("the original printed nothing before its crash", True)
    if not old and not new:
        return OutputCheck("neither printed anything", True)
    moving = moving_numbers(before, again) if again is not None else set()
    # A label whose number moved on one line moves on every line (imagenet's Loss from an
    # unseeded init, its Data time): it agreed elsewhere by chance.
    moving_labels = _labels_at(before, moving) - {"#"}
    # A result that moved between the original's own runs (an unseeded model's loss): every
    # number it prints comes from the same draws, its accuracy too. Only its words compare.
    unseeded = sorted(label for label in moving_labels if _is_result(label))
    total, left_out, differing, first, labels_left, moved = 0, 0, [], "", [], []
    for number, (a, b) in enumerate(zip(old, new), 1):
        a_masked, b_masked = _CLOCK.sub("@", a), _CLOCK.sub("@", b)
        clocks = len(_CLOCK.findall(a))
        left_out += clocks
        labels_left += ["#"] * clocks
        if _words(a_masked) != _words(b_masked):
            return OutputCheck(f"differs at line {number}: {a.strip()[:60]!r} -> {b.strip()[:60]!r}", False)
        for index, (x, y) in enumerate(zip(_NUMBER.finditer(a_masked), _NUMBER.finditer(b_masked))):
            if (number, index) in moving or unseeded or _label(a_masked[:x.start()]) in moving_labels:
                left_out += 1
                moved.append(_label(a_masked[:x.start()]))
                continue
            if _measures(a_masked, x) or _measures(b_masked, y):
                left_out += 1
                labels_left.append(_label(a_masked[:x.start()]))
                continue
            total += 1
            try:
                same = math.isclose(float(x.group()), float(y.group()), rel_tol=tolerance, abs_tol=1e-6)
            except ValueError:
                same = x.group() == y.group()
            if not same and x.group() != y.group():
                label = _label(a_masked[:x.start()])
                differing.append(label)
                first = first or f"line {number}: {label} {x.group()} -> {y.group()}"
    common = min(len(old), len(new))
    aside = _aside(labels_left, moved, random_ops)
    if len(old) != len(new):
        longer = "the original" if len(old) > len(new) else "the patched copy"
        matched = "the first line matches" if common == 1 else f"the first {common} lines match"
        return OutputCheck(f"{matched}; {longer} printed {abs(len(old) - len(new))} more",
                           False, left_out)
    if differing:
        labels = ", ".join(dict.fromkeys(differing))
        return OutputCheck(f"differs: the words are the same on all {common} lines, {len(differing)} of {total} "
                           f"result numbers are not within {tolerance:g} ({labels}); first at {first}{aside}",
                           False, left_out)
    upto = " the original printed before its crash" if original_crashed else ""
    if unseeded:
        return OutputCheck(f"the same words ({common} line{'s' * (common != 1)}{upto}); no number compared: the "
                           f"original's own results move between two of its runs ({', '.join(unseeded)[:60]}), "
                           "random numbers drawn without a seed", True, left_out)
    return OutputCheck(f"the same ({common} line{'s' * (common != 1)}{upto}, numbers within {tolerance:g}{aside})",
                       True, left_out)


# Labels of a result a script prints (a loss, an accuracy): one that moves between two runs
# of the unmodified program says its numbers come from unseeded draws.
_RESULT_WORDS = frozenset({"loss", "acc", "accuracy", "score", "ppl", "perplexity", "error", "err", "reward",
                           "correct", "bleu", "f1", "auc", "precision", "recall", "nll", "mse", "mae"})


def _is_result(label: str) -> bool:
    return any(word in _RESULT_WORDS for word in re.split(r"[_/\-%@.]+", label.lower()) if word)


def _labels_at(text: str, positions: set[tuple[int, int]]) -> set[str]:
    """The labels of the numbers at these (line, index) positions of the text."""
    labels = set()
    for number, line in enumerate(text.splitlines(), 1):
        masked = _CLOCK.sub("@", line)
        for index, found in enumerate(_NUMBER.finditer(masked)):
            if (number, index) in positions:
                labels.add(_label(masked[:found.start()]))
    return labels


def _aside(labels: list[str], moved: list[str], random_ops: Sequence[str]) -> str:
    """What was left out and why: "; 3 numbers measure time or rate (ms/batch): left out"."""
    parts = []
    if moved:
        shown = ", ".join(dict.fromkeys(label for label in moved if label != "#")) or "unlabelled"
        why = (f"random numbers drawn on the device ({', '.join(random_ops[:2])}), or a measurement of the run"
               if random_ops else "a measurement of the run, or random numbers drawn without a seed")
        parts.append(f"{len(moved)} {'number moves' if len(moved) == 1 else 'numbers move'} between two runs of "
                     f"the original ({shown[:60]}: {why}): left out")
    if labels:
        shown = ", ".join(dict.fromkeys(label for label in labels if label != "#")) or "clock times"
        parts.append(f"{len(labels)} {'number measures' if len(labels) == 1 else 'numbers measure'} time or rate "
                     f"({shown[:60]}): left out")
    return "".join(f"; {part}" for part in parts)


def compare_output(before: str, after: str, tolerance: float = RELATIVE_TOLERANCE,
                   original_crashed: bool = False) -> str:
    """check_output's phrase alone."""
    return check_output(before, after, tolerance, original_crashed).verdict
