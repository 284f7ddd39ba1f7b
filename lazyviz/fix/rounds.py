"""`fix --try --until-clean`: round after round on fresh copies, each round the edits
lazyviz proposes for the last kept run's findings. A round is kept only when it
measurably helps: a crash gone (the statement, not a line number an edit moved), a
finding gone, fewer executions or recompiles, or less sync time by more than the run's own
noise. The result reads as a reviewer would: each kept edit once, what its round changed
and which findings it fixed, and the rounds not kept with why."""
from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from lazyviz.analysis.findings import Finding, FindingKind, RecompileDetails
from lazyviz.analysis.run import Run
from lazyviz.fix.output_check import OutputCheck
from lazyviz.fix.source import Proposal, Source, apply_changes, read_source, read_texts
from lazyviz.fix.trial import (
    Bound,
    Measures,
    Original,
    Side,
    after_bound,
    by_iteration,
    by_key,
    comparison,
    compiled_as_often,
    crash_verdict,
    ending_of,
    per,
    prepared_side,
    ran_further,
    run_side,
    same_crash,
    shown,
    whole_runs,
)
from lazyviz.fix.workspace import copy_root, original_line, work_folder
from lazyviz.trace import open as open_trace
from lazyviz.trace.model import RunInfo

REPEATED_RECOMPILES = 3  # recompiles of one finding before a round that brought them is worse


@dataclass(frozen=True)
class RoundEdits:
    """A round's edits, all applied together."""

    summaries: list[str]
    patched: dict[str, str]  # file -> its text with the edits
    alters: list[str]  # how the edits change the script's results, where they do
    # Findings whose edit the code already has (a kept round made it): they outlived it.
    outlived: list[str] = field(default_factory=list)
    # An edit of the round's is for the crash: the same crash again is then its failure;
    # otherwise the crash is not the round's to fix, and its other measures judge it.
    for_crash: bool = True


def round_edits(proposed: Sequence[Proposal]) -> RoundEdits | None:
    """The edits of these proposals as one round, the files they touch read as they are
    now; None where they hold neither an edit nor a finding whose edit is in already."""
    changes = [c for p in proposed for c in p.changes]
    outlived = [f"{p.finding.short or p.finding.message} ({p.summary})" for p in proposed if p.outlived]
    if not changes:
        return RoundEdits([], {}, [], outlived) if outlived else None
    files = read_texts(c.file for c in changes)
    return RoundEdits([p.summary for p in proposed if p.changes], apply_changes(files, changes),
                      [p.alters_results for p in proposed if p.changes and p.alters_results], outlived,
                      any(p.changes and p.finding.kind in (FindingKind.CRASH, FindingKind.FAILED_EXECUTION)
                          for p in proposed))


@dataclass(frozen=True)
class Round:
    """One round of --until-clean: the edits it added and the run with every edit so far."""

    edits: list[str]
    measures: Measures
    kept: bool
    why_not: str = ""  # why the round was not kept (worse, no measured gain, output changed)
    output: str = ""  # what the round showed beyond the counts: the output and why it may differ
    gains: list[str] = field(default_factory=list)  # what it measurably improved over the last kept run
    fixed: list[str] = field(default_factory=list)  # the findings gone with it


def _worse(new: Measures, old: Measures, for_crash: bool = True) -> str:
    """Why a round made things worse than the last kept one, or ""."""
    ok, ending = crash_verdict(old, new)
    if not ok and old.crash and new.crash and ran_further(old, new) and not same_crash(old, new):
        return ""  # one crash traded for a later one: the next round's edit is for that one
    if not ok and not for_crash and same_crash(old, new) and new.exit_status == old.exit_status:
        ok, ending = True, ""  # the same crash, which none of the round's edits was for: judged on the rest
    if not ok:
        return ending if old.crash else f"it ended {ending_of(new.state)}, not {ending_of(old.state)}"
    if ending:  # the crash is gone: whatever the counts, the copy now runs
        return ""
    if whole_runs(old, new):
        if new.executions > old.executions:
            return f"executions over the whole run {old.executions:,} -> {new.executions:,}"
        if new.misses > old.misses:
            return f"cache misses over the whole run {old.misses:,} -> {new.misses:,}"
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
    # A recompile the round brought again and again (mnist_forward_forward's mark_step()
    # in a loop that indexes by its counter: a graph per index, every step): worse,
    # whatever else moved. One new graph (a step that also prints) is the cut's shape.
    old_keys = by_key(old.findings)
    brought = [group[0] for key, group in by_key(new.findings).items()
               if key not in old_keys and _again_and_again(group[0])]
    # Not brought where the copy compiles no more for the same work: the recompiles were
    # there before, in a run without steps to show them (a generation loop's growing input).
    if brought and not compiled_as_often(old, new):
        return f"it brought a recompile: {(brought[0].short or brought[0].message)[:150]}"
    return ""


