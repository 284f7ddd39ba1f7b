"""Proving a fix: the script's folder copied (never the user's files), the patch applied
to the copy, and both the copy as it was and the patched copy run traced under the
same bound (`lazyviz run --steps N`, or `--iterations N` for a loop without steps), so both
sides are measured on this machine, now.
What is compared: executions per step, recompiles after warm-up, graph size per sync,
step time, the findings, and the script's output (numbers to a tolerance)."""
from __future__ import annotations

import itertools
import os
import re
import statistics
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from lazyviz.analysis.collectives import per_step
from lazyviz.analysis.findings import Finding, RecompileDetails
from lazyviz.analysis.kinds import FindingKind
from lazyviz.analysis.loops import iteration_of
from lazyviz.analysis.recompiles import WARMUP_STEPS, recompiles_after_warmup
from lazyviz.analysis.run import Run
from lazyviz.analysis.units import size_text
from lazyviz.errors import LazyvizError
from lazyviz.fix.output_check import OutputCheck, check_output
from lazyviz.fix.workspace import (
    copy_root,
    import_path,
    in_copy,
    make_copy,
    original_line,
    paths_above,
    work_folder,
)
from lazyviz.trace import TraceError
from lazyviz.trace import open as open_trace
from lazyviz.trace.files import launch_folder, rank_trace
from lazyviz.trace.model import RunInfo, TrialRecord, TrialSide, frame_owner

DEFAULT_STEPS = WARMUP_STEPS + 3  # a few steps past warm-up: recompiles after it show
# Ops that draw random numbers on the device. Cut into other graphs, they draw other
# numbers: word_language_model's losses differ with and without mark_step() through its
# dropout, and agree to the last digit with dropout=0 (measured on torch 2.13's TS backend).
RANDOM_OPS = re.compile(r"dropout|bernoulli|uniform|normal|rand|multinomial")
# A sync time is never called better by less than this, however steady the original's two
# runs were: a shared machine's timings move that much between minutes.
MIN_NOISE = 0.05


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
    # Sync time of each step (each iteration where it has no steps) after warm-up: the
    # run's own spread, part of the noise a gain must exceed.
    sync_samples: tuple[float, ...] = ()
    error: str = ""  # what the script raised, its first line
    # Where it raised, in the original's lines: (file relative to the copied folder, line),
    # line None where the statement is one an edit added.
    crash_at: tuple[str, int | None] | None = None

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
    # Neither steps nor optimizer steps in the original: both sides run to their end (the
    # iterations' flag stays, a guard that never ends an unchanged run).
    whole: bool = False

    @property
    def flags(self) -> list[str]:
        return ["--steps" if self.unit == "steps" else "--iterations", str(self.count)]

    def __str__(self) -> str:
        if self.whole:
            return "run to its end (no steps or optimizer steps to bound it)"
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
    if finding.kind != FindingKind.MISSING_MARK_STEP:
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
    return Bound(max(last + 2, run.info.optimizer_steps + 1 if crashed else 0), "iterations",
                 whole=not run.info.optimizer_steps and not crashed)  # a copy that runs on may step


def steady_sync(sync_ms: Sequence[float], marks: Sequence[int]) -> float | None:
    """Sync time per iteration after warm-up, by optimizer steps: what ran between the
    ends of optimizer steps WARMUP_STEPS + 1 and the last kept, over the iterations
    between. A loop whose graph grows compiles again at every sync and never warms up;
    one cut into steps is cached from then on. Counted by the optimizer's steps it means
    the same on both sides, with steps or without, and a short bounded trial shows the
    rate a whole run pays (its totals are mostly the compiles both sides pay once)."""
    if len(marks) < WARMUP_STEPS + 2 or marks[-1] <= marks[WARMUP_STEPS]:
        return None  # nothing ran between them: the loop's work ran after it (a read past the loop)
    return sum(sync_ms[marks[WARMUP_STEPS]:marks[-1]]) / (len(marks) - 1 - WARMUP_STEPS)


