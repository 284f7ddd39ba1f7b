"""Findings: what a user should fix, with where and how. Pure functions of trace data."""
from __future__ import annotations

import itertools
import operator
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from lazyviz.analysis.collectives import KINDS as COLLECTIVE_KINDS
from lazyviz.analysis.collectives import Advice, Moved, advice, per_step, run_collectives, whole_batch
from lazyviz.analysis.failures import crash, explain, headline
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.host_calls import ABSORBED_KINDS, host_call, host_calls
from lazyviz.analysis.ir import IRGraph
from lazyviz.analysis.library import LibraryLine, Stacks, library_fix, library_line, no_stacks
from lazyviz.analysis.loops import unsynced_iterations
from lazyviz.analysis.recompiles import PendingRecompile, Recompile
from lazyviz.analysis.units import size_text
from lazyviz.trace.model import TS_NAMES, Annotation, Execution, Failure, Frame, RunInfo
from lazyviz.trace.table import ExecutionTable

SEVERITIES = ("error", "warning", "info")

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
# runs every one of them (median on PyTorch/XLA too: tests/xla).
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

# Advice by the user-facing call that issued a fallback op (Tracer._user_call), where the op
# alone does not say what to change.
CALL_FIXES = {
    "clip_grad_norm_": "clip_grad_norm_ takes the norm with an op that has no lowering here, once per "
                       "parameter: compute it with ops that lower, total = torch.stack([(p.grad * p.grad).sum() "
                       "for p in params]).sum().sqrt(), then p.grad.mul_(torch.clamp(max_norm / (total + 1e-6), "
                       "max=1.0)) for each p (checked: no fallback on torch 2.13's TorchScript backend)",
}

MIN_REPEATS = 4  # a block seen this many times in a row in one graph is a loop, unrolled


@dataclass(frozen=True)
class Finding:
    kind: str  # recompile, dynamic_shape, extra_sync, fallback, missing_mark_step
    severity: str
    message: str
    frame: Frame | None
    executions: tuple[int, ...]
    fix: str = ""
    details: dict = field(default_factory=dict)
    cost_ms: float = 0.0  # the sync time of the executions it points at: what ranks it
    short: str = ""  # the message in a few words, where it can be shorter (the UI's strip)

    def to_json(self) -> dict:
        return {
            "kind": self.kind, "severity": self.severity, "message": self.message,
            "site": self.frame.to_json() if self.frame else None,
            "executions": list(self.executions), "fix": self.fix, "details": self.details,
            "cost_ms": round(self.cost_ms, 3),
        }


@dataclass(frozen=True)
class RunFacts:
    """What finders read: the run's executions and what analysis already derived."""

    executions: ExecutionTable
    steps: int
    recompiles: list[Recompile | PendingRecompile]
    graphs: IRGraphs
    names: Mapping[str, str]  # the backend's names for the calls fixes mention (RunInfo.names)
    run: RunInfo | None = None  # how it ended: failed executions, the exception it raised
    quick: bool = False  # skip what parses every graph's IR (an unrolled loop's repeated block)
    stacks: Stacks = no_stacks  # an execution's Python stack by its stack id (the trace's)


# The finders, one line each: a new kind of finding is a function and a line here.
FINDERS: tuple[Callable[[RunFacts], list[Finding]], ...] = (
    lambda facts: failure_findings(facts.run.failures if facts.run else (), facts.executions, facts.graphs),
    lambda facts: crash_findings(facts.run, facts.executions, facts.graphs) if facts.run else [],
    lambda facts: recompile_findings(facts.recompiles, facts.steps, facts.graphs),
    lambda facts: extra_sync_findings(facts.executions, facts.steps, facts.names, facts.stacks),
    lambda facts: fallback_findings(facts.executions, facts.steps,
                                    facts.run.fallbacks_after_last_execution if facts.run else {}, facts.stacks),
    lambda facts: one_by_one_read_findings(facts.executions, facts.names),
    lambda facts: missing_mark_step_findings(facts.executions, facts.graphs, facts.names, facts.quick,
                                             facts.run.optimizer_marks if facts.run and not facts.steps else (),
                                             facts.stacks),
    lambda facts: collective_findings(facts.executions, facts.graphs, facts.run.annotations if facts.run else [],
                                      facts.steps or (facts.run.optimizer_steps if facts.run else 0)),
)


def failure_findings(failures: Sequence[Failure], executions: Sequence[Execution],
                     ir_texts: Mapping[str, str]) -> list[Finding]:
    """The executions the backend failed to compile or run: the script got that error,
    so each is an error, first in every list."""
    table = ExecutionTable.of(executions)
    findings = []
    for failure in failures:
        position = table.position_of(failure.execution)
        if position is None:
            continue  # the trace stopped before the row (a full disk)
        kind = table.kind_at(position)
        what, fix, details = explain(failure, IRGraphs.of(ir_texts).parsed(kind.graph))
        sync = kind.detail or kind.cause
        findings.append(Finding(
            "failed_execution", "error",
            f"execution {failure.execution} ({sync}, graph {kind.graph}, {kind.nodes} nodes) failed in the "
            f"backend: {what}",
            kind.frame, (failure.execution,), fix, {**details, "graph": kind.graph},
            short=f"execution {failure.execution} failed: {details['error']}",
        ))
    return findings


def crash_findings(run: RunInfo, executions: Sequence[Execution], ir_texts: Mapping[str, str] | None = None) -> list[Finding]:
    """The script raised: where, and what led to it where lazyviz can tell (a tensor
    that is not lazy reached a lazy op: the fallback that made it). A failed execution
    already explains its own error."""
    table = ExecutionTable.of(executions)
    found = crash(run, table, IRGraphs.of(ir_texts or {}))
    if found is None or any(failure.error.strip() and headline(failure.error) in run.error for failure in run.failures):
        return []
    what, fix, details, frame = found
    # The execution it points at: the fallback's, or the graph the device could not hold.
    position = table.position_of(details["execution"]) if details.get("execution") is not None else None
    positions = [position] if position is not None else []
    fallback_fix = FALLBACK_FIXES.get(details["op"]) if "op" in details else None
    fix = fix + (f"; {fallback_fix}" if fallback_fix else "")
    return [Finding("crash", "error", what, frame, table.indices(positions), fix, details,
                    short=details["error"])]


def missing_mark_step_findings(executions: Sequence[Execution], ir_texts: Mapping[str, str],
                               names: Mapping[str, str] = TS_NAMES, quick: bool = False,
                               optimizer_marks: Sequence[int] = (), stacks: Stacks = no_stacks) -> list[Finding]:
    """The forms of a loop without mark_step(): optimizer steps that no sync separated, a
    graph that grows at every sync of one site, and a loop unrolled into one graph (report
    and check ask the same question). quick: not the last (it searches every graph's ops).
    optimizer_marks: of a run without steps (RunInfo.optimizer_marks)."""
    graphs = IRGraphs.of(ir_texts)
    growing = growing_site_findings(executions, names, graphs)
    if not quick:
        growing += growth_findings(executions, graphs, names, skip=growing_graphs(executions), stacks=stacks)
    # Last: where the graphs show the loop, they say it; the optimizer's count joins them.
    return _one_per_loop(growing + stepless_loop_findings(executions, optimizer_marks, names))


def _one_per_loop(findings: list[Finding]) -> list[Finding]:
    """A loop without mark_step() is one cause however many graphs and sync sites show it
    (a growing graph at its .item(), the unrolled blocks its fallbacks synced): one finding
    per function that syncs them, the first (a growing site, else the largest block) saying
    it, with the graphs and sites it covers."""
    by_loop: dict[tuple, list[Finding]] = {}
    for finding in findings:
        frame = finding.frame
        by_loop.setdefault((frame.file, frame.function) if frame else None, []).append(finding)
    merged = []
    for group in by_loop.values():
        first = group[0]
        if len(group) == 1:
            merged.append(first)
            continue
        sites = list(dict.fromkeys(f.frame.site for f in group if f.frame))
        graphs = list(dict.fromkeys(g for f in group for g in f.details.get("graphs", [f.details.get("graph")]) if g))
        more = len(group) - 1
        merged.append(replace(
            first, executions=tuple(sorted({e for f in group for e in f.executions})),
            message=f"{first.message} (one cause: {more} more graph{'s' if more > 1 else ''} show the same loop"
                    f"{f', at {len(sites)} sync sites' if len(sites) > 1 else ''})",
            details={**first.details, "graphs": graphs, "sites": sites}))
    return merged


