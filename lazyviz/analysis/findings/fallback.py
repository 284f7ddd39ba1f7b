"""An op without a lowering that runs on the CPU: what it forced, and an equivalent from
ops that lower where one is known (each checked in tests/test_fallback_fixes.py)."""
from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from lazyviz.analysis.findings.base import Details, Finding, FindingKind, KindInfo, RunFacts
from lazyviz.analysis.library import LibraryLine, Stacks, library_fix, library_line, no_stacks
from lazyviz.trace.model import Execution, Frame
from lazyviz.trace.table import ExecutionTable


@dataclass(frozen=True, kw_only=True)
class FallbackDetails(Details):
    op: str  # the op without a lowering (aten::lerp.Scalar)
    calls: int  # how many times it ran on the CPU
    executions_forced: int  # executions its inputs' pending graphs needed
    per_step: float
    call: str | None  # the call it ran in (clip_grad_norm_, Adam.step), where the stack names one
    library_line: str | None  # the library's line that called it
    library_fix: bool  # lazyviz knows a fix at that library line
    ops: tuple[str, ...] = ()  # one call's ops together (scaled_dot_product_attention's), where merged

    @property
    def subject(self) -> str:
        return self.op


_CHECKED = " (checked on torch 2.13's TorchScript backend: no fallback, the same values)"
OP_EQUIVALENTS = {
    "aten::mse_loss": "write the loss as ((output - target) ** 2).mean(), which lowers",
    "aten::median": "sort lowers: torch.sort(x.flatten())[0][(x.numel() - 1) // 2] is x.median() (checked on "
                    "torch 2.13's TorchScript backend and on PyTorch/XLA 2.9: no fallback, the same values)",
    "aten::isnan": "x != x is True exactly where x is NaN, and lowers: use it for torch.isnan(x)" + _CHECKED,
    "aten::argmax": "x.max(dim=d).indices is x.argmax(dim=d) (x.flatten().max(dim=0).indices without a dim), "
                    "and lowers" + _CHECKED,
    "aten::where.self": "for torch.where(cond, a, b) write a.masked_fill(cond == 0, 0) + b.masked_fill(cond, 0), "
                        "which lowers (a.masked_fill(cond == 0, value) where b is a number)" + _CHECKED,
    "aten::index.Tensor": "indexing with a tensor of indices falls back: x.index_select(dim, idx) (or torch.gather) "
                          "lowers and gives x[idx]" + _CHECKED,
    "aten::linalg_vector_norm": "the 2-norm from ops that lower: (x * x).sum().sqrt()" + _CHECKED,
    "aten::lerp.Tensor": "a.lerp(b, w) is a + w * (b - a), which lowers" + _CHECKED,
    "aten::kthvalue.values": "sort lowers: torch.sort(x, dim=d)[0].select(d, k - 1) is x.kthvalue(k, dim=d).values"
                             + _CHECKED,
}
# Ops that mark a known path through torch's own code, whoever called it.
PATH_FIXES = {
    "aten::mse_loss_backward": "goes away with the forward: ((output - target) ** 2).mean()",
    "aten::lerp.Scalar": "Adam/AdamW update their moments with lerp_, which has no lowering on this "
                         "backend; no optimizer option avoids it here (foreach and capturable do not "
                         "apply to the lazy device); an update written as "
                         "exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1) stays in the graph. Meanwhile a "
                         "torch._lazy.mark_step() between loss.backward() and optimizer.step() runs the "
                         "forward and backward once, so each fallback moves its own parameter's tensors "
                         "instead of running them again (measured on torch 2.13's TorchScript backend, "
                         "LTC's counts: an AdamW step of a small transformer ran 36 graphs, then 11, the "
                         "same loss)",
    "aten::isneginf": "part of scaled_dot_product_attention's fallback path; a manual "
                      "softmax(q @ k.T * scale) @ v attention lowers",
    "aten::all.dim": "part of scaled_dot_product_attention's fallback path; a manual attention lowers",
    "aten::where.self_out": "part of scaled_dot_product_attention's fallback path",
}
FALLBACK_FIXES = {**OP_EQUIVALENTS, **PATH_FIXES}
# Ops of one such path: a call of its that forced no execution of its own is the same finding.
_PATHS = {"aten::isneginf": "sdpa", "aten::all.dim": "sdpa", "aten::where.self_out": "sdpa",
          "aten::mse_loss": "mse", "aten::mse_loss_backward": "mse"}
# Ops a path also runs that are the user's own elsewhere: they join a path's ops at one line.
_PATH_COMPANIONS = {"aten::where.self": "sdpa"}
_PATH_CALLS = {"sdpa": "scaled_dot_product_attention", "mse": "mse_loss"}

# Ops autograd runs for the backward of a forward op the user wrote: in loss.backward()
# they are that op's, changed where the forward op is (gat: torch.where in its forward,
# output[mask] indexing with a tensor of indices).
BACKWARD_OF = {"aten::where.self": "torch.where", "aten::_index_put_impl_": "indexing with a tensor of indices (x[idx])",
               "aten::index_put_": "indexing with a tensor of indices (x[idx])"}