def sync_samples(run: Run) -> tuple[float, ...]:
    """Each step's sync time after warm-up, or each optimizer step's where it has no steps."""
    table = run.executions
    if run.steps > WARMUP_STEPS:
        by_step: dict[int, float] = {}
        for p in range(len(table)):
            if WARMUP_STEPS <= table.step[p] < run.steps:
                by_step[table.step[p]] = by_step.get(table.step[p], 0.0) + table.sync_ms[p]
        return tuple(by_step.values())
    marks = run.info.optimizer_marks
    return tuple(sum(table.sync_ms[a:b]) for a, b in itertools.pairwise(marks[WARMUP_STEPS:]))


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
        other_syncs=sum(1 for p in range(len(table)) if table.kind_at(p).cause not in ("mark_step", "bound")),
        collective_bytes=per_step(run.collectives, steps) if run.collectives else None,
        steady_sync_ms=steady_sync(table.sync_ms, run.info.optimizer_marks), sync_samples=sync_samples(run),
        error=(run.info.error or "").strip().split("\n")[0],
    )


def _crash(info: RunInfo) -> str | None:
    """The script's own line that raised, and the error's type; None when nothing raised."""
    if not info.error:
        return None
    user = _raised_in(info)
    where = f"{Path(user.file).name}:{user.line}" if user else "?"
    return f"{where} ({info.error.split(':')[0]})"


def _raised_in(info: RunInfo):
    """The innermost frame of the script's own that raised (or the innermost of all)."""
    packages = info.capabilities.packages
    user = [f for f in info.error_frames if frame_owner(f.file, packages) is None] or info.error_frames
    return user[-1] if user else None


def _located(measures: Measures, info: RunInfo, side: Side) -> Measures:
    """The crash placed in the original's lines: a copy's line that an edit moved (a helper
    added above it) is the statement it was in the original, so the same statement raising
    again reads as the same crash."""
    measures = replace(measures, findings=[_at_users_line(f, side) for f in measures.findings])
    frame = _raised_in(info) if info.error else None
    if frame is None:
        return measures
    try:
        relative = Path(frame.file).resolve().relative_to(side.folder.resolve()).as_posix()
    except ValueError:  # outside the copy (a library's file): as it is
        return replace(measures, crash_at=(frame.file, frame.line))
    line: int | None = frame.line
    if relative in side.texts:
        original, patched = side.texts[relative]
        line = original_line(original, patched, frame.line)
    kind = info.error.split(":")[0]
    where = f"{Path(relative).name}:{line}" if line is not None else f"{Path(relative).name}, in lines the edit added"
    return replace(measures, crash=f"{where} ({kind})", crash_at=(relative, line))


def _at_users_line(finding: Finding, side: Side) -> Finding:
    """A finding of a copy's run at the user's line (the table's "findings that
    appeared"), where an edit moved it; as it is where the line is the edit's own."""
    frame = finding.frame
    if frame is None or not side.texts:
        return finding
    try:
        relative = Path(frame.file).resolve().relative_to(side.folder.resolve()).as_posix()
    except ValueError:
        return finding
    if relative not in side.texts:
        return finding
    line = original_line(*side.texts[relative], frame.line)
    return finding if line is None else replace(finding, frame=replace(frame, line=line))


def finding_key(finding: Finding) -> tuple[str, str, str]:
    """What a finding is about and in which function, without its line (the patch moves lines).
    A shape change at one step and the same change at several are one finding's two sizes:
    an edit that removes another sync site can turn the one into the other."""
    about = finding.details.subject
    kind = FindingKind.RECOMPILE if finding.kind == FindingKind.DYNAMIC_SHAPE else finding.kind
    return kind, str(about), finding.frame.function if finding.frame else ""


# -- the sides -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Side:
    name: str  # "before", "after", "round 2"
    folder: Path  # the copy
    trace: Path
    # The edited files, relative to the copy: (the original's text, the copy's).
    texts: Mapping[str, tuple[str, str]] = field(default_factory=dict)


def reached_above(info: RunInfo, root: Path) -> list[Path]:
    """What the script reads above the copied folder, from where the user ran it (a run
    from outside the folder reads from there anyway)."""
    cwd = Path(info.cwd)
    return paths_above(root, cwd, info.argv[1:]) if cwd == root or root in cwd.parents else []


def prepared_side(name: str, root: Path, work: Path, originals: Mapping[str, str],
                  patched: Mapping[str, str], above: Sequence[Path] = ()) -> Side:
    """A fresh copy of the folder with the patched files written into it, beside mirrors
    of what the script reads above it."""
    slug = name.replace(" ", "")
    folder = make_copy(root, work / slug, above)
    texts = {}
    for file, text in patched.items():
        target = in_copy(Path(file), root, folder)
        target.write_bytes(text.encode("utf-8"))
        # A file a later round patches first is not among the first round's originals: the
        # user's own file is it (a trial never writes there).
        original = originals[file] if file in originals else _read_original(file)
        texts[target.relative_to(folder).as_posix()] = (original, text)
    return Side(name, folder, work / f"{slug}.trace", texts)


