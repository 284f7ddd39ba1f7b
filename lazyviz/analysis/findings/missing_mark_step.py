"""A loop without mark_step(): optimizer steps no sync separated, a graph that grows at
every sync of one site, a loop unrolled into one graph; one finding per loop."""
from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from lazyviz.analysis.blocks import forward_loop, iterations_chain, layer_stack, repeated_block
from lazyviz.analysis.findings._shared import growing_graphs, growing_sites, lines_that_built
from lazyviz.analysis.findings.base import Details, Finding, FindingKind, KindInfo, RunFacts
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.host_calls import host_call
from lazyviz.analysis.ir import IRGraph
from lazyviz.analysis.library import Stacks, no_stacks
from lazyviz.analysis.library_loops import LibraryLoop, callback_loop, library_loop
from lazyviz.analysis.loops import unsynced_iterations
from lazyviz.trace.model import TS_NAMES, Execution, Frame
from lazyviz.trace.table import ExecutionTable


@dataclass(frozen=True, kw_only=True)
class MissingMarkStepDetails(Details):
    """What every form of a loop without mark_step() says: the graphs and sync sites that
    show it, where one loop's finding speaks for several."""

    graphs: tuple[str, ...] = ()
    sites: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class StepsWithoutSync(MissingMarkStepDetails):
    """Optimizer steps no sync separated (a run without steps): iterations that ended with
    no sync, or the largest graph of each iteration growing."""

    optimizer_steps: int
    unsynced_iterations: int = 0
    largest_per_iteration: tuple[int, ...] = ()  # nodes, the first 50 iterations


@dataclass(frozen=True, kw_only=True)
class GrowingGraph(MissingMarkStepDetails):
    """The graph synced at one site grows by about the same number of nodes at every sync."""

    growth_per_sync: int
    syncs: int
    nodes: tuple[int, ...]  # each sync's graph, the first 50
    library_loop: LibraryLoop | None = None  # the library loop the syncs come from (generate()'s)


@dataclass(frozen=True, kw_only=True)
class RepeatedBlock(MissingMarkStepDetails):
    """One graph repeats a block of ops: a loop's iterations piled up into it."""

    graph: str
    pattern: tuple[str, ...]  # the block's ops
    repeats: int
    nodes: int  # the graph's size
    library_loop: LibraryLoop | None = None


def missing_mark_step_findings(executions: Sequence[Execution], ir_texts: Mapping[str, str],
                               names: Mapping[str, str] = TS_NAMES, quick: bool = False,
                               optimizer_marks: Sequence[int] = (), stacks: Stacks = no_stacks,
                               step_at: Frame | None = None) -> list[Finding]:
    """The forms of a loop without mark_step(): optimizer steps that no sync separated, a
    graph that grows at every sync of one site, and a loop unrolled into one graph (report
    and check ask the same question). quick: not the last (it searches every graph's ops).
    optimizer_marks: of a run without steps (RunInfo.optimizer_marks); step_at: the user's
    line that stepped the optimizer (RunInfo.optimizer_step_at)."""
    graphs = IRGraphs.of(ir_texts)
    growing = growing_site_findings(executions, names, graphs, stacks)
    if not quick:
        growing += growth_findings(executions, graphs, names, skip=growing_graphs(executions), stacks=stacks)
    # Last: where the graphs show the loop, they say it; the optimizer's count joins them.
    return _one_per_loop(growing + stepless_loop_findings(executions, optimizer_marks, names, step_at))


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
        sites = tuple(dict.fromkeys(f.frame.site for f in group if f.frame))
        graphs = tuple(dict.fromkeys(g for f in group for g in f.details.graphs))
        more = len(group) - 1
        merged.append(replace(
            first, executions=tuple(sorted({e for f in group for e in f.executions})),
            message=f"{first.message} (one cause: {more} more graph{'s' if more > 1 else ''} show the same loop"
                    f"{f', at {len(sites)} sync sites' if len(sites) > 1 else ''})",
            details=replace(first.details, graphs=graphs, sites=sites)))
    return merged



