"""Explain every cache miss that is not the first graph of its site: the closest graph
compiled before (same site first, then any), and what differs, origins first."""
from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from lazyviz.analysis.diff import Change, GraphDiff, least_score
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.hlo import hlo_changes, hlo_input_changes
from lazyviz.analysis.loops import iteration_of
from lazyviz.hlo_text import FROM_HLO
from lazyviz.trace.model import TRACED_AGAIN, Execution, Frame
from lazyviz.trace.table import ExecutionTable, Kind

# Misses in the first steps are warm-up: step 0 also runs initialisation, step 1 is the
# first steady-state step (optimizer state now exists). Counted from the run's first step,
# or for a sync site that first syncs later (an evaluation loop) from its first step.
WARMUP_STEPS = 2
MAX_RANKED = 64  # the most recent candidates ranked by shared ops: bounded time on sites with hundreds
MAX_DIFFED = 3  # of those, the best few are diffed node by node
# Below this share of ops in common with every earlier graph, a graph is new: listing
# hundreds of "op added" lines against an unrelated graph explains nothing.
NEW_GRAPH_OVERLAP = 0.5


@dataclass(frozen=True)
class Recompile:
    execution: int
    step: int
    graph: str
    closest: str | None  # the graph compared against; None when nothing was compiled before
    closest_execution: int | None
    same_site: bool
    frame: Frame | None
    warmup: bool
    diff: GraphDiff | None  # None when the IR was not captured or did not parse, or for a new graph
    note: str = ""
    new_graph: bool = False  # no earlier graph is close: closest is only the nearest one
    same_hlo: bool = False  # XLA: the same HLO as closest, yet compiled anew (what differs is not in it)
    choice: str = ""  # which graph was compared against and why, in one line
    context: str | None = None  # the test that ran it, under pytest
    # torch.compile's graph run by the compiled module's call (cause "compiled"): why dynamo
    # traced it again, in its words, where it said ("" else).
    traced_again: str | None = None

    @property
    def changes(self) -> tuple[Change, ...]:
        return self.diff.changes if self.diff else ()

    def headline(self) -> str:
        if self.diff is None:
            return self.note or "no IR to compare"
        first = self.diff.first
        if first is None and self.note:  # a value XLA's IR text does not print
            return self.note
        if first is None:
            return (f"same IR as graph {self.closest}, but its inputs share buffers differently "
                    "(a Python number now equal or no longer equal to another input): torch hashes that "
                    "into the cache key")
        origins = self.diff.origins
        moved = [c for c in origins if c.kind in ("op_added", "op_removed")]
        if first.kind in ("op_added", "op_removed") and len(moved) > 1:
            # A branch or a new phase: say how many ops and which lines built them.
            parts = [_ops_summary([c for c in moved if c.kind == kind], verb)
                     for kind, verb in (("op_added", "added"), ("op_removed", "removed"))]
            more = len(origins) - len(moved)
            return "; ".join(p for p in parts if p) + (f" (+{more} more)" if more > 0 else "")
        more = len(origins) - 1
        return first.describe() + (f" (+{more} more)" if more > 0 else "")


    def brief(self, compact: bool = False) -> str:
        """What changed in a few words: "shape 16->24, built at train.py:28", "new graph",
        "+52 ops", "aliasing". compact: the line as ":28" (a table cell)."""
        if self.new_graph:
            return "new graph"
        if self.diff is None:
            return "first graph" if self.closest is None else "changed (no IR to compare)"
        origins = self.diff.origins
        if not origins:
            return "same HLO" if self.same_hlo else "a value not in the IR" if self.note else "aliasing"
        first = origins[0]
        if first.kind in ("op_added", "op_removed"):
            added = sum(1 for c in origins if c.kind == "op_added")
            removed = sum(1 for c in origins if c.kind == "op_removed")
            return " ".join(p for p in (f"+{added} ops" if added else "", f"-{removed} ops" if removed else "") if p)
        if first.kind in ("input_shape", "shape"):
            text = f"shape {_shape_change(first.before, first.after)}"
        elif first.kind == "dtype":
            text = f"dtype {first.before.partition('[')[0]}->{first.after.partition('[')[0]}"
        elif first.kind == "attribute":
            text = f"constant {_value_change(first.before, first.after)}"
        else:
            text = first.kind
        if first.location:
            text += f" at :{first.source_line.rpartition(':')[2]}" if compact else f", built at {first.source_line}"
        return text + (f" +{len(origins) - 1}" if compact and len(origins) > 1 else "")