def _read_original(file: str) -> str:
    try:
        return Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


_SIDE_NAMES = {"before": "the original", "after": "the patched copy"}


def run_side(side: Side, info: RunInfo, root: Path, bound: Bound | None, timeout: float | None) -> Measures:
    """Run the copy traced as the original ran: the same argv, from the same folder of
    the copy (or from the original folder when it is outside the copy, with the script
    taken from the copy)."""
    cwd = Path(info.cwd)
    inside = cwd == root or root in cwd.parents
    run_in = in_copy(cwd, root, side.folder) if inside else cwd
    command = [sys.executable, "-m", "lazyviz", "run", "--no-tui", "--backend", info.backend,
               "--capture", info.capture if info.capture in ("full", "light") else "full", "-o", str(side.trace)]
    if bound is not None:
        command += bound.flags
    script = None if info.module else in_copy(Path(cwd, info.script).resolve(), root, side.folder)
    command += ["-m", info.argv[0]] if script is None else [str(script)]
    command += info.argv[1:]
    path = import_path(side.folder, list(side.texts), run_in if script is None else script.parent)
    env = {**os.environ, **({"PYTHONPATH": path} if path else {})}
    try:
        done = subprocess.run(command, cwd=run_in, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False, env=env)
    except subprocess.TimeoutExpired:
        if bound is None or bound.whole:
            # Nothing bounds a run without steps or optimizer steps but its end: not a failure
            # of the trial, an answer it cannot give within the time given (exit 0).
            who = _SIDE_NAMES.get(side.name, f"the {side.name} run")
            raise LazyvizError(
                f"no trial: {who} did not end within --timeout {timeout:.0f} s, and the original has no "
                "steps (mark_step()) and no optimizer steps to stop both sides at the same point, so they can only be "
                "compared run to their end: raise --timeout, or bound the loop yourself (a mark_step() in it lets "
                "--steps N stop both sides alike); the diff above stands as proposed", exit_status=0) from None
        # --steps bounds a run with steps; one bounded by iterations has only --timeout to give.
        lower = "lower --steps or " if bound.unit == "steps" else ""
        raise LazyvizError(f"the {side.name} run took longer than {timeout:.0f} s: {lower}raise --timeout "
                           f"(it ran {bound})") from None
    # Where torch_xla.launch ran the steps in processes of their own, the first one's trace.
    launched = rank_trace(launch_folder(side.trace), 0)
    try:
        with open_trace(launched if launched.exists() else side.trace) as trace:
            run = Run(trace).analysed()
            return _located(measure(run, done.stdout), run.info, side)
    except TraceError:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise LazyvizError(f"the {side.name} run recorded no trace ({last})") from None


def broken_trial(before: Measures, recorded_executions: int | None) -> str:
    """Why the original, run from the copy, says nothing about the edits: it raised before
    its first graph where the user's run did not (a path the copy does not reach, a
    download): "" where it ran as the user's did."""
    if not before.crash or before.executions or not recorded_executions:
        return ""
    return (f"the trial is broken: the original, run from a copy, raised {before.error[:160]!r} at {before.crash} "
            f"before its first graph, where your run ran {recorded_executions} graph"
            f"{'s' * (recorded_executions != 1)}: the copy does not see what your run saw (a file outside the "
            "copied folder, an environment variable); nothing is measured")


# -- comparing -----------------------------------------------------------------------------
def ran_further(before: Measures, after: Measures) -> bool:
    """Did the copy get further than the original before it raised: more optimizer steps,
    steps or executions? (A crash in the first forward fixed, the next one at the save.)"""
    return (after.iterations, after.steps, after.executions) > (before.iterations, before.steps, before.executions)


def _progress(m: Measures) -> str:
    if m.iterations:
        return f"{m.iterations} optimizer steps"
    return f"{m.steps} steps" if m.steps else f"{m.executions} executions"


def _gist(error: str) -> str:
    """An error's first line without its numbers (sizes, addresses): what it says."""
    return re.sub(r"0x[0-9a-fA-F]+|\d+", "#", error)