def _again_and_again(finding: Finding) -> bool:
    """A recompile at step after step (mnist_forward_forward's: 62 of 64 steps), not one
    change at one step (imagenet's first cut step, 2 recompiles at 1 of 6 steps)."""
    details = finding.details
    return isinstance(details, RecompileDetails) and details.recompiles >= REPEATED_RECOMPILES \
        and (details.steps is None or details.steps >= 2)


def sync_rate(m: Measures, per_iteration: bool, steady: bool, whole: bool = False) -> float | None:
    """The sync time a round is judged by: per iteration (after warm-up where both sides
    have one) for a loop without steps, per step after warm-up, or the run's total."""
    if per_iteration:
        return m.steady_sync_ms if steady else per(m.sync_ms, m.iterations)
    if m.steps and m.sync_samples and not whole:
        return statistics.fmean(m.sync_samples)
    return m.sync_ms


def _sync_label(per_iteration: bool, steady: bool, m: Measures, whole: bool = False) -> str:
    if per_iteration:
        return "sync per iteration" + " after warm-up" * steady
    return "sync per step after warm-up" if m.steps and m.sync_samples and not whole else "sync time"


def gains(new: Measures, old: Measures, original: Original) -> tuple[list[str], list[str], str]:
    """What a round measurably improved over the last kept run: (gains, the findings gone,
    and where the sync time moved less than the noise, a phrase saying so)."""
    found: list[str] = []
    ok, ending = crash_verdict(old, new)
    if ok and ending:
        found.append(ending)
    elif old.crash and new.crash and not same_crash(old, new) and ran_further(old, new):
        found.append(ending)  # "... is gone, but the copy crashed further on (4 optimizer steps) at ..."
    old_keys, new_keys = by_key(old.findings), by_key(new.findings)
    fixed = [group[0].short or group[0].message for key, group in old_keys.items() if key not in new_keys]
    if fixed:
        found.append(f"{len(fixed)} finding{'s' * (len(fixed) != 1)} gone")
    per_iteration = by_iteration(original.first, new)
    whole = whole_runs(old, new)
    if whole:
        found += [f"{what} over the whole run {a:,} -> {b:,}" for what, a, b in
                  (("executions", old.executions, new.executions), ("cache misses", old.misses, new.misses)) if b < a]
    elif not per_iteration and new.per_step is not None and old.per_step is not None and new.per_step < old.per_step:
        found.append(f"executions per step {old.per_step:.1f} -> {new.per_step:.1f}")
    if per_iteration and new.iterations and old.iterations and \
            new.other_syncs / new.iterations < old.other_syncs / old.iterations:
        found.append(f"syncs other than the step's per iteration {old.other_syncs / old.iterations:.1f} -> "
                     f"{new.other_syncs / new.iterations:.1f}")
    if new.steps and old.steps and not whole and new.recompiles < old.recompiles:
        found.append(f"recompiles after warm-up {old.recompiles} -> {new.recompiles}")
    steady = old.steady_sync_ms is not None and new.steady_sync_ms is not None
    label = _sync_label(per_iteration, steady, new, whole)
    a, b = sync_rate(old, per_iteration, steady, whole), sync_rate(new, per_iteration, steady, whole)
    within = ""
    if a and b is not None and b < a and not (ok and ending):
        noise, how = original.noise(lambda m: sync_rate(m, per_iteration, steady, whole), old)
        moved = f"{label} {a:,.1f} -> {b:,.1f} ms"
        if (a - b) / a > noise:
            found.append(f"{moved} (beyond the noise of ±{noise:.0%}, {how})")
        else:
            within = f"{moved} is within the run's noise of ±{noise:.0%} ({how})"
    return found, fixed, within