_BACKWARD_CALLS = ("Tensor.backward", "backward", "autograd.backward", "autograd.grad")

# Advice by the user-facing call that issued a fallback op (Tracer._user_call), where the op
# alone does not say what to change.
CALL_FIXES = {
    "clip_grad_norm_": "clip_grad_norm_ takes the norm with an op that has no lowering here, once per "
                       "parameter: compute it with ops that lower, total = torch.stack([(p.grad * p.grad).sum() "
                       "for p in params]).sum().sqrt(), then p.grad.mul_(torch.clamp(max_norm / (total + 1e-6), "
                       "max=1.0)) for each p (checked: no fallback on torch 2.13's TorchScript backend)",
}


def fallback_findings(executions: Sequence[Execution], steps: int, after: Mapping[str, int] = {},
                      stacks: Stacks = no_stacks) -> list[Finding]:
    """Every op that fell back, with the executions it forced; after: ops that fell back
    after the last execution (recorded at the end), which forced none. An op that
    forced executions from several calls (gat's torch.where in its forward, and the
    where of that op's backward inside loss.backward()) is a finding per call: each is
    changed in its own place."""
    table = ExecutionTable.of(executions)
    calls: Counter[str] = Counter(after)
    calls_in: Counter[tuple[str, str | None]] = Counter()  # (op, the call of the execution that counted it)
    for number in table.in_order:
        runs = len(table.positions[number])
        for op, count in table.kinds[number].fallback_ops.items():
            calls[op] += count * runs
            calls_in[(op, table.kinds[number].call)] += count * runs
    forced = table.kinds_by(lambda kind: kind.detail if kind.cause == "fallback" and kind.detail else None)
    findings = []
    for op, count in calls.most_common():
        numbers = forced.get(op, [])
        by_call: dict[str | None, list[int]] = {}
        for number in numbers:
            by_call.setdefault(table.kinds[number].call, []).append(number)
        if len(by_call) < 2:
            findings.append(_op_finding(op, count, numbers, table, steps, stacks))
            continue
        # The most forced first; it also takes the calls no forcing call's executions counted.
        ordered = sorted(by_call.items(), key=lambda item: -sum(len(table.positions[n]) for n in item[1]))
        shares = [max(1, calls_in[(op, call)]) for call, _ in ordered]
        shares[0] += max(0, count - sum(shares))
        findings += [_op_finding(op, share, group, table, steps, stacks)
                     for share, (_, group) in zip(shares, ordered)]
    return _one_per_call(findings, table, steps)


def _op_finding(op: str, count: int, numbers: Sequence[int], table: ExecutionTable, steps: int,
                stacks: Stacks) -> Finding:
    """One op's fallbacks (count calls), with the executions `numbers` forced."""
    sites: Counter[Frame] = Counter()
    user_calls: Counter[str] = Counter()
    for number in numbers:
        kind = table.kinds[number]
        if kind.frame:
            sites[kind.frame] += len(table.positions[number])
        if kind.call:
            user_calls[kind.call] += len(table.positions[number])
    frame = sites.most_common(1)[0][0] if sites else None
    user_call = user_calls.most_common(1)
    call = user_call[0][0] if user_call else None
    positions = table.merged(numbers) if numbers else []
    per_step = len(positions) / max(steps, 1)
    per_step_text = f" ({per_step:.3g} per step)" if steps else ""
    library = library_line(stacks(table.kinds[numbers[0]].stack_id), stacks.packages) if numbers else None
    fix = _fallback_fix(op, library, call, len(positions), steps)
    return Finding(
        FindingKind.FALLBACK, "warning" if positions else "info",
        f"{op} falls back to the CPU{f' in {call}()' if call else ''}: {count} call{'s' if count != 1 else ''}, "
        f"forcing {len(positions)} execution{'s' if len(positions) != 1 else ''}{per_step_text}",
        frame, table.indices(positions), fix,
        FallbackDetails(op=op, calls=count, executions_forced=len(positions), per_step=round(per_step, 3),
                        call=call, library_line=f"{library.path}:{library.frame.line}" if library else None,
                        library_fix=library_fix(library, op) is not None),
    )


def _fallback_fix(op: str, library: LibraryLine | None, call: str | None, forced: int, steps: int) -> str:
    """The most specific first: the library's code it ran in, the call the user made, the
    known path the op marks; an equivalent of the op only where the user calls it
    themselves (torch.where inside MultiheadAttention is not theirs to rewrite)."""
    # nn.MSELoss()(out, target) is the user's mse_loss: the module is the op, called by them.
    if call in _BACKWARD_CALLS and op in BACKWARD_OF:
        return backward_fix((op,))
    module_op = call is not None and call.endswith(".forward") and \
        call.partition(".")[0].lower() == op.removeprefix("aten::").split(".")[0].replace("_", "")
    own = call is None or call.startswith("Tensor.") or call.rpartition(".")[2] in op or module_op
    # x.split(...) on the user's line is their own call, not a library's to find an option of.
    inside = None if own and library is None else call
    return (library_fix(library, op) or (call and CALL_FIXES.get(call.rpartition(".")[2])) or PATH_FIXES.get(op)
            or (OP_EQUIVALENTS.get(op) if own else None) or _no_lowering_fix(op, library, inside, forced, steps))