def stepless_loop_findings(executions: Sequence[Execution], marks: Sequence[int],
                           names: Mapping[str, str] = TS_NAMES, step_at: Frame | None = None) -> list[Finding]:
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
        details = StepsWithoutSync(optimizer_steps=len(marks), unsynced_iterations=len(unsynced))
    elif growing:
        start, stop = bounds[len(largest) - 1]
        last = range(start, min(stop, len(table)))
        positions = [max(last, key=lambda p: table.kind_at(p).nodes)]
        shown = " -> ".join(map(str, largest[:3])) + (f" -> ... -> {largest[-1]}" if len(largest) > 3 else "")
        what = (f"the largest graph of each iteration grows ({shown} nodes): a loop runs without "
                f"{names['mark_step']}, so the parameters' updates are never cut from the graph and each "
                "iteration's syncs run all of them again")
        details = StepsWithoutSync(optimizer_steps=len(marks), largest_per_iteration=tuple(largest[:50]))
    else:
        return []
    # Iterations that never synced have no execution to say where: the optimizer's step does.
    frame = table.kind_at(positions[0]).frame if positions else step_at
    return [Finding(
        FindingKind.MISSING_MARK_STEP, "warning", f"the optimizer stepped {len(marks)} times and {what}",
        frame, table.indices(positions),
        f"call {names['mark_step']} at the end of each iteration (after the optimizer step)",
        details,
        short=f"the optimizer stepped {len(marks)} times and no step ended: "
              + ("iterations ran with no sync" if unsynced else "its largest graph grows each iteration"),
    )]


def growing_site_findings(executions: Sequence[Execution], names: Mapping[str, str] = TS_NAMES,
                          ir_texts: Mapping[str, str] | None = None, stacks: Stacks = no_stacks) -> list[Finding]:
    """The graph synced at one site grows by about the same number of nodes at every
    sync: a loop runs without mark_step(), so the work of all the iterations so far
    (an optimizer's updates, say) is still pending and each sync runs it again. Found
    by size alone, however big an iteration is."""
    table = ExecutionTable.of(executions)
    findings = []
    for positions, growth in growing_sites(table).values():
        sizes = [table.kind_at(p).nodes for p in positions]
        shown = " -> ".join(map(str, sizes[:4])) + (f" -> ... -> {sizes[-1]}" if len(sizes) > 4 else "")
        first = table.kind_at(positions[0])
        what = first.detail or first.cause
        largest = table.kind_at(positions[sizes.index(max(sizes))])
        built = lines_that_built(IRGraphs.of(ir_texts), largest.graph) if ir_texts else ""
        graph = IRGraphs.of(ir_texts).parsed(largest.graph) if ir_texts else None
        loop = _library_loop(table, positions, stacks, graph)
        findings.append(Finding(
            FindingKind.MISSING_MARK_STEP, "warning",
            f"the graph {what} runs here grows by about {growth} nodes at every sync ({shown} nodes over "
            f"{len(positions)} syncs{built}): a loop runs without {names['mark_step']}{_loop_named(loop)}, so "
            "each sync runs all the work pending since the loop began",
            first.frame, table.indices(positions),
            _loop_fix(loop, names, first.frame,
                      f"call {names['mark_step']} at the end of each iteration (after the optimizer step); then "
                      f"{what} costs one small execution, or none if read in {names['step_closure']}"),
            GrowingGraph(growth_per_sync=growth, syncs=len(positions), nodes=tuple(sizes[:50]), library_loop=loop),
        ))
    return findings


def _library_loop(table: ExecutionTable, positions: Sequence[int], stacks: Stacks,
                  graph: IRGraph | None = None) -> LibraryLoop | None:
    """The library loop the syncs come from, where the stacks place them in one (generate()'s).
    One lazyviz does not know is named only where the graph's nodes were built at the
    user's call itself: nodes built on other lines of theirs are a loop of theirs at work."""
    # The stacks its syncs come from most: a loop's, not the one-time set-up before it
    # (generate() reads flags at the same line before its decode loop starts).
    counts = Counter(table.kind_at(p).stack_id for p in positions if table.kind_at(p).stack_id is not None)
    ids = {stack_id for stack_id, count in counts.items() if count == max(counts.values())}
    called = [stacks(stack_id) for stack_id in sorted(ids)]
    loop = (callback_loop(called, stacks.packages) or library_loop(called, stacks.packages)) if ids else None
    if loop is None or loop.known:
        return loop
    frame = table.kind_at(positions[0]).frame
    built = graph.built_at.most_common(1) if graph is not None else []
    call = f"{frame.file.rpartition('/')[2]}:{frame.line}" if frame is not None else None
    return loop if built and built[0][0] == call else None


