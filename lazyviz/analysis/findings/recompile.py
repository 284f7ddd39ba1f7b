"""A graph compiled again at a site that had compiled it: what changed between the two
(a constant, a shape, a dtype, a path), and the fix for that change. A shape that
changes at every batch is its own kind, dynamic_shape."""
from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace

from lazyviz.analysis.findings._shared import in_test, lines_that_built
from lazyviz.analysis.findings.base import Details, Finding, FindingKind, KindInfo, RunFacts
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.recompiles import PendingRecompile, Recompile


@dataclass(frozen=True)
class ShapeStep:
    """One recompile of a dynamic-shape finding: when, and the sizes that changed."""

    step: int
    execution: int
    changes: tuple[str, ...]  # "%3 [8, 10] -> [7, 10]"

    def to_json(self) -> dict:
        return {"step": self.step, "execution": self.execution, "changes": list(self.changes)}


@dataclass(frozen=True, kw_only=True)
class RecompileDetails(Details):
    """A recompile's (recompile) or one site's changing input sizes (dynamic_shape)."""

    recompiles: int
    steps: int | None  # the steps they were in; None in a run without steps
    changes: tuple[str, ...]  # the kinds of change: input_shape, attribute, dtype, ...
    sites: tuple[str, ...] = ()  # where one cause reaches several sync sites: each
    compared: int | None = None  # recompiles diffed against their closest graph (the rest counted)
    closest_graph: str | None = None  # the graph it was compared with, and that graph's execution
    closest_execution: int | None = None
    new_graph: str | None = None
    history: tuple[ShapeStep, ...] = ()  # dynamic_shape: each recompile's sizes

    @property
    def subject(self) -> str:
        return ",".join(self.changes)


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
        message += lines_that_built(IRGraphs.of(ir_texts), first.graph)
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
        FindingKind.RECOMPILE, "warning", in_test(first.context) + message,
        first.frame, tuple(sorted(executions)),
        fix=_recompile_fix(first),
        details=RecompileDetails(
            closest_graph=first.closest, closest_execution=first.closest_execution, new_graph=first.new_graph,
            recompiles=count, compared=len(group), steps=len(at_steps) if steps else None,
            changes=tuple(sorted({c.kind for c in (first.diff.origins if first.diff else ())}))),
        short=in_test(first.context) + short,
    )


def _shape_finding(group: list[Recompile], steps: int) -> Finding:
    """One site's recompiles for input sizes alone: one step's change, sizes that change
    again and again (batches), or an input that grows by the same size each time."""
    history = tuple(ShapeStep(r.step, r.execution,
                              tuple(f"{c.node} {c.before} -> {c.after}" for c in r.diff.origins if c.kind in _SIZES))
                    for r in group)
    first = next(c for c in group[0].diff.origins if c.kind in _SIZES)
    built = f", built at {first.source_line}" if first.location else ""
    compiled = group[0].traced_again is not None
    if compiled:
        # torch.compile's bridge traces the module's inputs at its call: where they were
        # made is before it. Dynamo's own words say which argument changed.
        reason = group[0].traced_again
        built = f" (dynamo traced it again: {reason})" if reason else " (dynamo traced it again)"
    # An input's shape, or a size a tensor was made at on the device (in the graph).
    what = "input shape" if first.kind == "input_shape" else f"{first.op.rpartition('::')[2]} shape"
    if compiled:
        what = "the compiled module's input shape"
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
    message = in_test(group[0].context) + message
    return Finding(
        FindingKind.RECOMPILE if once else FindingKind.DYNAMIC_SHAPE, "warning", message, group[0].frame,
        tuple(r.execution for r in group),
        fix=_ACCUMULATOR_FIX if growth is not None and not once else _COMPILED_SHAPE_FIX if compiled else _SHAPE_FIX,
        details=RecompileDetails(history=history, changes=(first.kind,), recompiles=len(group),
                                 steps=len({r.step for r in group}) if steps else None),
        short=in_test(group[0].context) + short,
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
    if any(r.traced_again is not None for r in group):
        return False  # torch.compile's graph: its inputs are traced at the call, made before it
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
    pairs = sorted(zip(findings, groups), key=lambda pair: (pair[0].details.changes != ("input_shape",),
                                                             -pair[0].details.recompiles))
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
        sites = first.details.sites or (first.frame.site if first.frame else "?",)
        site = finding.frame.site if finding.frame else "?"
        count = first.details.recompiles + finding.details.recompiles
        steps = first.details.steps and len(at_steps[known])
        merged[known] = replace(
            first, executions=tuple(sorted({*first.executions, *finding.executions})),
            details=replace(first.details, sites=sites if site in sites else (*sites, site), recompiles=count,
                            steps=steps))
    return [_reaching(f) for f in merged]


def _reaching(finding: Finding) -> Finding:
    sites = finding.details.sites
    if not sites:
        if finding.kind == FindingKind.DYNAMIC_SHAPE and finding.details.steps:
            recompiles, steps = finding.details.recompiles, finding.details.steps
            more = ", each a recompile" if recompiles == steps else f" ({recompiles} recompiles)"
            return replace(finding, message=finding.message.replace(" steps (first ", f" steps{more} (first ", 1))
        return finding
    shown = ", ".join(site.rpartition("/")[2] for site in sites)
    where = f"at {len(sites)} sync sites: {shown}" if len(sites) > 1 else f"at {shown}"
    return replace(finding, message=f"{finding.message} (one cause: {finding.details.recompiles} recompiles "
                                    f"{where})")



_ALIASING_FIX = ("two Python numbers used in the step became equal (or stopped being equal), so torch gave "
                 "them one shared device buffer and hashed that into the cache key: create such values once "
                 "as tensors on the device instead of passing Python numbers")
_DTYPE_FIX = "an input's dtype changed between steps: cast it once, where it is made, so every step sees one dtype"
_SHAPE_FIX = "pad or bucket batches to a few fixed shapes (or drop_last=True in the DataLoader)"
# torch.compile(backend="openxla"): dynamo traces again and XLA compiles again for each new
# size; the bridge compiles one XLA graph per size even where dynamo's graph is dynamic.
_COMPILED_SHAPE_FIX = ("call the compiled module with inputs of the sizes it has seen: pad each batch to one size "
                       "(or bucket them to a few), or drop_last=True in the DataLoader; "
                       "torch._dynamo.mark_dynamic(x, 0) before the first call spares dynamo's trace, but XLA still "
                       "compiles once per size")
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


KINDS = (KindInfo(FindingKind.RECOMPILE, "recompile", "miss", RecompileDetails),
         KindInfo(FindingKind.DYNAMIC_SHAPE, "shapes", "miss", RecompileDetails))


def find(facts: RunFacts) -> list[Finding]:
    return recompile_findings(facts.recompiles, facts.steps, facts.graphs)