def same_crash(before: Measures, after: Measures) -> bool:
    """The same statement raising the same error. A different error there is the edit at
    work (time_sequence_prediction: the split's pieces fixed, the LSTMCell's view next)."""
    return bool(before.crash) and after.crash == before.crash and _gist(after.error) == _gist(before.error)


def crash_verdict(before: Measures, after: Measures) -> tuple[bool, str]:
    """Did the patched copy end as the original did, or better? (ok, a sentence saying
    how, "" when both ended alike). A crash that is gone is the proof: the copy running on
    where the original raised is the point of the edit."""
    if before.crash and not after.crash and after.exit_status == 0:
        ran = "ran on to the bound" if after.state.startswith("stopped after") else "ran to its end"
        return True, f"the crash at {before.crash} is gone; the copy {ran}"
    if same_crash(before, after):
        return False, (f"the edit did not fix the crash: the copy raised the same error in the same statement "
                       f"({before.crash})")
    if before.crash and after.crash == before.crash:
        further = f" after running further ({_progress(after)})" if ran_further(before, after) else ""
        return False, (f"the error at {before.crash} is gone, but the same statement raised another{further}: "
                       f"{after.error[:160]}")
    if before.crash and after.crash and after.crash != before.crash:
        further = f" further on ({_progress(after)})" if ran_further(before, after) else ""
        return False, f"the crash at {before.crash} is gone, but the copy crashed{further} at {after.crash}"
    if after.exit_status != before.exit_status:
        return False, f"the patched copy did not end as the original did: {after.state}, not {before.state}"
    return True, ""


def by_key(findings: list[Finding]) -> dict[tuple[str, str, str], list[Finding]]:
    grouped: dict[tuple[str, str, str], list[Finding]] = {}
    for finding in findings:
        grouped.setdefault(finding_key(finding), []).append(finding)
    return grouped


def _finding_line(group: list[Finding], note: str = "") -> str:
    first = group[0]
    where = f" [{first.frame.site.rpartition('/')[2]}]" if first.frame else ""
    more = f" (and {len(group) - 1} more like it)" if len(group) > 1 else ""
    return f"    {first.severity}: {(first.short or first.message)[:150]}{where}{more}{note}"


def compiles_per_work(m: Measures, other: Measures) -> float:
    """Cache misses per unit of work both sides did: per optimizer step where both took
    some, else per run (a generation loop, run to its end on both sides)."""
    return m.misses / m.iterations if m.iterations and other.iterations else float(m.misses)


def compiled_as_often(before: Measures, after: Measures) -> bool:
    """The copy compiled no more than the original for the same work: a recompile finding
    that appears in it was the original's too, which had no steps to show it in (a
    generation loop whose input grows a token at a time compiles per token either way)."""
    return compiles_per_work(after, before) <= compiles_per_work(before, after) + 1e-9


def _appeared_note(group: list[Finding], before: Measures, after: Measures) -> str:
    if isinstance(group[0].details, RecompileDetails) and compiled_as_often(before, after):
        return (f" (not new: the original compiled as often, cache misses {before.misses:,} -> {after.misses:,}; "
                "it had no steps to show where)")
    return ""


def ending_of(state: str) -> str:
    """How a side ended, short enough for the table: the error's type, not its message;
    "at the bound" where the trial's bound ended it (the heading says which)."""
    if state.endswith((", as asked (--steps)", ", as asked (--iterations)")):
        return "at the bound"
    return state.split(":")[0] if state.startswith("raised ") else state


def shown(value: float | int | None, unit: str = "", digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}{unit}"


def per(total: float, count: int) -> float | None:
    return total / count if count else None