def _loop_named(loop: LibraryLoop | None) -> str:
    return f" (the loop of {loop.call}(): {loop.path}, in {loop.function}())" if loop and loop.known else ""


def _loop_fix(loop: LibraryLoop | None, names: Mapping[str, str], frame: Frame | None, default: str) -> str:
    """The fix through the library's own hook where the loop is a known library's; the
    library function the syncs come from named beside the default where it is not."""
    if loop is None:
        return default
    at = f" at line {frame.line}" if frame else ""
    if loop.callback:  # the sync is in the user's function the loop calls, not at their call
        return f"the loop is {loop.path}'s {loop.function}() (line {loop.line}): " + \
            loop.hook.format(mark_step=names["mark_step"])
    if loop.known:
        return (f"the loop is {loop.path}'s {loop.function}() (line {loop.line}), inside your {loop.call}() call{at}: "
                + loop.hook.format(mark_step=names["mark_step"]))
    return (f"{default} (every sync comes from {loop.path}'s {loop.function}() inside your {loop.call}() call{at}: "
            f"if the loop is that library's, cut it through a per-iteration callback it offers that calls "
            f"{names['mark_step']})")


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
            inside[kind.stack_id] = kind.stack_id is not None and host_call(stacks(kind.stack_id), stacks.packages) is not None
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
            holding = (*earlier.details.graphs, graph_id)
            findings[by_block[tuple(block)]] = replace(
                earlier, executions=tuple(sorted({*earlier.executions, *table.indices(positions)})),
                details=replace(earlier.details, graphs=holding))
            continue
        by_block[tuple(block)] = len(findings)
        first = table.kinds[numbers[0]]
        loop = _library_loop(table, positions, stacks, graphs.parsed(graph_id))
        findings.append(Finding(
            FindingKind.MISSING_MARK_STEP, "warning",
            f"graph {graph_id} ({summary.size} nodes{lines_that_built(graphs, graph_id)}) repeats "
            f"{_ops_text(block)} {repeats} times: "
            f"a loop ran {repeats} iterations without mark_step(){_loop_named(loop)} and they piled up into one "
            f"graph, run by {first.detail or first.cause}",
            first.frame, table.indices(positions),
            _loop_fix(loop, names, first.frame,
                      f"call {names['mark_step']} at the end of each iteration of the loop that builds it "
                      f"(the loop runs before line {first.frame.line if first.frame else '?'})"),
            RepeatedBlock(graph=graph_id, pattern=tuple(block), repeats=repeats, nodes=summary.size,
                          graphs=(graph_id,), library_loop=loop),
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
    if forward_loop(graph, start, len(block), repeats):
        return None  # a module's own loop (an RNN's time steps), unrolled into one forward's graph
    return block, repeats


def _also_in(finding: Finding) -> Finding:
    """A repeated block found in several graphs (the syncs after it ran it too): said once."""
    more = len(finding.details.graphs) - 1
    if not more:
        return finding
    return replace(finding, message=f"{finding.message} (and {more} more graph{'s' if more > 1 else ''} "
                                    "holding the same repeated block)")


KINDS = (KindInfo(FindingKind.MISSING_MARK_STEP, "no mark_step", "sync", MissingMarkStepDetails),)


def find(facts: RunFacts) -> list[Finding]:
    return missing_mark_step_findings(facts.executions, facts.graphs, facts.names, facts.quick,
                                      facts.run.optimizer_marks if _steps_fewer_than_iterations(facts) else (),
                                      facts.stacks, facts.run.optimizer_step_at if facts.run else None)


def _steps_fewer_than_iterations(facts: RunFacts) -> bool:
    """A loop that steps its optimizer more than twice per mark_step(): none at all, or
    one a save helper or an evaluation made (minGPT's adder, its checkpoint saved through
    state_on_cpu at iteration 0, then iterations that never sync)."""
    return facts.run is not None and facts.run.optimizer_steps > 2 * facts.steps