def find_all(
    executions: Sequence[Execution], steps: int, recompiles: list[Recompile | PendingRecompile],
    ir_texts: Mapping[str, str], names: Mapping[str, str] = TS_NAMES, run: RunInfo | None = None,
    quick: bool = False, stacks: Stacks = no_stacks,
) -> list[Finding]:
    """Every finding, root causes first: by severity, then a missing mark_step() before
    the rest (it multiplies what every other sync costs), then by the time it cost."""
    table = ExecutionTable.of(executions)
    facts = RunFacts(table, steps, recompiles, IRGraphs.of(ir_texts), names, run, quick, stacks)
    findings = [replace(finding, cost_ms=table.sum_at(table.sync_ms, finding.executions))
                for finder in FINDERS for finding in finder(facts)]
    findings = _host_call_findings(findings, table, stacks)
    findings = _blame_uncut_graph(_crash_speaks_for_its_op(findings), table, steps)
    return sorted(findings, key=lambda f: (SEVERITIES.index(f.severity), f.kind not in ROOT_KINDS, -f.cost_ms))


def _host_call_findings(findings: list[Finding], table: ExecutionTable, stacks: Stacks) -> list[Finding]:
    """A host-side library call (save_image, SummaryWriter.add_image) handed a lazy tensor
    is one finding at the user's call: the fallbacks, recompiles and syncs its own work
    made are that finding's, whatever they were (make_grid's copy per image)."""
    calls = host_calls([table.kind_at(p).stack_id for p in range(len(table))], stacks)
    absorbed: set[int] = set()
    made = []
    for (frame, function), positions in calls.items():
        indices = set(table.indices(positions))
        theirs = [n for n, f in enumerate(findings) if f.kind in ABSORBED_KINDS and f.executions
                  and set(f.executions) <= indices]
        absorbed.update(theirs)
        ops: Counter[str] = Counter()
        for p in positions:
            ops.update(table.kind_at(p).fallback_ops)
        inside = ", ".join(f"{op} x{count}" for op, count in ops.most_common(3))
        made.append(Finding(
            "host_call", "warning",
            f"{function}() works on the host and is handed a lazy tensor: {len(positions)} execution"
            f"{'s' * (len(positions) != 1)} run inside it{f' ({inside} fall back)' if inside else ''}, "
            f"{table.sum(table.sync_ms, positions):.0f} ms of sync",
            frame, tuple(sorted(indices)),
            f"hand {function}() a tensor on the CPU, {function}(x.detach().cpu(), ...): the pending graph runs "
            "once and the call works on the host, as it was written to",
            {"call": function, "absorbed": sorted({findings[n].kind for n in theirs})},
            short=f"{function}() given a lazy tensor ({len(positions)} executions inside it)"))
    return [f for n, f in enumerate(findings) if n not in absorbed] + made


def _crash_speaks_for_its_op(findings: list[Finding]) -> list[Finding]:
    """The fallback a crash names (split's pieces left on the CPU) is that crash's cause:
    one finding says it, with the op's line, not a second one about the same op."""
    named = {f.details.get("op") for f in findings if f.kind == "crash"} - {None}
    return [f for f in findings if not (f.kind == "fallback" and f.details.get("op") in named)]


# Findings whose fix changes what every other finding measures: fixed first.
ROOT_KINDS = frozenset({"missing_mark_step"})
MIN_INFLATED_MS = 5.0  # syncs quicker than this are not worth blaming on an uncut graph


def _blame_uncut_graph(findings: list[Finding], table: ExecutionTable, steps: int) -> list[Finding]:
    """A sync that runs a graph a missing mark_step() left uncut pays for all the work
    pending since the loop began: findings that point at such syncs say so, with what
    each cost, so the user fixes the root first. In a run without any step every sync
    is such a sync (word_language_model's clip_grad_norm_ fallbacks, 440 ms each)."""
    uncut = {e for f in findings if f.kind in ROOT_KINDS for e in f.executions}
    if not uncut:
        return findings
    if not steps:
        uncut = set(table.indices(range(len(table))))
    blamed = []
    for finding in findings:
        inflated = [e for e in finding.executions if e in uncut]
        each = table.sum_at(table.sync_ms, inflated) / len(inflated) if inflated else 0.0
        if finding.kind in ROOT_KINDS or each < MIN_INFLATED_MS:
            blamed.append(finding)
            continue
        note = (f"; {each:.0f} ms per sync because the graph is not cut: "
                "fix the missing mark_step() finding first")
        blamed.append(replace(finding, message=finding.message + note,
                              details={**finding.details, "inflated_by_missing_mark_step": len(inflated)}))
    return blamed


def recompile_findings(recompiles: list[Recompile | PendingRecompile], steps: int = 1,
                       ir_texts: Mapping[str, str] | None = None) -> list[Finding]:
    """One finding per recompile after warm-up, except that input shapes changing again
    and again at one site make a single dynamic-shape finding with their history, and
    the same kind of change again and again at one site (a Python number baked into
    the graph each iteration) makes one finding with its count."""
    after_warmup = [r for r in recompiles if not r.warmup and not isinstance(r, PendingRecompile)]
    # Past the first few at a site, recompiles that changed the graph's structure are
    # counted, not compared: they join the site's largest group below (with steps; a
    # stepless run's are pieces of its pass, never findings).
    waiting: dict[tuple, list[tuple[int, int]]] = defaultdict(list)  # site -> (execution, step)
    for r in recompiles:
        if steps and not r.warmup and isinstance(r, PendingRecompile):
            waiting[(r.context, r.frame.site if r.frame else "?")].append((r.execution, r.step))
    if not steps:
        # No mark_step(): one site syncs the pieces of a pass between its fallbacks and
        # .item()s, each a different graph the first time round. Only the same graph
        # with other values (shapes, constants, dtypes, shared buffers) is a recompile
        # that a step would have had too.
        after_warmup = [r for r in after_warmup if r.diff is not None and r.diff.origins and not any(
            c.kind in ("op_added", "op_removed", "structure") for c in r.diff.origins)]
    shape_only: dict[tuple, list[Recompile]] = defaultdict(list)
    alike: dict[tuple, list[Recompile]] = defaultdict(list)
    for recompile in after_warmup:
        origins = recompile.diff.origins if recompile.diff else ()
        site = (recompile.context, recompile.frame.site if recompile.frame else "?")
        if origins and shape_change(recompile):
            shape_only[site].append(recompile)
        else:
            kinds = tuple(sorted({(c.kind, c.op) for c in origins})) or (("other", recompile.headline()[:40]),)
            alike[(*site, kinds)].append(recompile)
    # The site's largest group takes the recompiles not compared.
    largest: dict[tuple, tuple] = {}
    for key, group in alike.items():
        site = key[:2]
        if site not in largest or len(group) > len(alike[largest[site]]):
            largest[site] = key
    extra = {key: len(waiting[site]) for site, key in largest.items()}
    findings = []
    for key, group in alike.items():
        more = extra.get(key, 0)
        findings.append(_alike_finding(group, more, waiting[key[:2]] if more else [], steps, ir_texts))
    findings += [_shape_finding(group, steps) for group in shape_only.values() if not _loop_inside_the_call(group, steps)]
    return _one_per_cause(findings, [*alike.values(), *shape_only.values()])