def until_clean(info: RunInfo, texts: Mapping[str, str], first: RoundEdits, bound: Bound, timeout: float | None,
                rounds: int, keep: bool = False,
                propose_next: Callable[[Run, Callable[[str], Source | None]], RoundEdits | None] | None = None,
                recorded_executions: int | None = None) -> tuple[str, Measures, list[Round], dict[str, str]]:
    """--until-clean: the first round's edits, then, round after round, the edits lazyviz
    proposes for the last kept run's findings, each round run on a fresh copy with every
    edit kept so far. Stops when no edit is left, a round is not kept (it made things
    worse, changed the output, or gained nothing beyond the noise), or after `rounds`. An
    output that differs is kept where an edit says it changes results (drop_last) or the
    script draws random numbers on the device. propose_next(run, read) gives a kept run's
    edits with files in its copy, read by `read`, which says the user's lines. Returns
    (the table, the original's measures, the rounds, the files' texts with every kept edit)."""
    root = copy_root(info, list(texts))
    with work_folder(keep) as work:
        original = Original(info, root, work, bound, timeout, recorded_executions)
        before = original.first
        kept_texts = dict(texts)
        last = reference = before
        done: list[Round] = []
        outlived: list[str] = []
        pending: RoundEdits | None = first
        stopped = f"after {rounds} round{'s' * (rounds != 1)} (--rounds)"
        for number in range(1, rounds + 1):
            if pending is not None:
                outlived += [o for o in pending.outlived if o not in outlived]
            if pending is None or not pending.patched or all(kept_texts.get(f) == t for f, t in pending.patched.items()):
                stopped = "no edit left for the findings left"
                break
            candidate = {**kept_texts, **pending.patched}
            side = prepared_side(f"round {number}", root, work, texts, {f: t for f, t in candidate.items()
                                                                         if t != texts.get(f)}, original.above)
            measures = run_side(side, info, root, after_bound(before, bound), timeout)
            done.append(_judged(pending, measures, last, reference, original))
            if not done[-1].kept:
                stopped = f"round {number} was not kept: the last kept round is the result"
                break
            kept_texts, last = candidate, measures
            if reference.crash and not measures.crash:  # the first copy that runs: what later rounds print against
                reference = measures
            pending = None
            if propose_next is not None:
                with open_trace(side.trace) as trace:
                    proposed = propose_next(Run(trace).analysed(), _reader(side))
                outside = [f for f in (proposed.patched if proposed else {}) if not Path(f).is_relative_to(side.folder)]
                if outside:  # a module imported from outside the copied folder: not this round's to edit
                    stopped = f"the next edits are for {outside[0]}, outside the copied folder {root}"
                    break
                if proposed is not None:  # the copy's paths back to the user's files
                    pending = RoundEdits(proposed.summaries, {str(root / Path(file).relative_to(side.folder)): text
                                                              for file, text in proposed.patched.items()},
                                         proposed.alters, proposed.outlived, proposed.for_crash)
        if pending is not None and not pending.patched:
            outlived += [o for o in pending.outlived if o not in outlived]
        if pending is None and done and done[-1].kept and not stopped.startswith("the next edits"):
            stopped = "no edit left for the findings left"
        kept = [r.measures for r in done if r.kept]
        whole = original.output_check(kept[-1]) if kept else None
        text = rounds_table(before, done, outlived, whole) + f"\n  stopped: {stopped}"
        if keep:
            text += f"\n  the copies and their traces: {work}"
        return text, before, done, kept_texts


def _reader(side: Side) -> Callable[[str], Source | None]:
    """Reads the files of a round's copy as sources whose lines are said as the user's own
    (`main.py:258`, not the copy's 308 below the helpers an earlier round added)."""
    def read(path: str) -> Source | None:
        source = read_source(path)
        if source is not None and Path(path).is_relative_to(side.folder):
            pair = side.texts.get(Path(path).relative_to(side.folder).as_posix())
            if pair is not None:
                source.origin = partial(original_line, pair[0], source.text)
        return source
    return read