def _shape_change(before: str, after: str) -> str:
    """"16->24" from "Float[16,32]" -> "Float[24,32]": only the dimension that differs,
    where the dtype and rank are the same; else both shapes."""
    dtype_a, _, dims_a = before.partition("[")
    dtype_b, _, dims_b = after.partition("[")
    a, b = dims_a.rstrip("]").split(","), dims_b.rstrip("]").split(",")
    if dtype_a == dtype_b and len(a) == len(b):
        changed = [(x, y) for x, y in zip(a, b) if x != y]
        if len(changed) == 1:
            return f"{changed[0][0]}->{changed[0][1]}"
    return f"{before}->{after}"


def _shared(a: str, b: str) -> int:
    """How many characters a and b share from their start."""
    return next((at for at, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _value_change(before: str, after: str) -> str:
    """"[1:17]->[2:18]" from "slice={[0:64], [1:17]}" -> "slice={[0:64], [2:18]}": the
    words that differ, without what the two share at either end."""
    head = _shared(before, after)
    tail = min(_shared(before[::-1], after[::-1]), len(before) - head, len(after) - head)
    while head and before[head - 1] not in "[{(,= ":
        head -= 1
    ends = []
    for text in (before, after):
        end = len(text) - tail
        while end < len(text) and text[end] not in "]}),= ":
            end += 1
        ends.append(end)
    old, new = before[head:ends[0]], after[head:ends[1]]
    if head and before[head - 1] == "[" and ends[0] < len(before) and before[ends[0]] == "]":
        old, new = f"[{old}]", f"[{new}]"  # a whole bracket: "[1:17]"
    return f"{old}->{new}" if old and new else f"{before}->{after}"


def _ops_summary(changes: list[Change], verb: str) -> str:
    """"61 ops added (aten::mul x30, aten::sum x30, ...), built at train.py:29 (61)"."""
    if not changes:
        return ""
    ops = Counter(c.op.rpartition("::")[2] if c.op.startswith("lazy_tensors::") else c.op for c in changes)
    shown = ", ".join(f"{op} x{n}" if n > 1 else op for op, n in ops.most_common(3))
    # Lines in graph order: the first is where the new work starts (a forward line), later
    # ones what it brings along (its backward).
    lines = Counter(c.source_line for c in changes if c.location)
    built = (", built at " + ", ".join(f"{line} ({lines[line]})" for line in list(lines)[:2])) if lines else ""
    return (f"{len(changes)} op{'s' if len(changes) != 1 else ''} {verb} "
            f"({shown}{', ...' if len(ops) > 3 else ''}){built}")


class PendingRecompile:
    """A recompile whose explanation waits: what is cheap to know now (which execution,
    where, warm-up or not), and the rest of a Recompile (the graph diff, the costly part)
    computed on first use. Warm-up ones (never a finding) and those past the first
    EXPLAINED_PER_SITE at one site (the findings group them with the first ones).
    promised: one the run's explanation includes (a warm-up one of a small run: the JSON
    lists it as explained), computed only when read all the same: no finding reads it."""

    def __init__(self, execution: Execution, compiled: Compiled, at_site: Compiled,
                 graphs: IRGraphs, warmup: bool = True, promised: bool = False) -> None:
        self.execution, self.step, self.graph = execution.index, execution.step, execution.graph
        self.frame, self.context, self.warmup = execution.frame, execution.context, warmup
        self.promised = promised
        # The graphs compiled before it, in all and at its site: the first so many of
        # lists that only grow (no copy each).
        self._explain = (execution, compiled, len(compiled), at_site, len(at_site), graphs)

    @cached_property
    def explained(self) -> Recompile:
        execution, compiled, before, at_site, before_at_site, graphs = self._explain
        return _explain(execution, compiled, graphs, self.warmup, at_site, before, before_at_site)

    @property
    def is_explained(self) -> bool:
        """Whether it counts as compared: explained already, or promised to be when read."""
        return self.promised or "explained" in self.__dict__

    def __getattr__(self, name: str) -> Any:  # the Recompile's fields and methods, explained now
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.explained, name)


# Warm-up recompiles explained at once while their graphs' nodes add up to less than
# this (small programs read as before); the rest wait until asked.
EAGER_WARMUP_NODES = 20_000
# Recompiles after warm-up that changed the graph's structure (ops added or removed)
# explained at once per site: enough to show the kind of change; the rest are counted.
# A recompile that only changed values (the same computation node for node as a graph
# before) is always explained: that diff is linear, and it is the headline finding.
EXPLAINED_PER_SITE = 8


def role(item: Execution | Kind) -> str:
    """What a graph is compared within: its sync site; for a library's own syncs (cause
    other) the whole call path too, since one call may sync several different graphs
    (xm.mesh_reduce: a size, then the payload), none a recompile of another."""
    if item.cause == "other" and item.stack_id is not None:
        return f"{item.site}#{item.stack_id}"
    return item.site


class _Roles:
    """Where a run has steps, a sync's role is also its place among its site's syncs in
    its step: one line may sync several different graphs in every step (clip_grad_norm_'s
    fallback, once per parameter; MultiheadAttention's isneginf, all and where), and the
    k-th is compared with the k-th of the steps before, never with its neighbours."""

    def __init__(self, table: ExecutionTable, stepless: bool) -> None:
        self.table, self.stepless = table, stepless
        self._kinds_at = table.kinds_by(lambda kind: (kind.context, role(kind)))
        self._merged: dict[tuple, Sequence[int]] = {}

    def _syncs(self, position: int) -> tuple[tuple, Sequence[int]]:
        """The site (context, role) of the sync at this position, and all its syncs' positions."""
        kind = self.table.kind_at(position)
        site = (kind.context, role(kind))
        merged = self._merged.get(site)
        if merged is None:
            merged = self._merged[site] = self.table.merged(self._kinds_at[site])
        return site, merged

    def of(self, position: int) -> tuple:
        table = self.table
        site, merged = self._syncs(position)
        if self.stepless:
            return site
        step_start = bisect.bisect_left(table.step, table.step[position])
        return (*site, bisect.bisect_left(merged, position) - bisect.bisect_left(merged, step_start))

    def first_step(self, position: int) -> int:
        """The step in which the sync's site first synced: a phase that starts later (an
        evaluation loop after training) has its own warm-up."""
        return self.table.step[self._syncs(position)[1][0]]


def explain_recompiles(
    executions: Sequence[Execution], ir_texts: Mapping[str, str], warmup_steps: int = WARMUP_STEPS,
    optimizer_marks: Sequence[int] = (), optimizer_steps: int = 0,
) -> list[Recompile | PendingRecompile]:
    """ir_texts: graph id -> IR text (empty when captured light), best an IRGraphs that
    keeps what it parsed for the rest of the analysis.

    Under pytest each test is its own program: a recompile is judged against the graphs
    of the same test, and its warm-up counts from the test's first step. A script that
    never calls mark_step() has no steps: there a site's first syncs are its warm-up, and
    where it steps an optimizer (optimizer_marks: RunInfo's), so is all it compiles in
    the loop's first iterations (a full-batch program's train, validation and test index
    sets each compile once there) and a site's first syncs after the loop's last
    iteration (the final test: once, not per step; known where every step's mark was kept).
    A run with steps has the same after its last mark_step()."""
    table = ExecutionTable.of(executions)
    graphs = IRGraphs.of(ir_texts)
    compiled: dict[str | None, Compiled] = {}  # context -> earlier misses, one per distinct graph
    compiled_at: dict[tuple, Compiled] = {}  # the same, per role (_Roles)
    # Each test's first step: the step of its first execution.
    first_step = {context: table.step[table.positions[numbers[0]][0]]
                  for (context,), numbers in table.kinds_by(lambda kind: (kind.context,)).items()}
    stepless = not any(table.step)
    kinds_at = table.kinds_by(lambda kind: (kind.context, role(kind))) if stepless else {}  # site -> its kinds
    roles = _Roles(table, stepless)
    explained: list[Recompile | PendingRecompile] = []
    eager_nodes = 0
    explained_at: Counter[tuple] = Counter()  # structure changes after warm-up, per role
    structures: dict[str | None, _Structures] = {}  # context -> the structures it compiled
    # Only misses are walked; a stepless site's syncs before one are counted.
    misses = table.where(lambda kind: kind.is_miss)
    seen_sites: set[tuple] = set()  # roles that compiled before
    # Misses per role after the loop: past the optimizer's last step (stepless), or the last mark_step().
    after_loop_at: Counter[tuple] = Counter()
    step_ends = table.where(lambda kind: kind.cause == "mark_step")
    last_mark = step_ends[-1] if step_ends else len(table)
    for position in misses:
        execution = table[position]
        context = execution.context
        start = first_step[context]
        site = roles.of(position)
        earlier = compiled.setdefault(context, Compiled())
        at_site = compiled_at.setdefault(site, Compiled())
        if site in seen_sites:
            if stepless:  # its syncs so far, this one included; the optimizer's iteration, where it steps one
                syncs = 1 + sum(bisect.bisect_left(table.positions[n], position) for n in kinds_at[site])
                iteration = iteration_of(optimizer_marks, execution.index) if optimizer_marks else None
                warmup = syncs <= warmup_steps or (iteration is not None and iteration < warmup_steps)
                after_loop = iteration is None and bool(optimizer_marks) and len(optimizer_marks) == optimizer_steps
            else:
                warmup = execution.step - max(start, roles.first_step(position)) < warmup_steps
                after_loop = position > last_mark
            if not warmup and after_loop:  # the loop is over: a site's first misses after it (the final test)
                tail = (context, role(table.kind_at(position)))
                warmup = after_loop_at[tail] < warmup_steps
                after_loop_at[tail] += 1
            values_only = structures.setdefault(context, _Structures(graphs)).repeats(execution)
            if warmup and eager_nodes + execution.nodes > EAGER_WARMUP_NODES:
                explained.append(PendingRecompile(execution, earlier, at_site, graphs))
            elif not warmup and not values_only and (stepless or explained_at[site] >= EXPLAINED_PER_SITE):
                # Stepless, such a recompile is a different piece of the pass, never a finding.
                explained.append(PendingRecompile(execution, earlier, at_site, graphs, warmup=False))
            elif warmup:  # explained as a small run's are, once read: no finding reads a warm-up one
                eager_nodes += execution.nodes
                explained.append(PendingRecompile(execution, earlier, at_site, graphs, promised=True))
            else:
                explained_at[site] += not values_only
                explained.append(_explain(execution, earlier, graphs, warmup, at_site))
        seen_sites.add(site)
        if execution.graph not in earlier:
            earlier.append(execution)
            at_site.append(execution)
            structures.setdefault(context, _Structures(graphs)).add(execution)
    return explained


class _Structures:
    """The structures of the graphs compiled so far, by node count. Only a graph as big
    as an earlier one can repeat its structure, so a graph is parsed only once one of its
    size asks: a run whose graph grows at every sync (no mark_step) parses none here. A
    node count of 0 is not known (a backend that did not say): such graphs meet every size."""

    def __init__(self, graphs: IRGraphs) -> None:
        self.graphs = graphs
        self.unparsed: dict[int, list[str]] = {}  # node count -> graph ids
        self.parsed: dict[int, set[int]] = {}  # node count -> structures (GraphSummary.structure)

    def add(self, execution: Execution) -> None:
        self.unparsed.setdefault(execution.nodes, []).append(execution.graph)

    def repeats(self, execution: Execution) -> bool:
        """Is this graph node for node the computation of one before (only values changed)?"""
        sizes = {execution.nodes, 0} if execution.nodes else {*self.unparsed, *self.parsed}
        if not any(self.unparsed.get(size) or self.parsed.get(size) for size in sizes):
            return False
        graph = self.graphs.summary(execution.graph)
        return graph is not None and any(graph.structure in self._of_size(size) for size in sizes)

    def _of_size(self, size: int) -> set[int]:
        known = self.parsed.setdefault(size, set())
        for graph_id in self.unparsed.pop(size, []):
            graph = self.graphs.summary(graph_id)
            if graph is not None:
                known.add(graph.structure)
        return known


class Compiled:
    """Executions that compiled a graph, one per distinct graph, in order, and where each
    graph is among them: what was compiled before a recompile is the first so many."""

    def __init__(self) -> None:
        self.executions: list[Execution] = []
        self._at: dict[str, int] = {}

    def append(self, execution: Execution) -> None:
        self._at[execution.graph] = len(self.executions)
        self.executions.append(execution)

    def __contains__(self, graph: str) -> bool:
        return graph in self._at

    def __len__(self) -> int:
        return len(self.executions)

    def others(self, graph: str, before: int) -> tuple[list[Execution], int]:
        """Of the first `before`, the latest MAX_RANKED whose graph is another, and how
        many are: a run that recompiles every step ranks a window, never its whole past."""
        window = [e for e in self.executions[max(0, before - MAX_RANKED - 1):before] if e.graph != graph]
        return window[-MAX_RANKED:], before - (self._at.get(graph, before) < before)


def traced_again(execution: Execution) -> str | None:
    """Of torch.compile's graph run by its module's call: why dynamo traced it again, as
    the backend recorded it ("" where it gave no reason); None for any other execution."""
    if execution.cause != "compiled":
        return None
    return (execution.detail or "").partition(TRACED_AGAIN)[2]


def _explain(execution: Execution, compiled: Compiled, graphs: IRGraphs, warmup: bool, at_site: Compiled,
             before: int | None = None, before_at_site: int | None = None) -> Recompile:
    """Against the first `before` of compiled (all when None), and of at_site those run at
    the execution's site."""
    same_site, at_site_count = at_site.others(execution.graph, len(at_site) if before_at_site is None else before_at_site)
    candidates, count = (same_site, at_site_count) if same_site else \
        compiled.others(execution.graph, len(compiled) if before is None else before)
    new = graphs.parsed(execution.graph)
    base = dict(execution=execution.index, step=execution.step, graph=execution.graph,
                frame=execution.frame, warmup=warmup, context=execution.context,
                traced_again=traced_again(execution))
    if not candidates:
        return Recompile(closest=None, closest_execution=None, same_site=False, diff=None,
                         note="nothing compiled before to compare with", **base)
    if new is None:
        latest = candidates[-1]
        if graphs.has_hlo:  # PyTorch/XLA without the IR: what its HLO says
            old_hlo, new_hlo = graphs.hlo(latest.graph), graphs.hlo(execution.graph)
            # Values that follow from a new input shape (a mean's 1/16 -> 1/24) are not causes.
            changes = (hlo_input_changes(old_hlo, new_hlo) or hlo_changes(old_hlo, new_hlo)) if old_hlo and new_hlo \
                else ()
            if changes:
                return Recompile(
                    closest=latest.graph, closest_execution=latest.index, same_site=bool(same_site),
                    diff=GraphDiff.of_changes(changes), **base,
                    choice=f"compared with execution {latest.index}'s graph {latest.graph}, the latest before it "
                           f"{'at this site' if same_site else 'in the run'}: from the HLO XLA compiled (no IR "
                           "recorded; --capture full has the IR and the lines that built each node)")
        return Recompile(closest=latest.graph, closest_execution=latest.index, same_site=bool(same_site),
                         diff=None, note="no IR captured (run with --capture full)", **base)
    # Rank every candidate by the ops it shares with the new graph (on ties, those node for
    # node the same computation first, then the most recent), then diff the best few node
    # by node and keep the one with the fewest changes.
    structure = graphs.summary(execution.graph).structure
    ranked = _latest_if_closest(candidates[-1], execution.graph, graphs) or _ranked(
        candidates, execution.graph, structure, graphs)
    if not ranked:
        return Recompile(closest=None, closest_execution=None, same_site=False, diff=None,
                         note="no IR of earlier graphs to compare with", **base)
    where = "at this site" if same_site else "in the run"
    overlap, _, nearest = ranked[0]
    if overlap < NEW_GRAPH_OVERLAP:
        return Recompile(
            closest=nearest.graph, closest_execution=nearest.index, same_site=bool(same_site), diff=None,
            new_graph=True, **base,
            note=f"new graph ({len(new)} nodes): no earlier graph {where} is close (the closest, "
                 f"execution {nearest.index}'s, shares {overlap:.0%} of its ops)")
    best: tuple[tuple[int, int, float, int], Execution, GraphDiff] | None = None
    for overlap, order, candidate in ranked[:MAX_DIFFED]:
        if best is not None and _cannot_win(candidate.graph, execution.graph, graphs, best[0], overlap, order):
            continue  # it cannot come closer than the best so far: no need to diff it
        diff = graphs.diff(candidate.graph, execution.graph)
        if diff is None:
            continue
        # The fewest causes first, then the fewest nodes they change: an input's new shape
        # changes every node after it, yet it is one cause, where a graph of the same shapes
        # may differ in hundreds of ops (the optimizer's first step against a later one).
        score = (len(diff.origins), diff.changed_count + sum(1 for c in diff.origins if not c.node),
                 -overlap, order)
        if best is None or score < best[0]:
            best = (score, candidate, diff)
        if len(diff.origins) <= 1 and graphs.summary(candidate.graph).structure == structure:
            break  # node for node the same computation, one value changed: none can be closer
    if best is None:
        return Recompile(closest=None, closest_execution=None, same_site=False, diff=None,
                         note="no IR of earlier graphs to compare with", **base)
    _, closest, diff = best
    shared = graphs.overlap(closest.graph, execution.graph)
    choice = (f"compared with execution {closest.index}'s graph {closest.graph}: the closest of "
              f"{count} earlier graph{'s' if count != 1 else ''} {where} "
              f"({shared:.0%} of ops shared, {diff.changed_count} nodes differ)")
    note, same_hlo = "", False
    new_text = graphs.text(execution.graph) if diff.is_empty else ""
    if diff.is_empty and "xla::device_data" in new_text:
        # PyTorch/XLA's IR text leaves some values out (a slice's bounds): its HLO says them.
        values = hlo_changes(graphs.hlo(closest.graph), graphs.hlo(execution.graph)) if graphs.has_hlo else ()
        if values:
            diff = diff.with_values(values)
            choice += f"; in the HLO XLA compiled, {len(values)} value{'s differ' if len(values) != 1 else ' differs'}"
        elif new_text.startswith(FROM_HLO):
            same_hlo = True
            note = (f"same HLO as graph {closest.graph}, but XLA compiled it anew: what XLA hashed differs outside "
                    "the computation it dumps (which inputs' buffers it may donate, say)")
        else:
            note = (f"same IR text as graph {closest.graph}, but XLA compiled it anew: a value its IR text does "
                    "not print changed (a slice's bounds from a Python number, say); the HLO of each graph "
                    "shows which (lazyviz export --format hlo; not recorded in a process a launcher started)")
    return Recompile(closest=closest.graph, closest_execution=closest.index, same_site=bool(same_site),
                     diff=diff, choice=choice, note=note, same_hlo=same_hlo, **base)


def _ranked(candidates: list[Execution], new_id: str, structure: int,
            graphs: IRGraphs) -> list[tuple[float, int, Execution]]:
    """(share of ops in common, recency, candidate), the closest first: the most ops in
    common, then node for node the same computation as the new graph, then the latest."""
    ranked = []
    for order, candidate in enumerate(reversed(candidates)):
        summary = graphs.summary(candidate.graph)
        if summary is not None:
            ranked.append((-graphs.overlap(candidate.graph, new_id), summary.structure != structure, order, candidate))
    ranked.sort(key=lambda t: t[:3])
    return [(-overlap, order, candidate) for overlap, _, order, candidate in ranked]


def _cannot_win(old_id: str, new_id: str, graphs: IRGraphs, best: tuple[int, int, float, int],
                overlap: float, order: int) -> bool:
    """Whether a diff of the two graphs must score worse than best (fewest origins, then
    fewest changed nodes, then most ops shared, then the latest): from their ops alone,
    or for two graphs of one structure from their output types (diff.least_score)."""
    if _fewest_origins(old_id, new_id, graphs) > best[0]:
        return True
    old, new = graphs.parsed(old_id), graphs.parsed(new_id)
    if old is None or new is None or old.structure != new.structure:
        return False
    return (*least_score(old, new), -overlap, order) >= best


def _fewest_origins(old_id: str, new_id: str, graphs: IRGraphs) -> int:
    """The fewest origins a diff of the two graphs can have, from their ops alone: each
    node of an op one graph has more of is added or removed, or matched to a node of
    another op (an input to a constant), each an origin."""
    old, new = graphs.summary(old_id), graphs.summary(new_id)
    if old is None or new is None or old.op_counts is new.op_counts:
        return 0
    added = sum(max(0, count - old.op_counts.get(op, 0)) for op, count in new.op_counts.items())
    removed = sum(max(0, count - new.op_counts.get(op, 0)) for op, count in old.op_counts.items())
    return max(added, removed)


def _latest_if_closest(latest: Execution, new_id: str, graphs: IRGraphs) -> list[tuple[float, int, Execution]] | None:
    """The ranking cut short to the most recent candidate, when it is what the whole
    ranking would choose: it shares every op (ranked first: the most recent on ties) and
    differs node for node in at most one origin (the diffing stops there). A run whose
    shapes change at every step compiles hundreds of such graphs; ranking each against
    64 others was most of its report's time."""
    old, new_summary = graphs.summary(latest.graph), graphs.summary(new_id)
    if old is None or old.structure != new_summary.structure or graphs.overlap(latest.graph, new_id) != 1.0:
        return None
    diff = graphs.diff(latest.graph, new_id)  # kept: the caller reads the same pair again
    return [(1.0, 0, latest)] if diff is not None and len(diff.origins) <= 1 else None


def explain_execution(
    executions: Sequence[Execution], ir_texts: Mapping[str, str], index: int, warmup_steps: int = WARMUP_STEPS
) -> Recompile | None:
    """Explain any execution's graph against the closest graph compiled before it (the UI's
    Diff tab and `export --diff`); None for the first graph of the run. ir_texts: best the
    run's IRGraphs, which keeps what it parsed."""
    table = ExecutionTable.of(executions)
    position = table.position_of(index)
    if position is None:
        return None
    target = table[position]
    roles = _Roles(table, not any(table.step))
    wanted = roles.of(position)
    compiled, at_site = Compiled(), Compiled()
    misses = table.where(lambda kind: kind.is_miss)
    for miss in misses[:bisect.bisect_left(misses, position)]:
        execution = table[miss]
        if execution.graph not in compiled:
            compiled.append(execution)
            if roles.of(miss) == wanted:
                at_site.append(execution)
    if not compiled.others(target.graph, len(compiled))[0]:
        return None
    warmup = target.step - (0 if roles.stepless else roles.first_step(position)) < warmup_steps
    return _explain(target, compiled, IRGraphs.of(ir_texts), warmup, at_site)


def is_compared(recompile: Recompile | PendingRecompile) -> bool:
    """Whether the run's explanation compares it (the JSON's "explained"): explained
    already, or promised to be when read; not one left waiting for being costly."""
    return not isinstance(recompile, PendingRecompile) or recompile.is_explained


def recompiles_after_warmup(recompiles: Iterable[Recompile | PendingRecompile]) -> int:
    """Cache misses that are not a site's first graph nor in the warm-up steps."""
    return sum(1 for recompile in recompiles if not recompile.warmup)


def compiles_past_warmup(recompiles: Iterable[Recompile | PendingRecompile], executions: Sequence[Execution],
                         optimizer_marks: Sequence[int] = ()) -> int:
    """Cache misses that are no warm-up: those past warm-up the analysis explains, and
    the compiles it takes for a new site's first that never settle: past their line's
    first, past the warm-up steps (iterations, in a run without steps), of a graph that
    never ran again. A graph that grows without a sync compiles anew at each sync (a
    sample loop's token, a loop without mark_step()); warm-up is a compile whose graph
    runs again."""
    table = ExecutionTable.of(executions) if not isinstance(executions, ExecutionTable) else executions
    counted = {recompile.execution for recompile in recompiles if not recompile.warmup}
    runs: Counter[str] = Counter()
    for number, positions in enumerate(table.positions):
        runs[table.kinds[number].graph] += len(positions)
    stepless = not any(kind.cause == "mark_step" for kind in table.kinds)
    lines: set[Frame | None] = set()
    past = len(counted)
    for position in table.where(lambda kind: kind.is_miss):
        execution = table[position]
        first = execution.frame not in lines
        lines.add(execution.frame)
        if first or execution.index in counted or runs[execution.graph] > 1:
            continue
        if stepless:
            iteration = iteration_of(optimizer_marks, execution.index) if optimizer_marks else None
            past += iteration is None or iteration >= WARMUP_STEPS
        else:
            past += execution.step >= WARMUP_STEPS
    return past