def comparison(before: Measures, after: Measures, expected: Sequence[str] = (),
               checked: OutputCheck | None = None) -> str:
    """Before and after side by side; expected: how the edits change the script's results;
    checked: the output's check, where the caller made it (with the original's second run)."""
    rows = [
        ("exit", ending_of(before.state), ending_of(after.state)),
        ("steps", shown(before.steps), shown(after.steps)),
        ("executions", shown(before.executions), shown(after.executions)),
        ("executions per step", shown(before.per_step, digits=1), shown(after.per_step, digits=1)),
        ("cache misses", shown(before.misses), shown(after.misses)),
        ("recompiles after warm-up", shown(before.recompiles if before.steps else None),
         shown(after.recompiles if after.steps else None)),
        ("largest graph (nodes)", shown(before.max_nodes), shown(after.max_nodes)),
        ("sync time", shown(before.sync_ms, " ms", 1), shown(after.sync_ms, " ms", 1)),
        ("step time (median)", shown(before.step_ms, " ms", 1), shown(after.step_ms, " ms", 1)),
    ]
    if before.collective_bytes is not None or after.collective_bytes is not None:  # SPMD
        rows.append(("collective bytes per step", *(size_text(m.collective_bytes or 0) for m in (before, after))))
    steady = before.steady_sync_ms is not None or after.steady_sync_ms is not None
    if by_iteration(before, after):  # a loop without steps: like with like, per iteration
        rows[2:2] = [("iterations (optimizer steps)", shown(before.iterations), shown(after.iterations))]
        rows[4:4] = [("executions per iteration", shown(before.per_iteration, digits=1),
                      shown(after.per_iteration, digits=1)),
                     ("sync time per iteration", shown(per(before.sync_ms, before.iterations), " ms", 1),
                      shown(per(after.sync_ms, after.iterations), " ms", 1)),
                     *([("  after warm-up", shown(before.steady_sync_ms, " ms", 1),
                         shown(after.steady_sync_ms, " ms", 1))] if steady else [])]
    width = max(len(r[0]) for r in rows)
    left = max(len(r[1]) for r in rows + [("", "before", "")])
    lines = [f"  {'':{width}}  {'before':>{left}}  after"]
    lines += [f"  {label:{width}}  {old:>{left}}  {new}" for label, old, new in rows]
    old_keys, new_keys = by_key(before.findings), by_key(after.findings)
    gone = [group for key, group in old_keys.items() if key not in new_keys]
    appeared = [group for key, group in new_keys.items() if key not in old_keys]
    kept = [group for key, group in new_keys.items() if key in old_keys]
    for title, groups in (("findings gone", gone), ("findings that appeared", appeared), ("findings left", kept)):
        if groups:
            lines.append(f"  {title}:")
            lines += [_finding_line(group, _appeared_note(group, before, after) if groups is appeared else "")
                      for group in groups]
    ok, ending = crash_verdict(before, after)
    if ending:
        lines.insert(0, f"  {ending}")
    if checked is None:
        checked = check_output(before.output, after.output, original_crashed=bool(before.crash and ok))
    output = checked.verdict
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
    elif whole_runs(before, after):
        lines.append(f"  (both ran to their end, with {before.steps} and {after.steps} steps: the edit made steps of "
                     "a loop that had none, so per step they count other work; compare the totals)")
    return "\n".join(lines)


def trial_record(before: Measures, after: Measures, bound: Bound, edits: Sequence[str],
                 checked: OutputCheck | None = None) -> TrialRecord:
    """What `--try` measured, as the trace keeps it (RunInfo.fix_trial) for the HTML
    report, the notebook summary and the API."""
    def side(m: Measures) -> TrialSide:
        return TrialSide(m.state, m.steps, m.executions, m.per_step, m.misses, m.recompiles if m.steps else None,
                         m.max_nodes, m.iterations, m.per_iteration, m.sync_ms, m.step_ms, m.steady_sync_ms,
                         m.collective_bytes)

    old, new = by_key(before.findings), by_key(after.findings)
    return TrialRecord(
        bound.count, str(bound), tuple(edits), side(before), side(after),
        tuple(group[0].short or group[0].message for key, group in old.items() if key not in new),
        tuple(group[0].short or group[0].message for key, group in new.items() if key not in old),
        (checked or check_output(before.output, after.output, original_crashed=bool(before.crash))).verdict,
        crash_verdict(before, after)[1],
    )


