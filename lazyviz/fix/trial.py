"""Proving a fix: the script's folder copied (never the user's files), the patch applied
to the copy, and both the copy as it was and the patched copy run traced under the
same bound (`lazyviz run --steps N`, or `--iterations N` for a loop without steps), so both
sides are measured on this machine, now.
What is compared: executions per step, recompiles after warm-up, graph size per sync,
step time, the findings, and the script's output (numbers to a tolerance)."""
from __future__ import annotations

import itertools
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lazyviz.analysis.collectives import per_step
from lazyviz.analysis.findings import Finding
from lazyviz.analysis.loops import iteration_of
from lazyviz.analysis.recompiles import WARMUP_STEPS, recompiles_after_warmup
from lazyviz.analysis.run import Run
from lazyviz.analysis.units import size_text
from lazyviz.errors import LazyvizError
from lazyviz.trace import TraceError
from lazyviz.trace import open as open_trace
from lazyviz.trace.files import launch_folder, rank_trace
from lazyviz.trace.model import RunInfo, frame_owner

DEFAULT_STEPS = WARMUP_STEPS + 3  # a few steps past warm-up: recompiles after it show
MAX_COPY_BYTES = 1 << 30  # a folder bigger than this is not copied: say so instead
SKIPPED = shutil.ignore_patterns(".git", "__pycache__", "*.trace", "*.trace-wal", "*.trace-shm", "*.trace.out",
                                 ".venv*", "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache")
# Ops that draw random numbers on the device. Cut into other graphs, they draw other
# numbers: word_language_model's losses differ with and without mark_step() through its
# dropout, and agree to the last digit with dropout=0 (measured on torch 2.13's TS backend).
RANDOM_OPS = re.compile(r"dropout|bernoulli|uniform|normal|rand|multinomial")
RELATIVE_TOLERANCE = 1e-3  # printed losses of the patched run match when within this


@dataclass(frozen=True)
class Measures:
    """One run of a side, as the comparison shows it."""

    exit_status: int | None
    state: str
    steps: int
    executions: int
    misses: int
    recompiles: int  # cache misses after warm-up
    max_nodes: int
    sync_ms: float
    step_ms: float | None  # median wall time of a step after warm-up
    in_steps: int  # executions inside the steps (not an evaluation after the last one)
    random_ops: list[str]  # random ops on the device (dropout): their draws depend on the graphs
    findings: list[Finding] = field(default_factory=list)
    output: str = ""
    crash: str | None = None  # where and what the script raised: "model.py:56 (RuntimeError)"
    iterations: int = 0  # optimizer steps: a loop's iterations where it has no steps
    other_syncs: int = 0  # executions that did not end a step (reads, fallbacks)
    collective_bytes: float | None = None  # SPMD: bytes each device sends per step for collectives
    steady_sync_ms: float | None = None  # sync time per iteration after warm-up (see steady_sync)

    @property
    def per_step(self) -> float | None:
        return self.in_steps / self.steps if self.steps else None

    @property
    def per_iteration(self) -> float | None:
        return self.executions / self.iterations if self.iterations else None


def by_iteration(before: Measures, after: Measures) -> bool:
    """Are two runs compared per iteration? Where the original has no steps and a loop
    with an optimizer (a mark_step() edit gives the copy steps the original has not)."""
    return not before.steps and bool(before.iterations or after.iterations)


@dataclass(frozen=True)
class Bound:
    """How far each side of a trial runs, the same on both: N steps, or for a loop
    without steps N iterations (optimizer steps: a mark_step() edit gives the copy steps
    the original has not, so steps cannot be the bound)."""

    count: int
    unit: str = "steps"  # or "iterations"

    @property
    def flags(self) -> list[str]:
        return ["--steps" if self.unit == "steps" else "--iterations", str(self.count)]

    def __str__(self) -> str:
        return f"{self.count} steps" if self.unit == "steps" else f"{self.count} iterations (optimizer steps)"


