"""Proving a fix: the script's folder copied (never the user's files), the patch applied
to the copy, and both the copy as it was and the patched copy run traced under the
same bound (`lazyviz run --steps N`), so both sides are measured on this machine, now.
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

from lazyviz.analysis.findings import Finding
from lazyviz.analysis.recompiles import WARMUP_STEPS, recompiles_after_warmup
from lazyviz.analysis.run import Run
from lazyviz.errors import LazyvizError
from lazyviz.trace import TraceError
from lazyviz.trace import open as open_trace
from lazyviz.trace.files import launch_folder, rank_trace
from lazyviz.trace.model import RunInfo

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

    @property
    def per_step(self) -> float | None:
        return self.in_steps / self.steps if self.steps else None


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
        findings=list(run.findings), output=output,
    )


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


def run_side(side: Side, info: RunInfo, root: Path, steps: int | None, timeout: float | None) -> Measures:
    """Run the copy traced as the original ran: the same argv, from the same folder of
    the copy (or from the original folder when it is outside the copy, with the script
    taken from the copy)."""
    cwd = Path(info.cwd)
    inside = cwd == root or root in cwd.parents
    run_in = _in_copy(cwd, root, side.folder) if inside else cwd
    command = [sys.executable, "-m", "lazyviz", "run", "--no-tui", "--backend", info.backend,
               "--capture", info.capture if info.capture in ("full", "light") else "full", "-o", str(side.trace)]
    if steps is not None:
        command += ["--steps", str(steps)]
    command += ["-m", info.argv[0]] if info.module else [str(_in_copy(Path(cwd, info.script).resolve(), root,
                                                                       side.folder))]
    command += info.argv[1:]
    try:
        done = subprocess.run(command, cwd=run_in, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        raise LazyvizError(f"the {side.name} run took longer than {timeout:.0f} s: lower --steps") from None
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


def _label(text: str) -> str:
    """The word a printed number belongs to: the last one before it ("loss", "ms/batch")."""
    words = re.findall(r"[A-Za-z_][\w/%]*", text)
    return words[-1] if words else "#"


def compare_output(before: str, after: str, tolerance: float = RELATIVE_TOLERANCE) -> str:
    """Does the patched run print what the original did? Line by line, the words equal and
    the numbers within the tolerance; one phrase for the user, naming what the numbers
    that differ are printed as (a timing is expected to differ, a loss is not)."""
    old, new = before.splitlines(), after.splitlines()
    if not old and not new:
        return "neither printed anything"
    total, differing, first = 0, [], ""
    for number, (a, b) in enumerate(zip(old, new), 1):
        if _NUMBER.sub("#", a) != _NUMBER.sub("#", b):
            return f"differs at line {number}: {a.strip()[:60]!r} -> {b.strip()[:60]!r}"
        for x, y in zip(_NUMBER.finditer(a), _NUMBER.finditer(b)):
            total += 1
            try:
                same = math.isclose(float(x.group()), float(y.group()), rel_tol=tolerance, abs_tol=1e-6)
            except ValueError:
                same = x.group() == y.group()
            if not same and x.group() != y.group():
                label = _label(a[:x.start()])
                differing.append(label)
                first = first or f"line {number}: {label} {x.group()} -> {y.group()}"
    common = min(len(old), len(new))
    if len(old) != len(new):
        longer = "the original" if len(old) > len(new) else "the patched copy"
        return f"the first {common} lines match; {longer} printed {abs(len(old) - len(new))} more"
    if differing:
        labels = ", ".join(dict.fromkeys(differing))
        return (f"differs: the words are the same on all {common} lines, {len(differing)} of {total} numbers are "
                f"not within {tolerance:g} ({labels}); first at {first}")
    return f"the same ({common} lines, numbers within {tolerance:g})"


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
    """How a side ended, short enough for the table: the error's type, not its message."""
    return state.split(":")[0] if state.startswith("raised ") else state


def _shown(value: float | int | None, unit: str = "", digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}{unit}"


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
    output = compare_output(before.output, after.output)
    lines.append(f"  output: {output}")
    random = sorted({*before.random_ops, *after.random_ops})
    if output.startswith("differs") and expected:
        lines += [f"    expected: {why}" for why in expected]
    elif output.startswith("differs") and random:
        lines.append(f"    the script draws random numbers on the device ({', '.join(random[:3])}): cut into other "
                     "graphs they draw other numbers; compare with them off (dropout=0) to check the arithmetic")
    if before.steps == 0:
        lines.append("  (the original has no steps for --steps to count: both ran to their end)")
    return "\n".join(lines)