class Original:
    """The unmodified original, run on a copy under the trial's bound: its first run, and
    a second only when a verdict needs what moves between two runs of the same code (the
    printed measurements, the noise of its sync time)."""

    def __init__(self, info: RunInfo, root: Path, work: Path, bound: Bound, timeout: float | None,
                 recorded_executions: int | None = None) -> None:
        self.above = reached_above(info, root)
        self._start = (info, root, work, bound, timeout)
        self.first = run_side(prepared_side("before", root, work, {}, {}, self.above), info, root, bound, timeout)
        problem = broken_trial(self.first, recorded_executions)
        if problem:
            raise LazyvizError(problem)
        self._again: Measures | None = None

    def again(self) -> Measures:
        if self._again is None:
            info, root, work, bound, timeout = self._start
            self._again = run_side(prepared_side("before again", root, work, {}, {}, self.above), info, root, bound,
                                   timeout)
        return self._again

    def output_check(self, after: Measures, reference: Measures | None = None) -> OutputCheck:
        """The copy's output against the reference's (the original's, or the first copy that
        ran where the original crashed). Numbers that differ are checked against a second
        run of the original: those that move there too are measurements or random draws."""
        reference = reference or self.first
        crashed = bool(reference.crash)  # then only what it printed before its crash is compared
        random = sorted({*reference.random_ops, *after.random_ops})
        checked = check_output(reference.output, after.output, original_crashed=crashed, random_ops=random)
        if not checked.same and reference is self.first and checked.verdict.startswith("differs: the words"):
            checked = check_output(reference.output, after.output, original_crashed=crashed,
                                   again=self.again().output, random_ops=random)
        return checked

    def noise(self, value: Callable[[Measures], float | None], last: Measures | None = None) -> tuple[float, str]:
        """How much a sync time moves with nothing changed, relative: the original's two
        runs (where it ran: one that crashed has no sync time to compare), the spread from
        step to step of the run compared against (`last`, else the original: twice the
        standard error of the mean), and never under MIN_NOISE; with a phrase saying which."""
        two_runs = 0.0
        if not self.first.crash:
            first, second = value(self.first), value(self.again())
            two_runs = abs(first - second) / min(first, second) if first and second else 0.0
        samples = (last or self.first).sync_samples
        spread = (2 * statistics.stdev(samples) / statistics.fmean(samples) / len(samples) ** 0.5
                  if len(samples) >= 3 and statistics.fmean(samples) > 0 else 0.0)
        relative = max(two_runs, spread, MIN_NOISE)
        how = ("the original's two runs" if relative == two_runs else
               "the spread from step to step" if relative == spread else "the floor for a shared machine")
        return relative, how


def try_patch(info: RunInfo, patched: Mapping[str, str], bound: Bound, timeout: float | None,
              keep: bool = False, expected: Sequence[str] = (), originals: Mapping[str, str] | None = None,
              recorded_executions: int | None = None) -> tuple[str, Measures, Measures, OutputCheck]:
    """Copy, patch the copy, run both sides; (the comparison, before, after, the output's check).
    originals: the patched files' texts as they are (read from the files where not given)."""
    root = copy_root(info, list(patched))
    with work_folder(keep) as work:
        if originals is None:
            originals = {file: Path(file).read_bytes().decode("utf-8") if Path(file).exists() else ""
                         for file in patched}
        original = Original(info, root, work, bound, timeout, recorded_executions)
        before = original.first
        after = run_side(prepared_side("after", root, work, originals, patched, original.above), info, root,
                         after_bound(before, bound), timeout)
        checked = original.output_check(after)
        text = comparison(before, after, expected, checked)
        if keep:
            text += f"\n  the copies and their traces: {work}"
        return text, before, after, checked


def after_bound(before: Measures, bound: Bound) -> Bound | None:
    """The patched side's bound: the original's. An original bounded by steps that had
    none, or that ended on its own before the bound, ran to its end, and so does the copy
    (an edit that gives a loop after the steps steps of its own, a generation's tokens,
    would cut it short); iterations are counted the same with or without steps."""
    if bound.unit == "iterations":
        return bound
    # Only an original that exited on its own: one that crashed keeps the copy to the bound
    # (a fixed crash at step 3 of 1,000 would otherwise run the other 997).
    ended = not at_the_bound(before) and not before.crash and before.exit_status == 0
    return bound if before.steps and not ended else None


def at_the_bound(m: Measures) -> bool:
    return m.state.endswith((", as asked (--steps)", ", as asked (--iterations)"))


def whole_runs(old: Measures, new: Measures) -> bool:
    """Both sides ran to their end with other numbers of steps (the edit made steps of a
    loop that had none: a generation's tokens): per step they count other work, so like
    is compared with like only in the runs' totals."""
    return old.steps != new.steps and not at_the_bound(old) and not at_the_bound(new) \
        and not old.crash and not new.crash and not by_iteration(old, new)