def _alike_finding(group: list[Recompile], more: int, waited: list[tuple[int, int]], steps: int,
                   ir_texts: Mapping[str, str] | None) -> Finding:
    """One site's recompiles of one kind of change; more: those not compared that join
    it (waited: their executions and steps)."""
    first = group[0]
    count = len(group) + more
    # A step may recompile several times at one site (a fallback's syncs): steps and
    # recompiles are counted apart, and neither more than the run had.
    at_steps = {r.step for r in group} | ({step for _, step in waited} if more else set())
    when = f"step {first.step}" if steps else f"execution {first.execution}"
    message = f"{when} recompiled: {first.headline()}"
    if first.new_graph and ir_texts:  # which lines a new phase or branch runs
        message += _lines_that_built(IRGraphs.of(ir_texts), first.graph)
    if count > 1:
        where = (_steps_text(len(at_steps), steps, count) if steps else f"{count} syncs here")
        alike_text = ("each time the same kind of change" if not more
                      else f"the first {len(group)} compared each the same kind of change")
        message = f"recompiled at {where}, {alike_text}; first at {message}"
    short = f"{when}: {first.brief()}"
    if count > 1:
        short = f"at {where}, first at {short}"
    executions = [r.execution for r in group] + ([e for e, _ in waited] if more else [])
    return Finding(
        "recompile", "warning", _in_test(first.context) + message,
        first.frame, tuple(sorted(executions)),
        fix=_recompile_fix(first),
        details={"closest_graph": first.closest, "closest_execution": first.closest_execution,
                 "new_graph": first.new_graph, "recompiles": count, "compared": len(group),
                 "steps": len(at_steps) if steps else None,
                 "changes": sorted({c.kind for c in (first.diff.origins if first.diff else ())})},
        short=_in_test(first.context) + short,
    )


def _shape_finding(group: list[Recompile], steps: int) -> Finding:
    """One site's recompiles for input sizes alone: one step's change, sizes that change
    again and again (batches), or an input that grows by the same size each time."""
    history = [{"step": r.step, "execution": r.execution,
                "changes": [f"{c.node} {c.before} -> {c.after}" for c in r.diff.origins if c.kind in _SIZES]}
               for r in group]
    first = next(c for c in group[0].diff.origins if c.kind in _SIZES)
    built = f", built at {first.source_line}" if first.location else ""
    # An input's shape, or a size a tensor was made at on the device (in the graph).
    what = "input shape" if first.kind == "input_shape" else f"{first.op.rpartition('::')[2]} shape"
    # Several syncs of one step (a fallback's) recompile for one change: one step's change.
    once = len({r.step for r in group}) == 1 if steps else len(group) == 1
    if once:
        when = f"step {group[0].step}" if steps else f"execution {group[0].execution}"
        message = f"{when} recompiled: {what} {first.before} -> {first.after}{built}"
        short = f"{when}: {group[0].brief()}"
    else:
        # How many recompiles it made is said once it is known whether other sites share the cause (_reaching).
        where = f"{len({r.step for r in group})} of {steps} steps" if steps else f"{len(group)} syncs"
        message = f"{what}s change at {where} (first {first.before} -> {first.after}{built})"
        short = f"{what}s change at {where} (first {group[0].brief()})"
    growth = _accumulated(group)
    if growth is not None and not once:
        sizes = " -> ".join(growth[1][:4]) + (f" -> ... -> {growth[1][-1]}" if len(growth[1]) > 4 else "")
        message = (f"an input grows by {growth[0]} at each of {len(group)} {'steps' if steps else 'syncs'} "
                   f"({what} {sizes}{built}), each a recompile: a tensor accumulated by concatenation "
                   "(each batch's results joined to the last ones with torch.cat), not batches that change")
        short = f"an input grows by {growth[0]} at each of {len(group)} {'steps' if steps else 'syncs'}"
    message = _in_test(group[0].context) + message
    return Finding(
        "recompile" if once else "dynamic_shape", "warning", message, group[0].frame,
        tuple(r.execution for r in group),
        fix=_ACCUMULATOR_FIX if growth is not None and not once else _SHAPE_FIX,
        details={"history": history, "changes": [first.kind], "recompiles": len(group),
                 "steps": len({r.step for r in group}) if steps else None},
        short=_in_test(group[0].context) + short,
    )


def _accumulated(group: list[Recompile]) -> tuple[int, list[str]] | None:
    """(the size it grows by, the shapes) where one input's size grows by the same amount
    at every recompile (8 -> 16 -> 24 -> 32): results accumulated by concatenation. None
    for sizes that come and go, as batches' do."""
    shapes: list[str] = []
    for r in group:
        change = next((c for c in r.diff.origins if c.kind in _SIZES), None) if r.diff else None
        if change is None:
            return None
        if shapes and shapes[-1] != change.before:
            return None
        shapes += [change.before, change.after] if not shapes else [change.after]
    sizes = []
    for before, after in itertools.pairwise(shapes):
        changed = _changed_sizes(before, after)
        if len(changed) != 1:
            return None
        (x, y), = changed
        if not (x.isdigit() and y.isdigit()):
            return None
        sizes.append(int(y) - int(x))
    if len(sizes) < 2 or sizes[0] <= 0 or any(size != sizes[0] for size in sizes):
        return None
    return sizes[0], shapes


def _loop_inside_the_call(group: list[Recompile], steps: int) -> bool:
    """Do these shape changes come from a loop inside the call that syncs, not from
    batches? An optimizer's per-parameter fallback (Adam's lerp_ on TS) syncs once per
    parameter at the user's optimizer.step(), each parameter another shape: the changing
    tensor was built by the syncing line itself, or one step's syncs there changed other
    shapes each. A batch is made elsewhere, changes between steps, and alike at each sync
    of a step."""
    if steps:
        by_step: dict[int, set[frozenset]] = defaultdict(set)
        for r in group:  # a batch's change shows alike at each of a step's syncs; parameters differ
            by_step[r.step].add(frozenset((c.before, c.after) for c in r.diff.origins if c.kind in _SIZES))
        if any(len(changes) > 1 for changes in by_step.values()):
            return True
    sites = {f"{r.frame.file.rpartition('/')[2]}:{r.frame.line}" for r in group if r.frame}
    built = {c.source_line for r in group for c in (r.diff.origins if r.diff else ()) if c.kind in _SIZES and c.location}
    return bool(built) and built <= sites


def _steps_text(steps: int, of: int, recompiles: int) -> str:
    """"10 of 12 steps" or "10 of 12 steps (410 recompiles)": the steps it happened in
    (never more than the run's), then how often where that is more."""
    text = f"{steps} of {max(of, steps)} steps"
    return text + (f" ({recompiles} recompiles)" if recompiles > steps else "")


def _causes_of(recompile: Recompile) -> set[tuple]:
    """What made a recompile, as the lines that built its changed constants (the same
    Python slice bounds recompile every sync site they reach: word_language_model's
    `source[i:i+seq_len]` and `source[i+1:...]`), or else the line and kind of its first
    change."""
    origins = recompile.diff.origins if recompile.diff else ()
    constants = {(recompile.context, "attribute", c.source_line) for c in origins if c.kind == "attribute" and c.location}
    if constants:
        return constants
    if origins and not origins[0].location and origins[0].kind in ("input_shape", "dtype"):
        # Without node locations (XLA's HLO in light capture): one input's change seen at
        # several sync sites of the same step is one cause.
        return {(recompile.context, origins[0].kind, recompile.step, f"{origins[0].before}->{origins[0].after}")}
    if not origins or not origins[0].location:
        return set()
    causes = {(recompile.context, origins[0].kind, origins[0].source_line)}
    if shape_change(recompile):
        # A batch's new length reaches tensors made from it inside the model too (a
        # mask expanded at the model's call): the same sizes changing the same way in
        # the same step are one cause, wherever each input was made.
        sizes = {pair for c in origins if c.kind in _SIZES for pair in _changed_sizes(c.before, c.after)}
        causes.add((recompile.context, "sizes", recompile.step, frozenset(sizes)))
    return causes


def _changed_sizes(before: str, after: str) -> set[tuple[str, str]]:
    """{("24", "30")} from "Float[4,1,24,24]" -> "Float[4,1,30,30]": each size that changed, and to what."""
    a, b = before.partition("[")[2].rstrip("]").split(","), after.partition("[")[2].rstrip("]").split(",")
    return {(x, y) for x, y in zip(a, b) if x != y} if len(a) == len(b) else {(before, after)}