def _judged(pending: RoundEdits, measures: Measures, last: Measures, reference: Measures,
            original: Original) -> Round:
    """A round against the last kept run: not kept when it made things worse, changed the
    output (against the reference's: the original's, or the first copy that ran where it
    crashed) without an excuse, or gained nothing measurable."""
    checked = original.output_check(measures, reference)
    output, differs = checked.verdict, not checked.same
    random = sorted({*reference.random_ops, *measures.random_ops})
    excuse = (f"expected: {pending.alters[0]}" if pending.alters else
              f"the script draws random numbers on the device ({', '.join(random[:2])}): not comparable"
              if random else "")
    why = _worse(measures, last, pending.for_crash) or (f"the output {output}" if differs and not excuse else "")
    found, fixed, within = ([], [], "") if why else gains(measures, last, original)
    if not why and not found:
        why = f"no measured gain: {within}" if within else "no measured gain (executions, recompiles, " \
                                                           "sync time and findings as before)"
    said = []
    if differs and excuse:
        said.append(f"output {output}; {excuse}")
    elif not differs and checked.left_out:
        said.append(f"output {output}")
    return Round(pending.summaries, measures, kept=not why, why_not=why, output="; ".join(said), gains=found,
                 fixed=fixed)


def _round_counts(previous: Measures, m: Measures, before: Measures) -> str:
    if by_iteration(before, m):  # a loop without steps: per iteration, after warm-up where it has one
        steady = previous.steady_sync_ms is not None or m.steady_sync_ms is not None
        old, new = ((previous.steady_sync_ms, m.steady_sync_ms) if steady else
                    (per(previous.sync_ms, previous.iterations), per(m.sync_ms, m.iterations)))
        return (f"executions per iteration {shown(previous.per_iteration, digits=1)} -> "
                f"{shown(m.per_iteration, digits=1)}, sync per iteration{' after warm-up' * steady} "
                f"{shown(old, ' ms', 1)} -> {shown(new, ' ms', 1)}, largest graph "
                f"{shown(previous.max_nodes)} -> {shown(m.max_nodes)} nodes")
    return (f"executions per step {shown(previous.per_step, digits=1)} -> {shown(m.per_step, digits=1)}, "
            f"recompiles after warm-up {shown(previous.recompiles)} -> {shown(m.recompiles)}, "
            f"sync {shown(previous.sync_ms, ' ms', 1)} -> {shown(m.sync_ms, ' ms', 1)}, "
            f"step {shown(previous.step_ms, ' ms', 1)} -> {shown(m.step_ms, ' ms', 1)}")


def rounds_table(before: Measures, rounds: Sequence[Round], outlived: Sequence[str] = (),
                 checked: OutputCheck | None = None) -> str:
    """Each round's edits and what they changed, the whole way from the first run to the
    last kept one, then the kept edits as a reviewer reads them."""
    kept = [r for r in rounds if r.kept]
    lines = []
    previous = before
    for number, done in enumerate(rounds, 1):
        state = f"kept: {'; '.join(done.gains)}" if done.kept else f"not kept: {done.why_not}"
        lines.append(f"  round {number} ({state[:400]}):")
        lines += [f"    edit: {summary[:150]}" for summary in done.edits]
        lines.append(f"    {_round_counts(previous, done.measures, before)}")
        if done.output:
            lines.append(f"    {done.output[:300]}")
        if done.kept:
            previous = done.measures
    last = kept[-1].measures if kept else before
    lines.append(f"  the whole way ({len(kept)} round{'s' * (len(kept) != 1)} kept):")
    lines.append(comparison(before, last, checked=checked))
    if kept:
        lines.append("  the edits kept, each once, with what its round measured:")
        for number, done in enumerate(rounds, 1):
            if done.kept:
                for summary in done.edits:
                    lines.append(f"    round {number}: {summary[:150]}")
                lines.append(f"      measured: {'; '.join(done.gains)[:300]}")
                lines += [f"      fixed: {short[:150]}" for short in done.fixed]
    for finding in outlived:
        lines.append(f"  the finding outlived its edit: {finding[:300]}")
    return "\n".join(lines)
