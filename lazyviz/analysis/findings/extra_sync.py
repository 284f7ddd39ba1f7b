"""A sync outside the step (`.item()`, `print(loss)`, `if tensor:`) that forces an execution
of its own at every step: where, how often, and what to read instead."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from lazyviz.analysis.findings._shared import in_test
from lazyviz.analysis.findings.base import Details, Finding, FindingKind, KindInfo, RunFacts
from lazyviz.analysis.library import Stacks, library_fix, library_line, no_stacks
from lazyviz.analysis.recompiles import WARMUP_STEPS
from lazyviz.analysis.units import rounded
from lazyviz.trace.model import EAGER_FOUND, PENDING_INPUTS, TS_NAMES, Execution
from lazyviz.trace.table import ExecutionTable


@dataclass(frozen=True, kw_only=True)
class ExtraSyncDetails(Details):
    cause: str  # what synced: item, print, tolist, cpu, bool, ...
    count: int  # its executions in steps
    steps: int  # the steps it synced in
    ms_per_step: float
    library_line: str | None = None  # the library's line that reads, reached through the user's call
    call: str | None = None  # that call

    @property
    def subject(self) -> str:
        return self.cause


SYNC_FIXES = {
    "item": "log every N steps, or read the value after the step with "
            "{step_closure} (it runs after mark_step, without an extra execution)",
    "tolist": "convert every N steps, or in a step closure ({step_closure})",
    "print": "print every N steps, or from a step closure ({step_closure})",
    "cpu": "copy to the host every N steps, or after {mark_step} when the values are ready anyway",
    "bool": "keep the decision on the device (torch.where) instead of `if tensor:`; "
            "data-dependent control flow forces an execution each time",
    "other": "an execution outside mark_step (torch.equal, a data-dependent op, an explicit sync); "
             "move it out of the step or make it device-side",
}

# For an op the user calls in their own code: an equivalent from ops that lower. Each lowers
# on torch 2.13's TorchScript backend and computes the same values: tests/test_fallback_fixes.py


def extra_sync_findings(executions: Sequence[Execution], steps: int,
                        names: Mapping[str, str] = TS_NAMES, stacks: Stacks = no_stacks) -> list[Finding]:
    if steps == 0:
        return []  # no mark_step at all: nothing is "extra"; growth_findings says why
    table = ExecutionTable.of(executions)
    # Under pytest, per test: a suite's report names the tests that sync more.
    groups = table.kinds_by(lambda kind: None if kind.cause in ("mark_step", "fallback", "bound")
                            else (kind.context, kind.cause, kind.site))
    findings = []
    step_ends = table.where(lambda kind: kind.cause == "mark_step")
    first_step_end = step_ends[0] if step_ends else len(table)
    for (context, cause, _), numbers in groups.items():
        # After the last mark_step() no step runs (an evaluation loop, the final print):
        # its reads are the script's results, not extra syncs in a step.
        positions = [p for p in table.merged(numbers) if table.step[p] < steps]
        if cause == "eager":  # those before the first step's graph are set-up: moving the model in
            positions = [p for p in positions if p > first_step_end]
        if not positions or positions[-1] < first_step_end:
            continue  # only before the first step's graph: set-up (xm.broadcast_master_param)
        steps_with = len(set(map(table.step.__getitem__, positions)))
        per_step = len(positions) / steps_with
        ms_per_step = _steady_ms(table, positions, steps)
        first = table.kinds[numbers[0]]
        what = first.detail or cause
        fix = SYNC_FIXES.get(cause, "").format(**names)
        library = library_line(stacks(first.stack_id), stacks.packages)
        details = ExtraSyncDetails(cause=cause, count=len(positions), steps=steps_with,
                                   ms_per_step=round(ms_per_step, 3))
        if library is not None and not what.endswith(" in a step closure"):
            # The read is in a library's code, reached through the user's call: their line has no `if` to change.
            through = f" inside {first.call}()" if first.call else ""
            what = f"{what}{through} at {library}"
            fix = library_fix(library) or (
                f"the read is {library.package}'s, not in your code ({library}): no edit of your line removes it; "
                f"look for an option of {first.call or library.package + ' call'} that avoids it, or it costs "
                f"{ms_per_step:.2f} ms every step")
            details = replace(details, library_line=f"{library.path}:{library.frame.line}", call=first.call)
        elif what.endswith(" in a step closure"):
            # A closure reads what the step computed for free: an execution there ran new ops.
            fix = ("the step closure computes something new on the device before it reads it (torch.isnan(loss)"
                   ".item()): compute it in the step, so the closure only reads a result, or read the value first "
                   "and compute on the host (math.isnan(loss.item()))")
        elif cause == "eager":
            # Eager mode runs each op outside the compiled function at once, a graph of its own.
            compiled = names.get("compile", "torch_xla.compile")
            findings.append(Finding(
                FindingKind.EXTRA_SYNC, "warning" if steps_with >= max(2, steps // 2) else "info",
                f"{in_test(context)}{rounded(per_step)} eager execution{'s' if per_step != 1 else ''} per step in "
                f"{steps_with} of {max(steps, steps_with)} steps ({ms_per_step:.2f} ms per step): in eager mode an op "
                f"outside {compiled}() runs at once, as a graph of its own"
                + (" (found at the next call that syncs: full capture names the line that built them)"
                   if first.detail == EAGER_FOUND else ""),
                first.frame, table.indices(positions),
                "make this step's tensors inside the compiled function (a random tensor with device=... there), or "
                "on the host, moved to the device in one transfer with the batch", details))
            continue
        elif what == PENDING_INPUTS:
            fix = ("the compiled module's input is still being computed when it is called, so the bridge runs "
                   "those ops as a graph of their own first: compute it inside the compiled module (its ops join "
                   "the module's graph), or hand it a tensor already on the device")
        elif what.startswith("distributed."):
            fix = ("a collective on a lazy tensor runs the pending graph first, once per call: flatten the "
                   f"gradients into one bucket (one collective per step) or reduce after {names['mark_step']}")
        findings.append(Finding(
            FindingKind.EXTRA_SYNC, "warning" if steps_with >= max(2, steps // 2) else "info",
            f"{in_test(context)}{what} forces {rounded(per_step)} extra execution{'s' if per_step != 1 else ''} per step "
            f"in {steps_with} of {max(steps, steps_with)} steps ({ms_per_step:.2f} ms per step)",
            first.frame, table.indices(positions), fix, details,
        ))
    return findings


def _steady_ms(table: ExecutionTable, positions: Sequence[int], steps: int) -> float:
    """Its sync time per step once warm: the first steps compile what the rest reuse (on
    PyTorch/XLA seconds a graph), which is not what each step pays. A run too short to
    have steps after warm-up is averaged whole."""
    if steps <= WARMUP_STEPS:
        return table.sum(table.sync_ms, positions) / max(steps, 1)
    warm = [p for p in positions if table.step[p] >= WARMUP_STEPS]
    return table.sum(table.sync_ms, warm) / (steps - WARMUP_STEPS)


KINDS = (KindInfo(FindingKind.EXTRA_SYNC, "extra sync", "sync", ExtraSyncDetails),)


def find(facts: RunFacts) -> list[Finding]:
    return extra_sync_findings(facts.executions, facts.steps, facts.names, facts.stacks)