def _one_per_cause(findings: list[Finding], groups: list[list[Recompile]]) -> list[Finding]:
    """Recompile findings (made from groups, in order) that share a cause are one
    finding: one fix, the sites it reaches listed. An input-shape finding speaks for
    its cause where there is one (its words and fix are the batch's)."""
    merged: list[Finding] = []
    by_cause: dict[tuple, int] = {}
    at_steps: list[set[int]] = []  # per merged finding, the steps its recompiles were in
    # Input shapes first, the site that recompiled most for them leading.
    pairs = sorted(zip(findings, groups), key=lambda pair: (pair[0].details.get("changes") != ["input_shape"],
                                                             -pair[0].details["recompiles"]))
    for finding, group in pairs:
        causes = _causes_of(group[0])
        known = next((by_cause[c] for c in causes if c in by_cause), None)
        if known is None:
            by_cause.update(dict.fromkeys(causes, len(merged)))
            merged.append(finding)
            at_steps.append({r.step for r in group})
            continue
        at_steps[known] |= {r.step for r in group}
        by_cause.update(dict.fromkeys(causes, known))
        first = merged[known]
        sites = first.details.get("sites") or [first.frame.site if first.frame else "?"]
        site = finding.frame.site if finding.frame else "?"
        count = first.details["recompiles"] + finding.details["recompiles"]
        steps = first.details.get("steps") and len(at_steps[known])
        merged[known] = replace(
            first, executions=tuple(sorted({*first.executions, *finding.executions})),
            details={**first.details, "sites": sites if site in sites else [*sites, site], "recompiles": count,
                     "steps": steps})
    return [_reaching(f) for f in merged]


def _reaching(finding: Finding) -> Finding:
    sites = finding.details.get("sites")
    if not sites:
        if finding.kind == "dynamic_shape" and finding.details["steps"]:
            recompiles, steps = finding.details["recompiles"], finding.details["steps"]
            more = ", each a recompile" if recompiles == steps else f" ({recompiles} recompiles)"
            return replace(finding, message=finding.message.replace(" steps (first ", f" steps{more} (first ", 1))
        return finding
    shown = ", ".join(site.rpartition("/")[2] for site in sites)
    where = f"at {len(sites)} sync sites: {shown}" if len(sites) > 1 else f"at {shown}"
    return replace(finding, message=f"{finding.message} (one cause: {finding.details['recompiles']} recompiles "
                                    f"{where})")


def _in_test(context: str | None) -> str:
    """"test_x.py::test_y: " under pytest, where each test is judged on its own."""
    return f"{context.rpartition('/')[2]}: " if context else ""


_ALIASING_FIX = ("two Python numbers used in the step became equal (or stopped being equal), so torch gave "
                 "them one shared device buffer and hashed that into the cache key: create such values once "
                 "as tensors on the device instead of passing Python numbers")
_DTYPE_FIX = "an input's dtype changed between steps: cast it once, where it is made, so every step sees one dtype"
_SHAPE_FIX = "pad or bucket batches to a few fixed shapes (or drop_last=True in the DataLoader)"
_ACCUMULATOR_FIX = ("keep each batch's results apart (append them to a list) or move each to the host as it comes, "
                    "and join them once at the end; in Hugging Face's Trainer, eval_accumulation_steps=1")


_CONSTANT_FIX = ("a value baked into the graph as a constant changed (a Python number used as a slice bound, "
                 "index, size or scalar argument): keep it the same every step, slice or index on the CPU "
                 "before moving data to the device, or pass it as a tensor (index_select with an index tensor)")
_SAME_HLO_FIX = ("XLA hashed something its HLO does not show (which inputs it may donate, their order): compare "
                 "the two graphs' HLO modules whole, their first line included (lazyviz export --format hlo)")
_PATH_FIX = ("the step's code took another path (ops were added or removed: a Python branch, a setting that "
             "changed, a first optimizer step): compare the two graphs with lazyviz export --diff")
_NEW_GRAPH_FIX = ("the step ran code no earlier step ran at this site (a new phase or branch, e.g. evaluation); "
                  "if it recurs every few steps, make the steps alike or move it out of the step")


# Ops a backend adds or drops for another layout of the same computation: PyTorch/XLA
# adds a permute for a batch of 4 where 16 needed none. With an input shape change, they
# are its consequence, not another code path.
LAYOUT_OPS = frozenset({"permute", "transpose", "t", "view", "reshape", "expand", "copy", "squeeze", "unsqueeze",
                        "as_strided", "select", "slice", "contiguous", "clone", "_to_copy"})


_SIZES = ("input_shape", "shape")


def shape_change(recompile: Recompile | PendingRecompile) -> bool:
    """Sizes changed, and nothing else but the layout ops that follow from that: an
    input's shape, or a size from Python that a tensor was made at on the device
    (PyTorch/XLA builds torch.randn(n, device=...) in the graph, a constant expanded to n)."""
    origins = recompile.diff.origins if getattr(recompile, "diff", None) else ()
    if not origins or not any(c.kind in _SIZES for c in origins):
        return False
    return all(c.kind in _SIZES or (c.kind in ("op_added", "op_removed")
                                    and c.op.rpartition("::")[2].split(".")[0] in LAYOUT_OPS)
               for c in origins)


def _recompile_fix(recompile: Recompile) -> str:
    """Advice that fits the change: batch advice only where input shapes alone changed."""
    if recompile.new_graph:
        return _NEW_GRAPH_FIX
    if recompile.diff is None:
        return "record with --capture full (the IR of every graph) to see what changed"
    if recompile.diff.is_empty:
        if recompile.same_hlo:
            return _SAME_HLO_FIX
        return _CONSTANT_FIX if recompile.note else _ALIASING_FIX  # note: a value XLA's IR text leaves out
    kinds = {change.kind for change in recompile.diff.origins}
    if kinds == {"aliasing"}:
        return _ALIASING_FIX
    if any(c.kind == "dtype" and c.op.endswith("device_data") for c in recompile.diff.origins):
        # The casts that follow (an added _to_copy) are its consequence, not another path.
        return _DTYPE_FIX
    if shape_change(recompile):
        return _SHAPE_FIX
    if kinds & {"op_added", "op_removed", "structure"}:
        return _PATH_FIX
    if "dtype" in kinds:
        return _DTYPE_FIX
    if "attribute" in kinds:
        return _CONSTANT_FIX
    if "input_shape" in kinds:
        return _SHAPE_FIX
    return _PATH_FIX