def trial_record(before: Measures, after: Measures, steps: int, edits: Sequence[str]) -> dict:
    """What `--try` measured, as the trace keeps it (run field fix_trial) for the HTML
    report, the notebook summary and the API."""
    def side(m: Measures) -> dict:
        return {"state": m.state, "steps": m.steps, "executions": m.executions, "per_step": m.per_step,
                "misses": m.misses, "recompiles": m.recompiles if m.steps else None, "max_nodes": m.max_nodes,
                "sync_ms": round(m.sync_ms, 3), "step_ms": None if m.step_ms is None else round(m.step_ms, 3)}

    old, new = _by_key(before.findings), _by_key(after.findings)
    return {
        "steps": steps, "edits": list(edits), "before": side(before), "after": side(after),
        "gone": [group[0].short or group[0].message for key, group in old.items() if key not in new],
        "appeared": [group[0].short or group[0].message for key, group in new.items() if key not in old],
        "output": compare_output(before.output, after.output),
    }


def measured_text(trial: Mapping) -> str:
    """The measurement in one line: "executions per step 2.0 -> 1.0, largest graph ..."."""
    before, after = trial.get("before", {}), trial.get("after", {})
    parts = []
    for key, label, unit in (("per_step", "executions per step", ""), ("recompiles", "recompiles after warm-up", ""),
                             ("max_nodes", "largest graph", " nodes"), ("sync_ms", "sync time", " ms")):
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


def try_patch(info: RunInfo, patched: Mapping[str, str], steps: int, timeout: float | None,
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
        before = run_side(sides[0], info, root, steps, timeout)
        # An original without steps ran to its end: so does the patched copy, for a fair
        # comparison (the patch gives it steps, which the bound would cut short).
        after = run_side(sides[1], info, root, steps if before.steps else None, timeout)
        text = comparison(before, after, expected)
        if keep:
            text += f"\n  the copies and their traces: {work}"
        return text, before, after
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


# -- round after round ----------------------------------------------------------------------
@dataclass(frozen=True)
class Round:
    """One round of --until-clean: the edits it added and the run with every edit so far."""

    edits: list[str]
    measures: Measures
    kept: bool
    why_not: str = ""  # why the round was not kept (worse, output changed, did not end as before)
    output: str = ""  # the output against the original's, where it differs and the round was kept: why


def _worse(new: Measures, old: Measures) -> str:
    """Why a round made things worse than the last kept one, or ""."""
    if new.exit_status != old.exit_status:
        return f"it ended {_ending(new.state)}, not {_ending(old.state)}"
    if new.per_step is not None and old.per_step is not None and new.per_step > old.per_step + 1e-9:
        return f"executions per step {old.per_step:.1f} -> {new.per_step:.1f}"
    if new.steps and old.steps and new.recompiles > old.recompiles:
        return f"recompiles after warm-up {old.recompiles} -> {new.recompiles}"
    return ""


@dataclass(frozen=True)
class RoundEdits:
    """A round's edits, all applied together."""

    summaries: list[str]
    patched: dict[str, str]  # file -> its text with the edits
    alters: list[str]  # how the edits change the script's results, where they do


def until_clean(info: RunInfo, texts: Mapping[str, str], first: RoundEdits, steps: int, timeout: float | None,
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
        before = run_side(original, info, root, steps, timeout)
        kept_texts = dict(texts)
        last = before
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
            measures = run_side(side, info, root, steps if before.steps else None, timeout)
            output = compare_output(before.output, measures.output)
            differs = output.startswith(("differs", "the first"))
            alters = pending.alters
            random = sorted({*before.random_ops, *measures.random_ops})
            excuse = (f"expected: {alters[0]}" if alters else
                      f"the script draws random numbers on the device ({', '.join(random[:2])}): not comparable"
                      if random else "")
            why = _worse(measures, last) or (f"the output {output}" if differs and not excuse else "")
            done.append(Round(pending.summaries, measures, kept=not why, why_not=why,
                              output=f"output {output}; {excuse}" if differs and excuse else ""))
            if why:
                stopped = f"round {number} was not kept: the last kept round is the result"
                break
            kept_texts, last = candidate, measures
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
        lines.append(f"    executions per step {_shown(previous.per_step, digits=1)} -> {_shown(m.per_step, digits=1)}, "
                     f"recompiles after warm-up {_shown(previous.recompiles)} -> {_shown(m.recompiles)}, "
                     f"sync {_shown(previous.sync_ms, ' ms', 1)} -> {_shown(m.sync_ms, ' ms', 1)}, "
                     f"step {_shown(previous.step_ms, ' ms', 1)} -> {_shown(m.step_ms, ' ms', 1)}")
        if done.output:
            lines.append(f"    {done.output[:200]}")
        if done.kept:
            previous = m
    last = kept[-1].measures if kept else before
    lines.append(f"  the whole way ({len(kept)} round{'s' * (len(kept) != 1)} kept):")
    lines.append(comparison(before, last))
    return "\n".join(lines)
