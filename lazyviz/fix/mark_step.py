"""A missing mark_step(): the backend's step call at the end of the loop body that holds
the growing graph's sync and builds most of its nodes (also before each `continue`)."""
from __future__ import annotations

import ast
import os
from collections import Counter

from lazyviz.analysis.findings import Finding, GrowingGraph, RepeatedBlock
from lazyviz.analysis.kinds import FindingKind
from lazyviz.analysis.library_loops import LibraryLoop
from lazyviz.fix.source import (
    Change,
    Context,
    Proposal,
    Source,
    all_loops,
    alone_on_its_lines,
    call_name,
    device_only,
    enclosing_loops,
    in_body,
    loop_reads,
    own_statements,
)


def _nodes_inside(source: Source, loop: ast.AST, built: Counter[str]) -> int:
    total = 0
    for where, nodes in built.items():
        name, _, line = where.rpartition(":")
        if name == source.name and line.isdigit() and in_body(loop, int(line)):
            total += nodes
    return total


# -- the proposals ----------------------------------------------------------------------
PARAMETER_LOOPS = frozenset({"parameters", "params", "param_groups", "named_parameters"})


def _over_parameters(loop: ast.AST) -> bool:
    """A loop over the model's parameters (an update, a norm): never the step's loop."""
    return bool(loop_reads(loop) & PARAMETER_LOOPS)


def _in_a_forward(source: Source, loop: ast.AST) -> bool:
    """A loop in a module's forward (over time steps, over layers) is the step's own work,
    called from the loop that steps: a mark_step() there would cut every forward in pieces."""
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in ("forward", "__call__")
               and node.lineno <= loop.lineno <= (node.end_lineno or node.lineno) for node in ast.walk(source.tree))


def _not_the_step(source: Source, loop: ast.AST) -> bool:
    return _over_parameters(loop) or _in_a_forward(source, loop)


def propose(finding: Finding, context: Context) -> Proposal:
    """The loop whose iterations pile up: of the loops that build at least half as many of
    the graph's nodes as the one that builds most (not one over the parameters), the one
    around the sync if there is one, else the innermost. Where the IR names no line in a
    loop, the innermost loop around the sync."""
    step_call = context.run.info.capabilities.step_call
    stack = context.stack(finding)
    if not stack:
        return Proposal(finding, f"{finding.fix} (its source is not readable here)")
    loop = finding.details.library_loop if isinstance(finding.details, (GrowingGraph, RepeatedBlock)) else None
    if loop is not None and loop.callback:
        return _at_callback_end(finding, context, loop, step_call)
    device = context.run.info.device
    built = context.built_at(finding)
    building = {where.rpartition(":")[0] for where in built}
    files = dict.fromkeys([*(frame.file for frame in stack),
                           *(f for f in context.run.info.sources if os.path.basename(f) in building)])
    around_sync = {id(loop) for frame in stack if (source := context.source(frame.file))
                   for loop in enclosing_loops(source, frame.line)}
    candidates = []
    for file in files:
        source = context.source(file)
        for loop in all_loops(source) if source else []:
            nodes = _nodes_inside(source, loop, built)
            if nodes and not _not_the_step(source, loop):
                candidates.append((nodes, source, loop))
    if candidates:
        most = max(nodes for nodes, _, _ in candidates)
        good = [(source, loop) for nodes, source, loop in candidates if nodes * 2 >= most]
        # Innermost first: the smallest span (an epoch loop holds the batch loop).
        good.sort(key=lambda pair: (id(pair[1]) not in around_sync, pair[1].end_lineno - pair[1].lineno))
        source, loop = good[0]
        return _insert_at_loop_end(finding, source, loop, step_call, device, built)
    for frame in reversed(stack):
        source = context.source(frame.file)
        loops = [loop for loop in enclosing_loops(source, frame.line) if not _not_the_step(source, loop)] if source else []
        if source and loops:
            return _insert_at_loop_end(finding, source, loops[-1], step_call, device)
    return Proposal(finding, f"{finding.fix} (lazyviz cannot tell which loop: the IR names no line inside one)")