def extra_sync_findings(executions: Sequence[Execution], steps: int,
                        names: Mapping[str, str] = TS_NAMES, stacks: Stacks = no_stacks) -> list[Finding]:
    if steps == 0:
        return []  # no mark_step at all: nothing is "extra"; growth_findings says why
    table = ExecutionTable.of(executions)
    # Under pytest, per test: a suite's report names the tests that sync more.
    groups = table.kinds_by(lambda kind: None if kind.cause in ("mark_step", "fallback")
                            else (kind.context, kind.cause, kind.site))
    findings = []
    step_ends = table.where(lambda kind: kind.cause == "mark_step")
    first_step_end = step_ends[0] if step_ends else len(table)
    for (context, cause, _), numbers in groups.items():
        # After the last mark_step() no step runs (an evaluation loop, the final print):
        # its reads are the script's results, not extra syncs in a step.
        positions = [p for p in table.merged(numbers) if table.step[p] < steps]
        if not positions or positions[-1] < first_step_end:
            continue  # only before the first step's graph: set-up (xm.broadcast_master_param)
        steps_with = len(set(map(table.step.__getitem__, positions)))
        per_step = len(positions) / steps_with
        ms_per_step = table.sum(table.sync_ms, positions) / max(steps, 1)
        first = table.kinds[numbers[0]]
        what = first.detail or cause
        fix = SYNC_FIXES.get(cause, "").format(**names)
        library = library_line(stacks(first.stack_id))
        details = {"cause": cause, "count": len(positions), "steps": steps_with, "ms_per_step": round(ms_per_step, 3)}
        if library is not None and not what.endswith(" in a step closure"):
            # The read is in a library's code, reached through the user's call: their line has no `if` to change.
            through = f" inside {first.call}()" if first.call else ""
            what = f"{what}{through} at {library}"
            fix = library_fix(library) or (
                f"the read is {library.package}'s, not in your code ({library}): no edit of your line removes it; "
                f"look for an option of {first.call or library.package + ' call'} that avoids it, or it costs "
                f"{ms_per_step:.2f} ms every step")
            details.update(library_line=f"{library.path}:{library.frame.line}", call=first.call)
        elif what.endswith(" in a step closure"):
            # A closure reads what the step computed for free: an execution there ran new ops.
            fix = ("the step closure computes something new on the device before it reads it (torch.isnan(loss)"
                   ".item()): compute it in the step, so the closure only reads a result, or read the value first "
                   "and compute on the host (math.isnan(loss.item()))")
        elif what.startswith("distributed."):
            fix = ("a collective on a lazy tensor runs the pending graph first, once per call: flatten the "
                   f"gradients into one bucket (one collective per step) or reduce after {names['mark_step']}")
        findings.append(Finding(
            "extra_sync", "warning" if steps_with >= max(2, steps // 2) else "info",
            f"{_in_test(context)}{what} forces {per_step:g} extra execution{'s' if per_step != 1 else ''} per step "
            f"in {steps_with} of {max(steps, steps_with)} steps ({ms_per_step:.2f} ms per step)",
            first.frame, table.indices(positions), fix, details,
        ))
    return findings


def fallback_findings(executions: Sequence[Execution], steps: int, after: Mapping[str, int] = {},
                      stacks: Stacks = no_stacks) -> list[Finding]:
    """Every op that fell back, with the executions it forced; after: ops that fell back
    after the last execution (recorded at the end), which forced none."""
    table = ExecutionTable.of(executions)
    calls: Counter[str] = Counter(after)
    for number in table.in_order:
        runs = len(table.positions[number])
        for op, count in table.kinds[number].fallback_ops.items():
            calls[op] += count * runs
    forced = table.kinds_by(lambda kind: kind.detail if kind.cause == "fallback" and kind.detail else None)
    findings = []
    for op, count in calls.most_common():
        numbers = forced.get(op, [])
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
        library = library_line(stacks(table.kinds[numbers[0]].stack_id)) if numbers else None
        fix = _fallback_fix(op, library, call, len(positions), steps)
        findings.append(Finding(
            "fallback", "warning" if positions else "info",
            f"{op} falls back to the CPU{f' in {call}()' if call else ''}: {count} call{'s' if count != 1 else ''}, "
            f"forcing {len(positions)} execution{'s' if len(positions) != 1 else ''}{per_step_text}",
            frame, table.indices(positions), fix,
            {"op": op, "calls": count, "executions_forced": len(positions), "per_step": round(per_step, 3),
             "call": call, "library_line": f"{library.path}:{library.frame.line}" if library else None,
             "library_fix": library_fix(library) is not None},
        ))
    return _one_per_call(findings, table, steps)


def _fallback_fix(op: str, library: LibraryLine | None, call: str | None, forced: int, steps: int) -> str:
    """The most specific first: the library's code it ran in, the call the user made, the
    known path the op marks; an equivalent of the op only where the user calls it
    themselves (torch.where inside MultiheadAttention is not theirs to rewrite)."""
    own = call is None or call.startswith("Tensor.") or call.rpartition(".")[2] in op
    return (library_fix(library) or (call and CALL_FIXES.get(call.rpartition(".")[2])) or PATH_FIXES.get(op)
            or (OP_EQUIVALENTS.get(op) if own else None) or _no_lowering_fix(op, library, call, forced, steps))


def _no_lowering_fix(op: str, library: LibraryLine | None, call: str | None, forced: int, steps: int) -> str:
    """What to do about an op with no lowering and no known equivalent: where it runs, and what it costs."""
    how_often = (("once a step" if forced == steps else f"{forced / steps:.3g} times a step") if steps
                 else ("once" if forced == 1 else f"{forced} times"))
    cost = f"it syncs {how_often}" if forced else "it runs on the CPU (its inputs had no pending graph to run first)"
    if library is not None or call is not None:
        where = f" in {library.package}'s code ({library})" if library is not None else ""
        return (f"{op} has no lowering on this backend and runs{where} inside {call or 'your call'}(), not in your "
                f"own code: look for an option of that call that avoids it; otherwise {cost}")
    return (f"{op} has no lowering on this backend and no equivalent lazyviz has checked: write it from ops that "
            f"lower, or move it out of the step; otherwise {cost}")


def _one_per_call(findings: list[Finding], table: ExecutionTable, steps: int) -> list[Finding]:
    """The ops one call falls back through (scaled_dot_product_attention's all.dim,
    isneginf, where) are one finding about that call: the user changes the call. An op of
    the same path that forced no execution of its own (where.self_out, writing into a
    tensor the path made) joins it."""
    by_call: dict[str, list[Finding]] = defaultdict(list)
    for finding in findings:
        if finding.details["call"] and finding.executions:
            by_call[finding.details["call"]].append(finding)
    # A call with no Python frame of its own (F.scaled_dot_product_attention is torch's C
    # function): its path's ops at one line are that call, where.self with them.
    at_line: dict[tuple, list[Finding]] = defaultdict(list)
    for finding in findings:
        if not finding.details["call"] and finding.frame and finding.executions:
            path = _PATHS.get(finding.details["op"]) or _PATH_COMPANIONS.get(finding.details["op"])
            if path:
                at_line[(finding.frame, path)].append(finding)
    named: dict[int, Finding] = {}  # id of a finding -> the same, naming its call
    for (frame, path), group in at_line.items():
        if any(f.details["op"] in _PATHS for f in group) and len(group) > 1:
            call = _PATH_CALLS[path]
            named.update({id(f): replace(f, details={**f.details, "call": call}) for f in group})
            by_call[f"{call}@{frame.site}"] = [named[id(f)] for f in group]
    findings = [named.get(id(f), f) for f in findings]
    paths = {_PATHS[f.details["op"]]: call for call, group in by_call.items() for f in group if f.details["op"] in _PATHS}
    for finding in findings:
        path_call = paths.get(_PATHS.get(finding.details["op"], ""))
        if not finding.executions and path_call and len(by_call[path_call]) > 1:
            by_call[path_call].append(finding)
    merged = []
    for finding in findings:
        group = next((g for g in by_call.values() if finding in g), [])
        if len(group) < 2:
            merged.append(finding)
        elif finding is group[0]:  # the rest of the group are in it
            executions = tuple(sorted({e for f in group for e in f.executions}))
            ops = [f.details["op"] for f in group]
            calls = sum(f.details["calls"] for f in group)
            per_step = f" ({len(executions) / steps:.3g} per step)" if steps else ""
            merged.append(replace(
                finding,
                message=f"{finding.details['call']}() falls back to the CPU through {len(ops)} ops ({', '.join(ops)}): "
                        f"{calls} calls, forcing {len(executions)} execution{'s' if len(executions) != 1 else ''}"
                        f"{per_step}",
                executions=executions, fix=next((f.fix for f in group if f.details["library_fix"]), None)
                or next((f.fix for f in group if f.details["op"] in PATH_FIXES), finding.fix),
                details={**finding.details, "ops": ops, "calls": calls, "executions_forced": len(executions)}))
    return merged


def repeated_block(ops: list[str], max_period: int = 64, min_covered: int = 0) -> tuple[list[str], int, int] | None:
    """The block of ops repeated most times in a row, as (block, repeats, start), covering
    the most ops; None when nothing repeats MIN_REPEATS times. With min_covered, only a
    block covering at least that many ops is looked for, which is found quickly at any
    period up to max_period (a training step is hundreds of ops: pytorch/examples'
    mnist ~150, its word language model ~520); without, every period is scanned."""
    best: tuple[int, int, int, int] | None = None  # covered, period, repeats, start
    limit = min(max_period, len(ops) // MIN_REPEATS)
    periods = _periods_covering(ops, min_covered, limit) if min_covered else range(1, limit + 1)
    for period in periods:
        matches = list(map(operator.eq, ops, ops[period:]))  # ops[i] == ops[i + period]
        if sum(matches) < (MIN_REPEATS - 1) * period:
            continue
        at = 0
        for same, group in itertools.groupby(matches):
            run = sum(1 for _ in group)
            repeats = run // period + 1
            if same and repeats >= MIN_REPEATS and (best is None or repeats * period > best[0]):
                best = (repeats * period, period, repeats, at)
            at += run
    if best is None:
        return None
    _, period, repeats, start = best
    return ops[start:start + period], repeats, start


def _periods_covering(ops: list[str], covered: int, limit: int) -> list[int]:
    """The periods a block covering `covered` of the ops can have: such a stretch holds
    one of the positions a quarter, half and three quarters in (when it covers half the
    ops or more), and a few ops there recur one period later, so the distances to their
    next occurrences are the candidates. A few string searches instead of a scan per period."""
    codes: dict[str, str] = {}
    text = "".join(codes.setdefault(op, chr(0x100 + len(codes))) for op in ops)
    n, window = len(text), 4
    anchors = {n // 4, n // 2, 3 * n // 4} if covered >= n // 2 else set(range(0, n, max(1, covered // 2)))
    periods: set[int] = set()
    for anchor in anchors:
        probe = text[anchor:anchor + window]
        if len(probe) < window:
            continue
        at = text.find(probe, anchor + 1, anchor + limit + window)
        while at != -1:
            periods.add(at - anchor)
            at = text.find(probe, at + 1, anchor + limit + window)
    return sorted(periods)


def iterations_chain(graph: IRGraph, start: int, period: int, repeats: int) -> bool:
    """Whether the iterations of a repeated block feed each other, as an unrolled loop's
    do (each consumes what the one before it made), rather than run side by side, as
    torch's optimizers update parameters one at a time on a lazy device. start counts
    the graph's ops without its inputs (as repeated_block does). Found by joining the
    ops of the repeated stretch along their operands: a loop carries some value through
    most iterations; side-by-side updates make one group each, which reaches into its
    neighbours' iterations where the block starts mid-update (pytorch/examples' mnist
    with Adadelta: groups over 2-3 of 8 iterations)."""
    ops = [node for node in graph.nodes if not node.is_input][start:start + period * repeats]
    iteration = {node.id: i // period for i, node in enumerate(ops)}
    parent = {node_id: node_id for node_id in iteration}

    def root(node_id: str) -> str:
        while parent[node_id] != node_id:
            parent[node_id] = parent[parent[node_id]]
            node_id = parent[node_id]
        return node_id

    for node in ops:
        for operand in node.operand_ids:
            if operand in iteration:
                parent[root(operand)] = root(node.id)
    spans: dict[str, set[int]] = defaultdict(set)
    for node_id, index in iteration.items():
        spans[root(node_id)].add(index)
    return max(map(len, spans.values()), default=0) >= max(MIN_REPEATS, repeats // 2 + 1)


def layer_stack(graph: IRGraph, start: int, period: int, repeats: int) -> bool:
    """Whether a chained repeated block is a model's stack of layers, each with its own
    weights (a transformer's blocks: makemore's 4 layers, 13 weight tensors each, hand 4
    values on), not a loop's iterations: every repeat reads at least 4 tensors from the
    graph's inputs that no other repeat reads, and twice what it takes from the repeat
    before. An unrolled training loop carries every parameter and optimizer state on and
    reads only its batch (mnist: 41 values on, 1-2 tensors of its own); a loop over shared
    weights reads none of its own, or what it uploads each time (a sampler's noise). A
    stack of bare Linear layers (2 weights each) stays unknown: said as a loop, as before.
    Scalars are not counted: the lazy device makes a constant per use."""
    nodes = graph.nodes
    ops = [node for node in nodes if not node.is_input][start:start + period * repeats]
    repeat = {node.id: i // period for i, node in enumerate(ops)}
    tensors = {node.id for node in nodes if node.is_input and any(t.shape for t in node.outputs)}
    readers: dict[str, set[int]] = defaultdict(set)  # an input tensor -> the repeats reading it
    carried: dict[int, set[str]] = defaultdict(set)  # a repeat -> what it reads of the one before
    for node in ops:
        here = repeat[node.id]
        for operand in node.operand_ids:
            if operand in tensors:
                readers[operand].add(here)
            elif repeat.get(operand) == here - 1:
                carried[here].add(operand)
    own = Counter(next(iter(seen)) for seen in readers.values() if len(seen) == 1)
    return all(own[k] >= max(4, 2 * len(carried[k])) for k in range(repeats))


MIN_GROWING_SYNCS = 3  # syncs at one site before steady growth is a pattern, not chance


def _growing_sites(table: ExecutionTable) -> dict[str, tuple[Sequence[int], int]]:
    """Sites whose graph grows by a steady amount at nearly every sync: site -> (the
    positions of its executions, the median growth in nodes)."""
    growing = {}
    nodes_of = [kind.nodes for kind in table.kinds]
    for site, numbers in table.kinds_by(lambda kind: kind.site).items():
        if len(numbers) == 1:
            continue  # one graph, one size: no growth
        positions = table.merged(numbers)
        if len(positions) < MIN_GROWING_SYNCS:
            continue
        sizes = list(map(nodes_of.__getitem__, map(table.kind.__getitem__, positions)))
        growths = sorted(Counter(map(operator.sub, sizes[1:], sizes[:-1])).items())
        # The median and how many are near it, from the counts of each growth.
        total = len(sizes) - 1
        seen, median = 0, 0
        for growth, count in growths:
            seen += count
            if seen > total // 2:
                median = growth
                break
        steady = sum(count for growth, count in growths if median / 2 <= growth <= median * 2)
        if median >= 4 and steady >= max(2, total * 3 // 4):
            growing[site] = (positions, median)
    return growing


def growing_graphs(executions: Sequence[Execution]) -> set[str]:
    table = ExecutionTable.of(executions)
    return {table.kind_at(p).graph for positions, _ in _growing_sites(table).values() for p in positions}


def _lines_that_built(graphs: IRGraphs, graph_id: str, limit: int = 3) -> str:
    """", built at lm.py:140 (412 nodes), lm.py:152 (96)": the lines that built most of a
    graph's ops, where the IR records them; "" where it does not."""
    graph = graphs.parsed(graph_id)
    if graph is None:
        return ""
    lines = graph.built_at
    if not lines:
        return ""
    shown = [f"{line} ({count} node{'s' if count != 1 else ''})" for line, count in lines.most_common(limit)]
    return ", built at " + ", ".join(shown)


# Copies of whole tensors (torch.save's, a state moved by hand): a loop's `.item()` each
# iteration reads one value at one line again and again, which is not this.
_HOST_READS = frozenset({"cpu", "to"})
MIN_READS_IN_A_ROW = 4  # reads of one line, back to back, that make "one at a time"
COSTLIEST_SITES = 3  # only among the run's costliest sites: a few cheap reads are nobody's problem


def one_by_one_read_findings(executions: Sequence[Execution], names: Mapping[str, str] = TS_NAMES) -> list[Finding]:
    """One line reads many tensors to the host one at a time, each read its own graph (on
    PyTorch/XLA `torch.save(model.state_dict(), path)` ran 41 graphs, 58% of a run's sync
    time, at one line): among the run's costliest sync sites, a run of reads at one line
    with nothing else between. Moved together after one sync they copy without a graph each."""
    table = ExecutionTable.of(executions)
    by_site = table.group_by(lambda kind: kind.site if kind.cause in _HOST_READS and kind.frame else None)
    costs = table.group_by(lambda kind: kind.site if kind.frame else None)
    costliest = sorted(costs, key=lambda site: -table.sum(table.sync_ms, costs[site]))[:COSTLIEST_SITES]
    growing = _growing_sites(table)  # a loop's read at each iteration, its graph growing: not one by one
    findings = []
    for site in costliest:
        if site in growing:
            continue
        positions = by_site.get(site, [])
        longest = max((len(run) for run in _runs(positions)), default=0)
        if longest < MIN_READS_IN_A_ROW:
            continue
        first = table.kind_at(positions[0])
        graphs = len({table.kind_at(p).graph for p in positions})
        ms = table.sum(table.sync_ms, positions)
        findings.append(Finding(
            "one_by_one_reads", "warning",
            f"{len(positions)} reads to the host at this line ({first.detail or first.cause}), up to {longest} in a "
            f"row with nothing between, each an execution of its own ({graphs} graph{'s' * (graphs != 1)}, "
            f"{ms:,.0f} ms): a state or a list of tensors moved one tensor at a time (torch.save of a state_dict "
            "does this)",
            first.frame, table.indices(positions),
            f"call {names['mark_step']} first, then move them: after the sync they are device data and copy "
            "without a graph each (for torch.save: save the state moved to the CPU)",
            {"cause": first.cause, "count": len(positions), "in_a_row": longest, "graphs": graphs},
            short=f"{len(positions)} reads to the host one at a time ({graphs} graphs, {ms:,.0f} ms)",
        ))
    return findings


def collective_findings(table: ExecutionTable, graphs: IRGraphs, annotations: Sequence[Annotation],
                        steps: int) -> list[Finding]:
    """Data moved between devices that the layout did not ask for (PyTorch/XLA SPMD): a
    gather or a reshuffle the partitioner added because an annotation disagrees with how
    an op uses the tensor. One finding per line of the op it serves; those without a line
    (autograd's backward) go with the finding of their graph."""
    if not graphs.has_hlo:
        return []
    at_line: dict[str, list[Moved]] = defaultdict(list)
    lineless: dict[str, list[Moved]] = defaultdict(list)  # by graph
    advised: dict[str, Advice] = {}
    batch_gathered: dict[str, tuple[int, int]] = {}
    for moved in run_collectives(table, graphs.hlo, annotations):
        collective = moved.collective
        if moved.expected:
            continue
        if not collective.line:
            lineless[moved.graph].append(moved)
            continue
        at_line[collective.location].append(moved)
        if collective.location not in advised:
            found = advice(graphs.hlo(moved.graph), collective, annotations)
            if found is not None:
                advised[collective.location] = found
        counted = whole_batch(graphs.hlo(moved.graph), collective, annotations)
        if counted is not None and collective.location not in batch_gathered:
            batch_gathered[collective.location] = counted
    for graph_id, moved in lineless.items():  # with the graph's line that moves the most, else on their own
        lines = [line for line, group in at_line.items() if any(m.graph == graph_id for m in group)]
        at_line[max(lines, key=lambda line: per_step(at_line[line], steps)) if lines else ""].extend(moved)
    return [_collective_finding(moved, advised.get(location), steps, table, batch_gathered.get(location))
            for location, moved in at_line.items()]


def _collective_finding(moved: list[Moved], found: Advice | None, steps: int, table: ExecutionTable,
                        batch: tuple[int, int] | None = None) -> Finding:
    kinds = sorted({m.collective.kind for m in moved}, key=COLLECTIVE_KINDS.index)
    named = [m for m in moved if m.collective.line]
    first = (named or moved)[0].collective
    distinct = list(dict.fromkeys((m.collective.kind, m.collective.shape, m.collective.line, _over(m)) for m in moved))
    shown = [f"{kind} {shape}{over}" for kind, shape, line, over in distinct if line][:3]
    backward = [f"{kind} {shape}{over}" for kind, shape, line, over in distinct if not line]
    per = "per step" if steps else "in the run"
    sent = size_text(per_step(moved, steps))
    message = (f"XLA moves data between devices here that the layout did not ask for: "
               f"{', '.join(shown) or ', '.join(backward[:3])}{f' for {first.op}' if named and first.op else ''}"
               + (f", and {len(backward)} more in the backward pass ({', '.join(backward[:3])})" if named and backward
                  else "")
               + f"; each device sends {sent} {per} for them.")
    if batch is not None:  # the batch itself gathered: the op could not stay split over it
        whole, of = batch
        message = (f"XLA gathers the whole batch ({first.shape}, its first dimension split over "
                   f"{_over(named[0] if named else moved[0]).removeprefix(' over ')}) for {first.op or 'this op'}: "
                   f"{whole} of the graph's {of} matmuls and convolutions over the batch run on the whole of it on "
                   f"every device, not on the device's share; each device sends {sent} {per} for the gather.")
        fix = _WHOLE_BATCH_FIX.get(first.op, _WHOLE_BATCH_FIX[""])
    elif found is not None:
        where = f"{found.annotation.frame.file.rsplit('/', 1)[-1]}:{found.annotation.frame.line}"
        message += (f" The annotation at {where} splits its tensor {_spec(found.annotation.spec)} on a dimension "
                    "the matmul keeps, so XLA gathers the other operand to use it.")
        fix = (f"annotate it {_spec(found.spec)} at {where}: split on the dimension the matmul sums over, and XLA "
               "adds partial products with one all-reduce instead of gathering")
    else:
        fix = ("by hand: make the annotations of this op's operands agree with how it uses them (a matmul's weight "
               "split on the dimension it sums over, its input split as the weight expects); `lazyviz diff` of the "
               "two runs shows the collectives gone")
    frame = Frame(first.file, first.line, "") if named else (found.annotation.frame if found else None)
    indices = table.indices(sorted({p for m in moved for p in m.positions}))
    details = {"collectives": [dict(m.collective.to_json(), axes=list(m.axes), executions=len(m.positions))
                               for m in moved],
               "sent_bytes_per_step" if steps else "sent_bytes": round(per_step(moved, steps))}
    if found is not None:
        details |= {"annotation": found.annotation.frame.to_json(), "annotated_spec": list(found.annotation.spec),
                    "suggested_spec": list(found.spec)}
    return Finding("unasked_collective", "warning", message, frame, indices, fix, details,
                   short=f"{' and '.join(kinds)} the layout did not ask for: {sent} {per}")


# What keeps a batch split through an op XLA's partitioner gathers it for (checked on
# torch_xla 2.9's CPU devices: tests/programs/xla_spmd_batchnorm.py).
_WHOLE_BATCH_FIX = {
    "aten::native_batch_norm": (
        "by hand: XLA's partitioner does not split batch norm over the batch here, and annotating its output "
        "back to the split does not stop the gather; batch statistics from reductions split with an all-reduce of "
        "the statistics instead: mean = x.mean((0, 2, 3), keepdim=True), var = x.var((0, 2, 3), unbiased=False, "
        "keepdim=True), then (x - mean) / torch.sqrt(var + eps) * weight + bias (the same loss, the gather gone)"),
    "": ("by hand: XLA's partitioner could not keep this op split over the batch; write it from ops it splits "
         "(elementwise ops, reductions and matmuls over the batch's dimension), and check with `lazyviz diff` of "
         "the two runs that the gather is gone"),
}


def _over(moved: Moved) -> str:
    """The mesh axes and devices a collective runs over, as the sentence says it: " over 'model' (4 devices)"."""
    devices = moved.collective.group_size
    axes = "+".join(f"'{axis}'" for axis in moved.axes)
    return f" over {axes} ({devices} devices)" if axes and devices else f" over {devices} devices" if devices else ""


def _spec(spec: Sequence) -> str:
    """A partition spec as the script writes it: ('model', None)."""
    return repr(tuple(tuple(e) if isinstance(e, list) else e for e in spec))


def _runs(positions: Sequence[int]) -> list[list[int]]:
    """Positions split where another execution came between."""
    runs: list[list[int]] = []
    for position in positions:
        if runs and runs[-1][-1] == position - 1:
            runs[-1].append(position)
        else:
            runs.append([position])
    return runs


def stepless_loop_findings(executions: Sequence[Execution], marks: Sequence[int],
                           names: Mapping[str, str] = TS_NAMES) -> list[Finding]:
    """A training loop without mark_step(), told by the optimizer's steps (marks: the
    executions recorded when each returned) however its syncs hide it: iterations that
    ended with no sync at all (a loss printed every 10 iterations runs 10 as one graph),
    or a largest graph that grows iteration after iteration (fallbacks that sync every
    iteration, AdamW's lerp_ once per parameter, never cut the parameters' updates)."""
    table = ExecutionTable.of(executions)
    unsynced = unsynced_iterations(marks)
    bounds = list(zip([0, *marks[:-1]], marks))
    largest = [max((table.kind_at(p).nodes for p in range(start, min(stop, len(table)))), default=0)
               for start, stop in bounds if start < len(table)]
    growing = len(largest) >= 3 and all(a < b for a, b in itertools.pairwise(largest[-3:])) \
        and largest[-1] >= 1.5 * largest[-3]
    if unsynced:
        # The execution that ran each piled-up iteration's work: the first after it.
        positions = sorted({p for k in unsynced if (p := table.position_of(marks[k])) is not None})
        held = max((table.kind_at(p).nodes for p in positions), default=0)
        what = (f"{len(unsynced)} of those iterations ended with no sync at all: a loop runs without "
                f"{names['mark_step']}, so one graph holds the work of several iterations"
                + (f"; the graphs that ran them hold up to {held} nodes" if positions else "")
                + ", compiled again whenever their count changes")
        details = {"unsynced_iterations": len(unsynced)}
    elif growing:
        start, stop = bounds[len(largest) - 1]
        last = range(start, min(stop, len(table)))
        positions = [max(last, key=lambda p: table.kind_at(p).nodes)]
        shown = " -> ".join(map(str, largest[:3])) + (f" -> ... -> {largest[-1]}" if len(largest) > 3 else "")
        what = (f"the largest graph of each iteration grows ({shown} nodes): a loop runs without "
                f"{names['mark_step']}, so the parameters' updates are never cut from the graph and each "
                "iteration's syncs run all of them again")
        details = {"largest_per_iteration": largest[:50]}
    else:
        return []
    frame = table.kind_at(positions[0]).frame if positions else None
    return [Finding(
        "missing_mark_step", "warning", f"the optimizer stepped {len(marks)} times and {what}",
        frame, table.indices(positions),
        f"call {names['mark_step']} at the end of each iteration (after the optimizer step)",
        {**details, "optimizer_steps": len(marks)},
        short=f"the optimizer stepped {len(marks)} times and no step ended: "
              + ("iterations ran with no sync" if unsynced else "its largest graph grows each iteration"),
    )]


def growing_site_findings(executions: Sequence[Execution], names: Mapping[str, str] = TS_NAMES,
                          ir_texts: Mapping[str, str] | None = None) -> list[Finding]:
    """The graph synced at one site grows by about the same number of nodes at every
    sync: a loop runs without mark_step(), so the work of all the iterations so far
    (an optimizer's updates, say) is still pending and each sync runs it again. Found
    by size alone, however big an iteration is."""
    table = ExecutionTable.of(executions)
    findings = []
    for positions, growth in _growing_sites(table).values():
        sizes = [table.kind_at(p).nodes for p in positions]
        shown = " -> ".join(map(str, sizes[:4])) + (f" -> ... -> {sizes[-1]}" if len(sizes) > 4 else "")
        first = table.kind_at(positions[0])
        what = first.detail or first.cause
        largest = table.kind_at(positions[sizes.index(max(sizes))])
        built = _lines_that_built(IRGraphs.of(ir_texts), largest.graph) if ir_texts else ""
        findings.append(Finding(
            "missing_mark_step", "warning",
            f"the graph {what} runs here grows by about {growth} nodes at every sync ({shown} nodes over "
            f"{len(positions)} syncs{built}): a loop runs without {names['mark_step']}, so each sync runs all "
            "the work pending since the loop began",
            first.frame, table.indices(positions),
            f"call {names['mark_step']} at the end of each iteration (after the optimizer step); then "
            f"{what} costs one small execution, or none if read in {names['step_closure']}",
            {"growth_per_sync": growth, "syncs": len(positions), "nodes": sizes[:50]},
        ))
    return findings


def _ops_text(block: list[str], limit: int = 6) -> str:
    shown = ", ".join(block[:limit])
    return f"[{shown}{f', ... {len(block)} ops' if len(block) > limit else ''}]"


def growth_findings(executions: Sequence[Execution], ir_texts: Mapping[str, str],
                    names: Mapping[str, str] = TS_NAMES, skip: set[str] = frozenset(),
                    stacks: Stacks = no_stacks) -> list[Finding]:
    """A graph that repeats one block of ops many times over: a loop ran without
    mark_step() and its iterations piled up into one graph. skip: graphs a finding
    already covers (a growing site). A graph run only inside a host-side library call
    (make_grid's copy of each image into the grid inside save_image) is that library's
    own loop within one call of the user's: the host-call finding says it."""
    table = ExecutionTable.of(executions)
    graphs = IRGraphs.of(ir_texts)
    findings = []
    # Graphs of one structure (only shapes or constants differ) are searched once: a run
    # that recompiles at every step has thousands of them, parsed once already.
    loops: dict[int, tuple[list[str], int] | None] = {}  # structure -> (the block, its repeats)
    blocks: dict[tuple[str, ...], tuple[list[str], int, int] | None] = {}  # the same ops, searched once
    inside: dict[int | None, bool] = {}
    for kind in table.kinds:
        if kind.stack_id not in inside:
            inside[kind.stack_id] = kind.stack_id is not None and host_call(stacks(kind.stack_id)) is not None
    runs_of = table.kinds_by(lambda kind: kind.graph if kind.graph not in skip else None)
    runs_of = {graph: numbers for graph, numbers in runs_of.items()
               if not all(inside[table.kinds[n].stack_id] for n in numbers)}
    by_block: dict[tuple[str, ...], int] = {}  # one finding per repeated block, however many graphs hold it
    for graph_id, numbers in runs_of.items():
        summary = graphs.summary(graph_id)
        if summary is None:
            continue
        if summary.structure not in loops:
            loops[summary.structure] = _unrolled_loop(graphs.parsed(graph_id), blocks)
        if loops[summary.structure] is None:
            continue
        block, repeats = loops[summary.structure]
        positions = table.merged(numbers)
        if tuple(block) in by_block:
            earlier = findings[by_block[tuple(block)]]
            holding = earlier.details["graphs"] + [graph_id]
            findings[by_block[tuple(block)]] = replace(
                earlier, executions=tuple(sorted({*earlier.executions, *table.indices(positions)})),
                details={**earlier.details, "graphs": holding})
            continue
        by_block[tuple(block)] = len(findings)
        first = table.kinds[numbers[0]]
        findings.append(Finding(
            "missing_mark_step", "warning",
            f"graph {graph_id} ({summary.size} nodes{_lines_that_built(graphs, graph_id)}) repeats "
            f"{_ops_text(block)} {repeats} times: "
            f"a loop ran {repeats} iterations without mark_step() and they piled up into one graph, "
            f"run by {first.detail or first.cause}",
            first.frame, table.indices(positions),
            f"call {names['mark_step']} at the end of each iteration of the loop that builds it "
            f"(the loop runs before line {first.frame.line if first.frame else '?'})",
            {"graph": graph_id, "pattern": block, "repeats": repeats, "nodes": summary.size, "graphs": [graph_id]},
        ))
    return [_also_in(f) for f in findings]


def _unrolled_loop(graph: IRGraph | None, blocks: dict[tuple[str, ...], tuple[list[str], int, int] | None]
                   ) -> tuple[list[str], int] | None:
    """(the repeated block, how many times) where the graph is a loop's iterations piled
    up; None where it is not. blocks: the repeated block of each op sequence, kept."""
    if graph is None:
        return None
    ops = list(graph.ops)
    if graph.ops not in blocks:
        blocks[graph.ops] = repeated_block(ops, max_period=1024, min_covered=max(16, len(ops) // 2))
    found = blocks[graph.ops]
    if found is None:
        return None
    block, repeats, start = found
    if len(block) * repeats < max(16, len(ops) // 2):
        return None  # a small repeated motif inside a normal graph
    if not iterations_chain(graph, start, len(block), repeats):
        return None  # side by side, not a loop: an optimizer updating its parameters one by one
    if layer_stack(graph, start, len(block), repeats):
        return None  # a model's layers, each with its own weights: the forward's structure, not a loop
    return block, repeats


def _also_in(finding: Finding) -> Finding:
    """A repeated block found in several graphs (the syncs after it ran it too): said once."""
    more = len(finding.details["graphs"]) - 1
    if not more:
        return finding
    return replace(finding, message=f"{finding.message} (and {more} more graph{'s' if more > 1 else ''} "
                                    "holding the same repeated block)")