def backward_fix(ops: Sequence[str]) -> str:
    """What to do about ops that fall back in autograd's backward of the user's forward."""
    known = [f"{op} comes from the backward of {BACKWARD_OF[op]}" for op in ops if op in BACKWARD_OF]
    return ("these run in autograd's backward, for ops of your forward, not in code you call there: "
            + "; ".join(known) + ". Change the forward's op (its own finding, at its line) and its backward "
            "changes with it")


def _no_lowering_fix(op: str, library: LibraryLine | None, call: str | None, forced: int, steps: int) -> str:
    """What to do about an op with no lowering and no known equivalent: where it runs, and what it costs."""
    how_often = (("once a step" if forced == steps else f"{forced / steps:.3g} times a step") if steps
                 else ("once" if forced == 1 else f"{forced} times"))
    cost = f"it syncs {how_often}" if forced else "it runs on the CPU (its inputs had no pending graph to run first)"
    if library is not None or call is not None:
        where = f" in {library.package}'s code ({library})" if library is not None else ""
        inside = f"inside {call}()" if call else "inside a call of yours"
        return (f"{op} has no lowering on this backend and runs{where} {inside}, not in your own code: look for "
                f"an option of that call that avoids it; otherwise {cost}")
    # "The step" only where the run has steps: without mark_step() there is none to leave.
    out_of = "the step" if steps else "the loop that runs it"
    return (f"{op} has no lowering on this backend and no equivalent lazyviz has checked: write it from ops that "
            f"lower, or move it out of {out_of}; otherwise {cost}")


def _one_per_call(findings: list[Finding], table: ExecutionTable, steps: int) -> list[Finding]:
    """The ops one call falls back through (scaled_dot_product_attention's all.dim,
    isneginf, where) are one finding about that call: the user changes the call. An op of
    the same path that forced no execution of its own (where.self_out, writing into a
    tensor the path made) joins it."""
    by_call: dict[str, list[Finding]] = defaultdict(list)
    for finding in findings:
        if finding.details.call and finding.executions:
            by_call[finding.details.call].append(finding)
    # A call with no Python frame of its own (F.scaled_dot_product_attention is torch's C
    # function): its path's ops at one line are that call, where.self with them.
    at_line: dict[tuple, list[Finding]] = defaultdict(list)
    for finding in findings:
        if not finding.details.call and finding.frame and finding.executions:
            path = _PATHS.get(finding.details.op) or _PATH_COMPANIONS.get(finding.details.op)
            if path:
                at_line[(finding.frame, path)].append(finding)
    named: dict[int, Finding] = {}  # id of a finding -> the same, naming its call
    for (frame, path), group in at_line.items():
        if any(f.details.op in _PATHS for f in group) and len(group) > 1:
            call = _PATH_CALLS[path]
            named.update({id(f): replace(f, details=replace(f.details, call=call)) for f in group})
            by_call[f"{call}@{frame.site}"] = [named[id(f)] for f in group]
    findings = [named.get(id(f), f) for f in findings]
    paths = {_PATHS[f.details.op]: call for call, group in by_call.items() for f in group if f.details.op in _PATHS}
    for finding in findings:
        path_call = paths.get(_PATHS.get(finding.details.op, ""))
        if not finding.executions and path_call and len(by_call[path_call]) > 1:
            by_call[path_call].append(finding)
    merged = []
    for finding in findings:
        group = next((g for g in by_call.values() if finding in g), [])
        if len(group) < 2:
            merged.append(finding)
        elif finding is group[0]:  # the rest of the group are in it
            executions = tuple(sorted({e for f in group for e in f.executions}))
            ops = tuple(f.details.op for f in group)
            calls = sum(f.details.calls for f in group)
            per_step = f" ({len(executions) / steps:.3g} per step)" if steps else ""
            merged.append(replace(
                finding,
                message=f"{finding.details.call}() falls back to the CPU through {len(ops)} ops ({', '.join(ops)}): "
                        f"{calls} calls, forcing {len(executions)} execution{'s' if len(executions) != 1 else ''}"
                        f"{per_step}",
                executions=executions, fix=next((f.fix for f in group if f.details.library_fix), None)
                or (backward_fix(ops) if finding.details.call in _BACKWARD_CALLS and set(ops) & set(BACKWARD_OF)
                    else None)
                or next((f.fix for f in group if f.details.op in PATH_FIXES), finding.fix),
                details=replace(finding.details, ops=ops, calls=calls, executions_forced=len(executions))))
    return merged


KINDS = (KindInfo(FindingKind.FALLBACK, "fallback", "fallback", FallbackDetails),)


def find(facts: RunFacts) -> list[Finding]:
    return fallback_findings(facts.executions, facts.steps,
                             facts.run.fallbacks_after_last_execution if facts.run else {}, facts.stacks)