def shown_again_by(finding: Finding, run: Run) -> Sequence[int]:
    """The executions a trial's bound must reach for the finding to show again: a graph
    that grows at every sync shows in its first iterations (its last sync is the run's
    end); another finding at its last (a last short batch comes late). Where the graph the
    finding names first ran after a loop without steps (bigram.py's 60 iterations piled
    up and ran at the generation's first multinomial) but the loop synced inside too
    (AdamW's lerp_ fallback in most iterations), those syncs show it growing in the
    bound's own first iterations: no execution to reach. A loop that seldom synced inside
    (mnist without mark_step(): a loss logged at batch 0, the rest run at the evaluation)
    pays after it: reach that."""
    if finding.kind != "missing_mark_step":
        return finding.executions[-1:]
    first = finding.executions[:1]
    marks = run.info.optimizer_marks
    synced = sum(b > a for a, b in itertools.pairwise(marks))  # iterations with a sync of their own
    if first and not run.steps and len(marks) == run.info.optimizer_steps and synced * 2 > len(marks) \
            and iteration_of(marks, first[0]) is None:
        return ()
    return first


def trial_bound(run: Run, executions: Sequence[int], steps: int | None = None) -> Bound:
    """Enough for each fixed finding to show again: two steps past the last step one was
    seen in, and a few past warm-up; in a loop without steps, the same counted in
    iterations; an explicit --steps wins."""
    if steps is not None:
        return Bound(steps)
    # A script that raised: far enough for the original to raise again (a crash at the
    # checkpoint after the loop is the finding to fix).
    crashed = bool(run.info.error) and not run.info.error.startswith("KeyboardInterrupt")
    if run.steps:
        return Bound(max([DEFAULT_STEPS, *(run.execution(e).step + 2 for e in executions),
                          *([run.steps + 1] if crashed else [])]))
    # No steps (also a script that crashed before its first): a loop that has an optimizer
    # ends after the iterations; one without runs to its end, on both sides alike.
    marks = run.info.optimizer_marks
    seen = [iteration_of(marks, e) for e in executions]
    last = max([DEFAULT_STEPS - 2, *(run.info.optimizer_steps if i is None else i for i in seen)])
    return Bound(max(last + 2, run.info.optimizer_steps + 1 if crashed else 0), "iterations")


def steady_sync(sync_ms: Sequence[float], marks: Sequence[int]) -> float | None:
    """Sync time per iteration after warm-up, by optimizer steps: what ran between the
    ends of optimizer steps WARMUP_STEPS + 1 and the last kept, over the iterations
    between. A loop whose graph grows compiles again at every sync and never warms up;
    one cut into steps is cached from then on. Counted by the optimizer's steps it means
    the same on both sides, with steps or without, and a short bounded trial shows the
    rate a whole run pays (its totals are mostly the compiles both sides pay once)."""
    if len(marks) < WARMUP_STEPS + 2:
        return None
    return sum(sync_ms[marks[WARMUP_STEPS]:marks[-1]]) / (len(marks) - 1 - WARMUP_STEPS)


def measure(run: Run, output: str) -> Measures:
    table = run.executions
    steps = run.steps
    ends = [table.start_ms[p] + table.sync_ms[p] for p in range(len(table))
            if table.kind_at(p).cause == "mark_step" and table.step[p] >= WARMUP_STEPS]
    gaps = [b - a for a, b in itertools.pairwise(ends)]
    ops = {op for graph in map(run.ir_texts.parsed, run.ir_texts) if graph is not None for op in graph.op_counts}
    return Measures(
        exit_status=run.info.exit_status, state=run.info.state, steps=steps, executions=len(table),
        misses=run.summary.misses, in_steps=sum(1 for p in range(len(table)) if table.step[p] < steps),
        random_ops=sorted(op for op in ops if RANDOM_OPS.search(op)),
        recompiles=recompiles_after_warmup(run.recompiles),
        max_nodes=max((table.kind_at(p).nodes for p in range(len(table))), default=0),
        sync_ms=sum(table.sync_ms), step_ms=statistics.median(gaps) if gaps else None,
        findings=list(run.findings), output=output, crash=_crash(run.info), iterations=run.info.optimizer_steps,
        other_syncs=sum(1 for p in range(len(table)) if table.kind_at(p).cause != "mark_step"),
        collective_bytes=per_step(run.collectives, steps) if run.collectives else None,
        steady_sync_ms=steady_sync(table.sync_ms, run.info.optimizer_marks),
    )