def _at_callback_end(finding: Finding, context: Context, loop: LibraryLoop, step_call: tuple[str, str]) -> Proposal:
    """The loop is a library's that calls a function of the user's each iteration (LBFGS's
    closure): the step call at that function's end, before its return."""
    frame = next((f for f in reversed(context.stack(finding)) if f.function == loop.callback
                  and context.source(f.file) is not None), None)
    source = context.source(frame.file) if frame is not None else None
    defined = [node for node in ast.walk(source.tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
               and node.name == loop.callback and node.lineno <= frame.line <= (node.end_lineno or node.lineno)] \
        if source is not None and frame is not None else []
    if source is None or not defined:
        return Proposal(finding, f"{finding.fix} (no {loop.callback}() of yours readable here to edit)")
    function = defined[-1]  # the innermost
    call, imports = call_name(source, *step_call)
    where = source.at(function.lineno)
    if any(_is_step_call(statement, call) for statement in function.body):
        return Proposal(finding, f"{call}() is already in {loop.callback}() at {where}, and the finding is still "
                                 "there: the cause is elsewhere (read the growing graph's lines)", outlived=True)
    last = function.body[-1]
    before = isinstance(last, ast.Return) and alone_on_its_lines(source, last)
    line = last.lineno if before else (last.end_lineno or last.lineno) + 1
    lines, imports = device_only(source, last.lineno, context.run.info.device, source.indent_of(last.lineno),
                                 f"{call}()", imports)
    change = Change(source.path, line, line, lines)
    return Proposal(finding, f"call {call}() at the end of {loop.callback}() at {where}{', before it returns' * before}"
                             f": {loop.call}() calls it at each of its iterations, so each evaluation runs as one "
                             f"graph{_guarded(lines)}", (change, *imports))


def _guarded(lines: tuple[str, ...]) -> str:
    """What the proposal says of a call put under the program's own device test."""
    test = lines[0].strip().removeprefix("if ").removesuffix(":") if len(lines) > 1 else ""
    return f" (only where {test}: the program runs on other devices too)" if test else ""


READS = frozenset({"item", "tolist", "numpy", "cpu", "print", "float", "int", "bool"})


def _trailing_reads(source: Source, loop: ast.AST, built: Counter[str]) -> ast.stmt | None:
    """The first of the loop body's last statements where they build nothing of the graph
    and one reads a value (a log line's `loss.item()`): the step call goes before them. At
    the body's end, a logged step would run its graph up to the read, then the rest of the
    step again from the values the read left, a second graph in each logged step."""
    lines = {int(line) for where in built for name, _, line in [where.rpartition(":")]
             if name == source.name and line.isdigit()}
    body = loop.body
    building = [i for i, statement in enumerate(body)
                if any(statement.lineno <= line <= (statement.end_lineno or statement.lineno) for line in lines)]
    if not building or building[-1] == len(body) - 1:
        return None
    trailing = body[building[-1] + 1:]
    reads = [node for statement in trailing for node in ast.walk(statement) if isinstance(node, ast.Call)
             and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) in READS]
    # A read of a value computed there (`h.mean().item()`) builds on the step's tensors:
    # after the step call it would run a graph of its own. Only reads of names move after it.
    computed = any(isinstance(read.func, ast.Attribute) and isinstance(read.func.value, ast.Call) for read in reads)
    return trailing[0] if reads and not computed and alone_on_its_lines(source, trailing[0]) else None


def _insert_at_loop_end(finding: Finding, source: Source, loop: ast.AST, step_call: tuple[str, str],
                        device: str, built: Counter[str] | None = None) -> Proposal:
    first, last = loop.body[0], loop.body[-1]
    where = f"{source.at(loop.lineno)}"
    if first.lineno == loop.lineno:
        return Proposal(finding, f"{finding.fix} (the loop at {where} is written on one line: split it first)")
    call, imports = call_name(source, *step_call)
    # Anywhere in the loop's own body (time_sequence_prediction's, then a print): each
    # iteration is cut already, and a second call at the end would cut nothing more.
    if any(_is_step_call(statement, call) for statement in loop.body):
        return Proposal(finding, f"{call}() is already in the loop at {where}, once an iteration (an earlier edit, or "
                                 "yours), and the finding is still there: another would change nothing. The "
                                 "diagnosis was wrong or the cause is elsewhere: read the repeated block's lines",
                        outlived=True)
    reads = _trailing_reads(source, loop, built) if built else None
    end = reads.lineno if reads is not None else (last.end_lineno or last.lineno) + 1
    lines, imports = device_only(source, first.lineno, device, source.indent_of(first.lineno), f"{call}()", imports)
    changes = [Change(source.path, end, end, lines)]
    for skip in own_statements(loop, ast.Continue):
        if not alone_on_its_lines(source, skip):
            return Proposal(finding, f"{finding.fix} (the `continue` at {source.at(skip.lineno)} shares its "
                                     "line: call it before that `continue` too)")
        skipped, _ = device_only(source, skip.lineno, device, source.indent_of(skip.lineno), f"{call}()", ())
        changes.append(Change(source.path, skip.lineno, skip.lineno, skipped))
    also = " and before each `continue`" if len(changes) > 1 else ""
    at = f"at the end of the loop at {where}{also}"
    if reads is not None:
        at = (f"in the loop at {where}{also}, after its last statement that builds the graph and before the read "
              f"at {source.at(reads.lineno)} (which then takes a value the step computed, not a graph of its own)")
    return Proposal(finding, f"call {call}() {at}, so each iteration's work runs as one graph{_guarded(lines)}",
                    tuple(changes) + imports)


def _is_step_call(statement: ast.stmt, call: str) -> bool:
    """`mark_step()` (as the file names it, or any backend's step call) as a statement, or
    under the program's own device test (`if device.type == "lazy": mark_step()`)."""
    if isinstance(statement, ast.If) and not statement.orelse:
        # Only under a test of the device alone: one under a flag of the script's may not run.
        test = statement.test
        return isinstance(test, ast.Compare) and "device" in ast.unparse(test.left) \
            and any(_is_step_call(inner, call) for inner in statement.body)
    if not isinstance(statement, ast.Expr) or not isinstance(statement.value, ast.Call):
        return False
    name = ast.unparse(statement.value.func)
    return name == call or name.rpartition(".")[2] in ("mark_step", "sync")


def answers(finding: Finding, context: Context) -> bool:
    return finding.kind == FindingKind.MISSING_MARK_STEP
