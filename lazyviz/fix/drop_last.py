"""A last short batch (a recompile for a smaller first dimension): `drop_last=True` on the
DataLoader the loop reads, followed through the call that passed it in."""
from __future__ import annotations

import ast
import re

from lazyviz.analysis.findings import Finding, RecompileDetails
from lazyviz.analysis.findings.recompile import shape_change
from lazyviz.fix.source import Context, Proposal, Source, enclosing_loops, keyword_set, loop_reads, path_to_line

_LEADING = re.compile(r"\[(\d+)")  # the first dimension of a shape such as Float[16,32]


def short_batch(finding: Finding, context: Context) -> bool:
    """The recompile is a smaller first dimension: the last, short batch of a loader."""
    recompile = context.run.recompile_at(finding.executions[0]) if finding.executions else None
    if recompile is None or not shape_change(recompile):
        return False
    inputs = [c for c in recompile.diff.origins if c.kind == "input_shape"]
    if not inputs:
        return False  # a size made on the device: no loader's batch
    for change in inputs:
        before, after = _LEADING.search(change.before), _LEADING.search(change.after)
        if not before or not after or int(after.group(1)) >= int(before.group(1)):
            return False
    return True


def _is_loader(func: ast.expr) -> bool:
    return (isinstance(func, ast.Name) and func.id == "DataLoader") or \
        (isinstance(func, ast.Attribute) and func.attr == "DataLoader")


def _loader_calls(source: Source) -> list[tuple[ast.Call, str | None]]:
    """DataLoader(...) calls and the name each is assigned to (None: not assigned)."""
    assigned: dict[int, str | None] = {}
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            target = node.targets[0]
            assigned[id(node.value)] = target.id if isinstance(target, ast.Name) else getattr(target, "attr", None)
    return [(node, assigned.get(id(node))) for node in ast.walk(source.tree)
            if isinstance(node, ast.Call) and _is_loader(node.func)]


def _arguments_for(caller: Source, call_line: int, callee: Source, callee_line: int, parameters: set[str]) -> set[str]:
    """The names the caller's call at `call_line` passes for the callee's `parameters`."""
    chain = path_to_line(callee.tree, callee_line)
    function = next((n for n in reversed(chain) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    statement = path_to_line(caller.tree, call_line)
    if function is None or not statement:
        return set()
    positional = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
    names = set()
    for call in ast.walk(statement[-1]):
        if not isinstance(call, ast.Call):
            continue
        called = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", None)
        if called != function.name:
            continue
        shift = 1 if isinstance(call.func, ast.Attribute) and positional[:1] in (["self"], ["cls"]) else 0
        for parameter in parameters:
            argument = next((k.value for k in call.keywords if k.arg == parameter), None)
            if argument is None and parameter in positional:
                index = positional.index(parameter) - shift
                argument = call.args[index] if 0 <= index < len(call.args) else None
            if isinstance(argument, ast.Name):
                names.add(argument.id)
            elif isinstance(argument, ast.Attribute):
                names.add(argument.attr)
    return names


def propose(finding: Finding, context: Context) -> Proposal:
    if not short_batch(finding, context):
        return Proposal(finding, finding.fix)
    stack = context.stack(finding)
    read_by_loops: set[str] = set()
    wanted: set[str] = set()  # names the inner frames' loops read, as their callers name them
    for depth in range(len(stack) - 1, -1, -1):
        frame = stack[depth]
        source = context.source(frame.file)
        if source is None:
            break
        for loop in enclosing_loops(source, frame.line):
            wanted |= loop_reads(loop)
        read_by_loops |= wanted
        if depth:  # a loader passed in: the caller's argument for that parameter names it
            caller = stack[depth - 1]
            caller_source = context.source(caller.file)
            wanted = _arguments_for(caller_source, caller.line, source, frame.line, wanted) if caller_source else set()
    loaders = []
    for file in dict.fromkeys([*(f.file for f in stack), *context.run.info.sources]):
        source = context.source(file)
        for call, name in _loader_calls(source) if source else []:
            keyword = next((k for k in call.keywords if k.arg == "drop_last"), None)
            if keyword is not None and isinstance(keyword.value, ast.Constant) and keyword.value.value is True:
                continue
            loaders.append((source, call, name, keyword))
    read = [loader for loader in loaders if loader[2] in read_by_loops]
    chosen = read if read else loaders
    if len(chosen) != 1:
        why = "no DataLoader in the files it ran" if not chosen else "several DataLoaders: pick the training one"
        return Proposal(finding, f"the last batch is smaller: drop_last=True on the DataLoader, or pad it ({why})")
    source, call, _, _ = chosen[0]
    change = keyword_set(source, call, "drop_last", "True")  # drop_last=False or a variable: set
    if change is None:
        return Proposal(finding, "the last batch is smaller: set drop_last=True on the DataLoader")
    return Proposal(finding, f"drop_last=True on the DataLoader at {source.at(call.lineno)}: every batch then "
                             "has one shape (the last, short one is skipped)",
                    (change,),
                    alters_results="drop_last=True skips each epoch's last, short batch: the model trains on fewer "
                                   "samples, so later losses differ")


def answers(finding: Finding, context: Context) -> bool:
    return isinstance(finding.details, RecompileDetails) and "input_shape" in finding.details.changes