def _crash(info: RunInfo) -> str | None:
    """The script's own line that raised, and the error's type; None when nothing raised."""
    if not info.error:
        return None
    user = [f for f in info.error_frames if frame_owner(f.file) is None] or info.error_frames
    where = f"{Path(user[-1].file).name}:{user[-1].line}" if user else "?"
    return f"{where} ({info.error.split(':')[0]})"


def finding_key(finding: Finding) -> tuple[str, str, str]:
    """What a finding is about and in which function, without its line (the patch moves lines).
    A shape change at one step and the same change at several are one finding's two sizes:
    an edit that removes another sync site can turn the one into the other."""
    details = finding.details
    about = details.get("op") or details.get("cause") or ",".join(details.get("changes", ()))
    kind = "recompile" if finding.kind == "dynamic_shape" else finding.kind
    return kind, str(about), finding.frame.function if finding.frame else ""


# -- the copy -----------------------------------------------------------------------------
def copy_root(info: RunInfo, files: list[str]) -> Path:
    """The folder to copy: the script's, or the one holding it and every patched file."""
    # A module (-m) is found from the folder it was run in: that folder is the project.
    start = Path(info.cwd) if info.module else Path(info.cwd, info.script).resolve().parent
    folders = [str(start), *(os.path.dirname(f) for f in files)]
    return Path(os.path.commonpath(folders))


def _size(folder: Path, limit: int) -> int:
    total = 0
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not SKIPPED(root, [d])]
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
            if total > limit:
                return total
    return total


def make_copy(root: Path, into: Path) -> Path:
    if _size(root, MAX_COPY_BYTES) > MAX_COPY_BYTES:
        raise LazyvizError(f"{root} holds more than {MAX_COPY_BYTES >> 20} MB: --try copies the script's folder; "
                           "move the script to a smaller folder, or apply the diff to a copy by hand")
    copy = into / root.name
    shutil.copytree(root, copy, symlinks=True, ignore=SKIPPED)
    return copy


def _in_copy(path: Path, root: Path, copy: Path) -> Path:
    return copy / path.relative_to(root)


@dataclass(frozen=True)
class Side:
    name: str  # "before" or "after"
    folder: Path  # the copy
    trace: Path


def run_side(side: Side, info: RunInfo, root: Path, bound: Bound | None, timeout: float | None) -> Measures:
    """Run the copy traced as the original ran: the same argv, from the same folder of
    the copy (or from the original folder when it is outside the copy, with the script
    taken from the copy)."""
    cwd = Path(info.cwd)
    inside = cwd == root or root in cwd.parents
    run_in = _in_copy(cwd, root, side.folder) if inside else cwd
    command = [sys.executable, "-m", "lazyviz", "run", "--no-tui", "--backend", info.backend,
               "--capture", info.capture if info.capture in ("full", "light") else "full", "-o", str(side.trace)]
    if bound is not None:
        command += bound.flags
    command += ["-m", info.argv[0]] if info.module else [str(_in_copy(Path(cwd, info.script).resolve(), root,
                                                                       side.folder))]
    command += info.argv[1:]
    try:
        done = subprocess.run(command, cwd=run_in, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        # --steps bounds a run with steps; one bounded by iterations has only --timeout to give.
        lower = "lower --steps or " if bound is not None and bound.unit == "steps" else ""
        raise LazyvizError(f"the {side.name} run took longer than {timeout:.0f} s: {lower}raise --timeout "
                           f"(it ran {bound or 'to its end'})") from None
    # Where torch_xla.launch ran the steps in processes of their own, the first one's trace.
    launched = rank_trace(launch_folder(side.trace), 0)
    try:
        with open_trace(launched if launched.exists() else side.trace) as trace:
            return measure(Run(trace).analysed(), done.stdout)
    except TraceError:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise LazyvizError(f"the {side.name} run recorded no trace ({last})") from None


# -- comparing -----------------------------------------------------------------------------
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


@dataclass(frozen=True)
class OutputCheck:
    """The patched copy's output against the original's."""

    verdict: str  # one phrase for the user
    same: bool  # the results agree (measurements left out; a crashed original: up to where it stopped)
    left_out: int = 0  # numbers that measure time or rate, not compared


def check_output(before: str, after: str, tolerance: float = RELATIVE_TOLERANCE,
                 original_crashed: bool = False) -> OutputCheck:
    """Does the patched run print what the original did? Line by line, the words equal and
    the result numbers within the tolerance. Numbers that measure time or rate (by their
    unit or label, and clock times) are left out and counted: they differ between any two
    runs. Where the original crashed, only what it printed before is compared."""
    old, new = before.splitlines(), after.splitlines()
    if original_crashed:
        new = new[:len(old)]
        if not old:
            return OutputCheck("the original printed nothing before its crash", True)
    if not old and not new:
        return OutputCheck("neither printed anything", True)
    total, left_out, differing, first, labels_left = 0, 0, [], "", []
    for number, (a, b) in enumerate(zip(old, new), 1):
        a_masked, b_masked = _CLOCK.sub("@", a), _CLOCK.sub("@", b)
        left_out += len(_CLOCK.findall(a))
        if _NUMBER.sub("#", a_masked) != _NUMBER.sub("#", b_masked):
            return OutputCheck(f"differs at line {number}: {a.strip()[:60]!r} -> {b.strip()[:60]!r}", False)
        for x, y in zip(_NUMBER.finditer(a_masked), _NUMBER.finditer(b_masked)):
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
    aside = ""
    if left_out:
        shown = ", ".join(dict.fromkeys(label for label in labels_left if label != "#")) or "clock times"
        aside = f"; {left_out} {'number measures' if left_out == 1 else 'numbers measure'} time or rate ({shown[:60]}): left out"
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
    return OutputCheck(f"the same ({common} line{'s' * (common != 1)}{upto}, numbers within {tolerance:g}{aside})",
                       True, left_out)


def compare_output(before: str, after: str, tolerance: float = RELATIVE_TOLERANCE,
                   original_crashed: bool = False) -> str:
    """check_output's phrase alone."""
    return check_output(before, after, tolerance, original_crashed).verdict


def ran_further(before: Measures, after: Measures) -> bool:
    """Did the copy get further than the original before it raised: more optimizer steps,
    steps or executions? (A crash in the first forward fixed, the next one at the save.)"""
    return (after.iterations, after.steps, after.executions) > (before.iterations, before.steps, before.executions)


def _progress(m: Measures) -> str:
    if m.iterations:
        return f"{m.iterations} optimizer steps"
    return f"{m.steps} steps" if m.steps else f"{m.executions} executions"


def crash_verdict(before: Measures, after: Measures) -> tuple[bool, str]:
    """Did the patched copy end as the original did, or better? (ok, a sentence saying
    how, "" when both ended alike). A crash that is gone is the proof: the copy running on
    where the original raised is the point of the edit."""
    if before.crash and not after.crash and after.exit_status == 0:
        ran = "ran on to the bound" if after.state.startswith("stopped after") else "ran to its end"
        return True, f"the crash at {before.crash} is gone; the copy {ran}"
    if before.crash and after.crash and after.crash != before.crash:
        further = f" further on ({_progress(after)})" if ran_further(before, after) else ""
        return False, f"the crash at {before.crash} is gone, but the copy crashed{further} at {after.crash}"
    if after.exit_status != before.exit_status:
        return False, f"the patched copy did not end as the original did: {after.state}, not {before.state}"
    return True, ""


def _by_key(findings: list[Finding]) -> dict[tuple[str, str, str], list[Finding]]:
    grouped: dict[tuple[str, str, str], list[Finding]] = {}
    for finding in findings:
        grouped.setdefault(finding_key(finding), []).append(finding)
    return grouped


def _finding_line(group: list[Finding]) -> str:
    first = group[0]
    where = f" [{first.frame.site.rpartition('/')[2]}]" if first.frame else ""
    more = f" (and {len(group) - 1} more like it)" if len(group) > 1 else ""
    return f"    {first.severity}: {(first.short or first.message)[:150]}{where}{more}"


def _ending(state: str) -> str:
    """How a side ended, short enough for the table: the error's type, not its message;
    "at the bound" where the trial's bound ended it (the heading says which)."""
    if state.endswith((", as asked (--steps)", ", as asked (--iterations)")):
        return "at the bound"
    return state.split(":")[0] if state.startswith("raised ") else state


def _shown(value: float | int | None, unit: str = "", digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}{unit}"


def _per(total: float, count: int) -> float | None:
    return total / count if count else None


def comparison(before: Measures, after: Measures, expected: Sequence[str] = ()) -> str:
    """Before and after side by side; expected: how the edits change the script's results."""
    rows = [
        ("exit", _ending(before.state), _ending(after.state)),
        ("steps", _shown(before.steps), _shown(after.steps)),
        ("executions", _shown(before.executions), _shown(after.executions)),
        ("executions per step", _shown(before.per_step, digits=1), _shown(after.per_step, digits=1)),
        ("cache misses", _shown(before.misses), _shown(after.misses)),
        ("recompiles after warm-up", _shown(before.recompiles if before.steps else None),
         _shown(after.recompiles if after.steps else None)),
        ("largest graph (nodes)", _shown(before.max_nodes), _shown(after.max_nodes)),
        ("sync time", _shown(before.sync_ms, " ms", 1), _shown(after.sync_ms, " ms", 1)),
        ("step time (median)", _shown(before.step_ms, " ms", 1), _shown(after.step_ms, " ms", 1)),
    ]
    if before.collective_bytes is not None or after.collective_bytes is not None:  # SPMD
        rows.append(("collective bytes per step", *(size_text(m.collective_bytes or 0) for m in (before, after))))
    steady = before.steady_sync_ms is not None or after.steady_sync_ms is not None
    if by_iteration(before, after):  # a loop without steps: like with like, per iteration
        rows[2:2] = [("iterations (optimizer steps)", _shown(before.iterations), _shown(after.iterations))]
        rows[4:4] = [("executions per iteration", _shown(before.per_iteration, digits=1),
                      _shown(after.per_iteration, digits=1)),
                     ("sync time per iteration", _shown(_per(before.sync_ms, before.iterations), " ms", 1),
                      _shown(_per(after.sync_ms, after.iterations), " ms", 1)),
                     *([("  after warm-up", _shown(before.steady_sync_ms, " ms", 1),
                         _shown(after.steady_sync_ms, " ms", 1))] if steady else [])]
    width = max(len(r[0]) for r in rows)
    left = max(len(r[1]) for r in rows + [("", "before", "")])
    lines = [f"  {'':{width}}  {'before':>{left}}  after"]
    lines += [f"  {label:{width}}  {old:>{left}}  {new}" for label, old, new in rows]
    old_keys, new_keys = _by_key(before.findings), _by_key(after.findings)
    gone = [group for key, group in old_keys.items() if key not in new_keys]
    appeared = [group for key, group in new_keys.items() if key not in old_keys]
    kept = [group for key, group in new_keys.items() if key in old_keys]
    for title, groups in (("findings gone", gone), ("findings that appeared", appeared), ("findings left", kept)):
        if groups:
            lines.append(f"  {title}:")
            lines += [_finding_line(group) for group in groups]
    ok, ending = crash_verdict(before, after)
    if ending:
        lines.insert(0, f"  {ending}")
    output = compare_output(before.output, after.output, original_crashed=bool(before.crash and ok))
    lines.append(f"  output: {output}")
    random = sorted({*before.random_ops, *after.random_ops})
    if output.startswith("differs") and expected:
        lines += [f"    expected: {why}" for why in expected]
    elif output.startswith("differs") and random:
        lines.append(f"    the script draws random numbers on the device ({', '.join(random[:3])}): cut into other "
                     "graphs they draw other numbers; compare with them off (dropout=0) to check the arithmetic")
    if by_iteration(before, after):
        lines.append("  (the original has no steps: both sides ran the same optimizer steps, compared per iteration"
                     f"{f'; after warm-up: from the end of optimizer step {WARMUP_STEPS + 1} on' * steady})")
    elif before.steps == 0:
        lines.append("  (the original has no steps and no optimizer steps to count: both ran to their end)")
    return "\n".join(lines)


def trial_record(before: Measures, after: Measures, bound: Bound, edits: Sequence[str]) -> dict:
    """What `--try` measured, as the trace keeps it (run field fix_trial) for the HTML
    report, the notebook summary and the API."""
    def side(m: Measures) -> dict:
        return {"state": m.state, "steps": m.steps, "executions": m.executions, "per_step": m.per_step,
                "misses": m.misses, "recompiles": m.recompiles if m.steps else None, "max_nodes": m.max_nodes,
                "iterations": m.iterations, "per_iteration": m.per_iteration,
                "sync_ms": round(m.sync_ms, 3), "step_ms": None if m.step_ms is None else round(m.step_ms, 3),
                "steady_sync_ms": None if m.steady_sync_ms is None else round(m.steady_sync_ms, 3),
                "collective_bytes": None if m.collective_bytes is None else round(m.collective_bytes)}

    old, new = _by_key(before.findings), _by_key(after.findings)
    return {
        "steps": bound.count, "bound": str(bound), "edits": list(edits), "before": side(before), "after": side(after),
        "gone": [group[0].short or group[0].message for key, group in old.items() if key not in new],
        "appeared": [group[0].short or group[0].message for key, group in new.items() if key not in old],
        "output": compare_output(before.output, after.output, original_crashed=bool(before.crash)),
        "ending": crash_verdict(before, after)[1],
    }


def measured_text(trial: Mapping) -> str:
    """The measurement in one line: "executions per step 2.0 -> 1.0, largest graph ..."."""
    before, after = trial.get("before", {}), trial.get("after", {})
    parts = []
    for key, label, unit in (("per_step", "executions per step", ""), ("recompiles", "recompiles after warm-up", ""),
                             ("max_nodes", "largest graph", " nodes"), ("sync_ms", "sync time", " ms"),
                             ("steady_sync_ms", "sync time per iteration after warm-up", " ms"),
                             ("collective_bytes", "collective bytes per step", " B")):
        old, new = before.get(key), after.get(key)
        if isinstance(old, (int, float)) and isinstance(new, (int, float)) and old != new:
            digits = 1 if isinstance(old, float) or isinstance(new, float) else 0
            parts.append(f"{label} {old:,.{digits}f} -> {new:,.{digits}f}{unit}")
        elif key == "per_step" and new is not None and old is None:
            parts.append(f"steps {before.get('steps', 0)} -> {after.get('steps', 0)}")
    gone = len(trial.get("gone", []))
    if gone:
        parts.append(f"{gone} finding{'s' if gone != 1 else ''} gone")
    return ", ".join(parts) or "no change measured"


def try_patch(info: RunInfo, patched: Mapping[str, str], bound: Bound, timeout: float | None,
              keep: bool = False, expected: Sequence[str] = ()) -> tuple[str, Measures, Measures]:
    """Copy, patch the copy, run both sides; (the comparison, before, after)."""
    root = copy_root(info, list(patched))
    work = Path(tempfile.mkdtemp(prefix="lazyviz-fix-"))
    try:
        sides = []
        for name in ("before", "after"):
            folder = make_copy(root, work / name)
            sides.append(Side(name, folder, work / f"{name}.trace"))
        for file, text in patched.items():
            target = _in_copy(Path(file), root, sides[1].folder)
            target.write_bytes(text.encode("utf-8"))
        before = run_side(sides[0], info, root, bound, timeout)
        after = run_side(sides[1], info, root, _after_bound(before, bound), timeout)
        text = comparison(before, after, expected)
        if keep:
            text += f"\n  the copies and their traces: {work}"
        return text, before, after
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def _after_bound(before: Measures, bound: Bound) -> Bound | None:
    """The patched side's bound: the original's. An original bounded by steps that had
    none ran to its end, and so does the copy (an edit that gives it steps would cut it
    short); iterations are counted the same with or without steps."""
    return bound if bound.unit == "iterations" or before.steps else None


# -- round after round ----------------------------------------------------------------------
@dataclass(frozen=True)
class Round:
    """One round of --until-clean: the edits it added and the run with every edit so far."""

    edits: list[str]
    measures: Measures
    kept: bool
    why_not: str = ""  # why the round was not kept (worse, output changed, did not end as before)
    output: str = ""  # what the round showed beyond the counts: a crash gone, the output and why it may differ


def _worse(new: Measures, old: Measures) -> str:
    """Why a round made things worse than the last kept one, or ""."""
    ok, ending = crash_verdict(old, new)
    if not ok and old.crash and new.crash and ran_further(old, new):
        return ""  # one crash traded for a later one: the next round's edit is for that one
    if not ok:
        return ending if old.crash else f"it ended {_ending(new.state)}, not {_ending(old.state)}"
    if ending:  # the crash is gone: whatever the counts, the copy now runs
        return ""
    if new.per_step is not None and old.per_step is not None and new.per_step > old.per_step + 1e-9:
        return f"executions per step {old.per_step:.1f} -> {new.per_step:.1f}"
    if by_iteration(old, new) and new.iterations and old.iterations and \
            new.other_syncs / new.iterations > old.other_syncs / old.iterations + 1e-9:
        # A step-ending call adds one execution an iteration by design: the syncs it
        # should not add are the others (reads, fallbacks).
        return (f"syncs other than the step's per iteration {old.other_syncs / old.iterations:.1f} -> "
                f"{new.other_syncs / new.iterations:.1f}")
    if new.steps and old.steps and new.recompiles > old.recompiles:
        return f"recompiles after warm-up {old.recompiles} -> {new.recompiles}"
    return ""


@dataclass(frozen=True)
class RoundEdits:
    """A round's edits, all applied together."""

    summaries: list[str]
    patched: dict[str, str]  # file -> its text with the edits
    alters: list[str]  # how the edits change the script's results, where they do


def until_clean(info: RunInfo, texts: Mapping[str, str], first: RoundEdits, bound: Bound, timeout: float | None,
                rounds: int, keep: bool = False, propose_next: Callable[[Run], RoundEdits | None] | None = None,
                ) -> tuple[str, Measures, list[Round], dict[str, str]]:
    """--until-clean: the first round's edits, then, round after round, the edits lazyviz
    proposes for the last kept run's findings, each round run on a fresh copy with every
    edit kept so far. Stops when no edit is left, a round makes things worse or changes
    the output (that round is not kept), or after `rounds`. An output that differs is
    kept where an edit says it changes results (drop_last) or the script draws random
    numbers on the device (cut into other graphs, they draw others): then it cannot be
    compared, and the table says so. propose_next(run) gives a kept run's edits with
    files in its copy. Returns (the table, the original's measures, the rounds, the
    files' texts with every kept edit)."""
    root = copy_root(info, list(texts))
    work = Path(tempfile.mkdtemp(prefix="lazyviz-fix-"))
    try:
        original = Side("before", make_copy(root, work / "before"), work / "before.trace")
        before = run_side(original, info, root, bound, timeout)
        kept_texts = dict(texts)
        last = reference = before
        done: list[Round] = []
        pending: RoundEdits | None = first
        stopped = f"after {rounds} round{'s' * (rounds != 1)} (--rounds)"
        for number in range(1, rounds + 1):
            if pending is None or not pending.patched:
                stopped = "no edit left for the findings left"
                break
            candidate = {**kept_texts, **pending.patched}
            side = Side(f"round {number}", make_copy(root, work / f"round{number}"), work / f"round{number}.trace")
            for file, text in candidate.items():
                _in_copy(Path(file), root, side.folder).write_bytes(text.encode("utf-8"))
            measures = run_side(side, info, root, _after_bound(before, bound), timeout)
            done.append(_judged(pending, measures, last, reference))
            if not done[-1].kept:
                stopped = f"round {number} was not kept: the last kept round is the result"
                break
            kept_texts, last = candidate, measures
            if reference.crash and not measures.crash:  # the first copy that runs: what later rounds print against
                reference = measures
            pending = None
            if propose_next is not None:
                with open_trace(side.trace) as trace:
                    proposed = propose_next(Run(trace).analysed())
                outside = [f for f in (proposed.patched if proposed else {}) if not Path(f).is_relative_to(side.folder)]
                if outside:  # a module imported from outside the copied folder: not this round's to edit
                    stopped = f"the next edits are for {outside[0]}, outside the copied folder {root}"
                    break
                if proposed is not None:  # the copy's paths back to the user's files
                    pending = RoundEdits(proposed.summaries, {str(root / Path(file).relative_to(side.folder)): text
                                                              for file, text in proposed.patched.items()},
                                         proposed.alters)
        if pending is None and done and done[-1].kept and not stopped.startswith("the next edits"):
            stopped = "no edit left for the findings left"
        text = rounds_table(before, done) + f"\n  stopped: {stopped}"
        if keep:
            text += f"\n  the copies and their traces: {work}"
        return text, before, done, kept_texts
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def _judged(pending: RoundEdits, measures: Measures, last: Measures, reference: Measures) -> Round:
    """A round against the last kept run (worse or not) and its output against the
    reference's (the original's, or the first copy that ran where it crashed)."""
    checked = check_output(reference.output, measures.output, original_crashed=bool(reference.crash))
    output, differs = checked.verdict, not checked.same
    random = sorted({*reference.random_ops, *measures.random_ops})
    excuse = (f"expected: {pending.alters[0]}" if pending.alters else
              f"the script draws random numbers on the device ({', '.join(random[:2])}): not comparable"
              if random else "")
    why = _worse(measures, last) or (f"the output {output}" if differs and not excuse else "")
    ending = crash_verdict(last, measures)[1]
    said = [ending] if ending and not why else []
    if differs and excuse:
        said.append(f"output {output}; {excuse}")
    elif not differs and checked.left_out:
        said.append(f"output {output}")
    return Round(pending.summaries, measures, kept=not why, why_not=why, output="; ".join(said))


def rounds_table(before: Measures, rounds: Sequence[Round]) -> str:
    """Each round's edits and what they changed, then the whole way from the first run to
    the last kept one."""
    kept = [r for r in rounds if r.kept]
    lines = []
    previous = before
    for number, done in enumerate(rounds, 1):
        state = "kept" if done.kept else f"not kept: {done.why_not}"
        lines.append(f"  round {number} ({state}):")
        lines += [f"    edit: {summary[:150]}" for summary in done.edits]
        m = done.measures
        if by_iteration(before, m):  # a loop without steps: per iteration, after warm-up where it has one
            steady = previous.steady_sync_ms is not None or m.steady_sync_ms is not None
            old, new = ((previous.steady_sync_ms, m.steady_sync_ms) if steady else
                        (_per(previous.sync_ms, previous.iterations), _per(m.sync_ms, m.iterations)))
            lines.append(f"    executions per iteration {_shown(previous.per_iteration, digits=1)} -> "
                         f"{_shown(m.per_iteration, digits=1)}, sync per iteration{' after warm-up' * steady} "
                         f"{_shown(old, ' ms', 1)} -> {_shown(new, ' ms', 1)}, largest graph "
                         f"{_shown(previous.max_nodes)} -> {_shown(m.max_nodes)} nodes")
        else:
            lines.append(f"    executions per step {_shown(previous.per_step, digits=1)} -> {_shown(m.per_step, digits=1)}, "
                         f"recompiles after warm-up {_shown(previous.recompiles)} -> {_shown(m.recompiles)}, "
                         f"sync {_shown(previous.sync_ms, ' ms', 1)} -> {_shown(m.sync_ms, ' ms', 1)}, "
                         f"step {_shown(previous.step_ms, ' ms', 1)} -> {_shown(m.step_ms, ' ms', 1)}")
        if done.output:
            lines.append(f"    {done.output[:300]}")
        if done.kept:
            previous = m
    last = kept[-1].measures if kept else before
    lines.append(f"  the whole way ({len(kept)} round{'s' * (len(kept) != 1)} kept):")
    lines.append(comparison(before, last))
    return "\n".join(lines)
