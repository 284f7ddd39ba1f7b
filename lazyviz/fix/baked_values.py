"""A slice bound or an index that is a Python number, baked into the graph as a constant:
an index_select of indices made on the CPU, so the value reaches the device as data."""
from __future__ import annotations

import ast
import os

from lazyviz.analysis.findings import Finding, RecompileDetails
from lazyviz.analysis.kinds import FindingKind
from lazyviz.fix.source import Change, Context, Proposal, call_name


def bare(element: ast.expr) -> bool:
    """`:` alone: the whole of a dimension."""
    return isinstance(element, ast.Slice) and element.lower is None and element.upper is None and element.step is None


def _python_bound_slice(subscript: ast.Subscript) -> tuple[int, ast.Slice] | None:
    """(dimension, slice) of `x[a:b]` or `x[:, a:b]`: one slice whose bounds are Python
    expressions (a constant pair never changes), every other index `:`, the sliced value
    a name (read twice by the edit, so never a call)."""
    if not isinstance(subscript.ctx, ast.Load) or not isinstance(subscript.value, (ast.Name, ast.Attribute)):
        return None
    elements = subscript.slice.elts if isinstance(subscript.slice, ast.Tuple) else [subscript.slice]
    bounded = [(dim, e) for dim, e in enumerate(elements) if not bare(e)]
    if len(bounded) != 1:
        return None
    dim, element = bounded[0]
    if not isinstance(element, ast.Slice) or element.step is not None or element.upper is None:
        return None
    if all(bound is None or isinstance(bound, ast.Constant) for bound in (element.lower, element.upper)):
        return None
    return dim, element


def _pure(expression: ast.expr) -> bool:
    """A value the edit may read twice: a name, its attributes, a constant index of one."""
    while isinstance(expression, (ast.Attribute, ast.Subscript)):
        if isinstance(expression, ast.Subscript) and not isinstance(expression.slice, ast.Constant):
            return False
        expression = expression.value
    return isinstance(expression, ast.Name)


def _python_index(subscript: ast.Subscript) -> tuple[list[ast.expr], int, ast.expr] | None:
    """(the constant indices before it, its dimension after them, the index) of `x[i]`,
    `x[:, t]`, `x[0, t - 1]`: one index that is a Python expression (not a constant, a
    slice or a tensor-looking call), `:` or constant integers before it, only `:` after;
    the value one the edit may read twice. A store (`x[i] = ...`) is never rewritten: the
    edit's index_select copies, and the write would go to the copy."""
    if not isinstance(subscript.ctx, ast.Load) or not _pure(subscript.value):
        return None
    elements = subscript.slice.elts if isinstance(subscript.slice, ast.Tuple) else [subscript.slice]
    variable = [n for n, e in enumerate(elements) if not bare(e) and not isinstance(e, (ast.Constant, ast.Slice))]
    if len(variable) != 1:
        return None
    at = variable[0]
    index = elements[at]
    if isinstance(index, (ast.Starred, ast.List, ast.Tuple, ast.Compare, ast.BoolOp)) or (
            isinstance(index, ast.Call) and not (isinstance(index.func, ast.Name) and index.func.id in ("int", "len"))):
        return None  # a mask, a list of indices or a tensor made by a call: not one Python number
    before, after = elements[:at], elements[at + 1:]
    if not all(bare(e) or (isinstance(e, ast.Constant) and type(e.value) is int) for e in before) \
            or not all(bare(e) for e in after):
        return None
    constants = [e for e in before if isinstance(e, ast.Constant)]
    if constants and any(bare(e) for e in before[:before.index(constants[-1])]):
        return None  # `x[:, 0, t]`: keep to the forms whose constants come first
    return constants, sum(1 for e in before if bare(e)), index


def _negative_possible(index: ast.expr) -> bool:
    """Could this Python index be negative (Python counts it from the end; index_select
    refuses it)? Where it subtracts or negates, the edit wraps it as Python would."""
    return any(isinstance(node, (ast.Sub, ast.USub)) for node in ast.walk(index))


def indices_as_data(module: str, line: str, indexed: list[tuple[ast.Subscript, tuple[list[ast.expr], int, ast.expr]]],
                    tensor: str = "torch.tensor") -> str:
    """The line with each Python-number index (_python_index's) made an index_select of a
    one-element index tensor made on the CPU, squeezed back to the indexed shape."""
    for node, (constants, dim, index) in sorted(indexed, key=lambda pair: -pair[0].col_offset):  # right to left
        value = ast.get_source_segment(module, node.value)
        base = f"{value}[{', '.join(str(c.value) for c in constants)}]" if constants else value
        made = f"{tensor}([{ast.get_source_segment(module, index)}])"
        if _negative_possible(index):  # -1 is the last, as in Python
            made = f"({made} % {base}.size({dim}))"
        line = (line[:node.col_offset] + f"{base}.index_select({dim}, {made}.to({value}.device)).squeeze({dim})"
                + line[node.end_col_offset:])
    return line


def propose(finding: Finding, context: Context) -> Proposal:
    """A slice bound or an index that is a Python number bakes it into the graph: every new
    value compiles a new one. The slice (or the index) as an index_select of indices made
    on the CPU and moved to the device: they reach the graph as data, and every step runs
    one graph, with the same values and shapes out. Every line the changed values were
    built at is rewritten, or none."""
    recompile = context.run.recompile_at(finding.executions[0]) if finding.executions else None
    origins = recompile.diff.origins if recompile is not None and recompile.diff is not None else ()
    changed = [c for c in origins if c.kind == "attribute" and c.location]
    if not changed:
        return Proposal(finding, finding.fix)
    changes: list[Change] = []
    imports: dict[Change, None] = {}
    slices = indices = 0
    for where in dict.fromkeys(c.source_line for c in changed):
        name, _, number = where.rpartition(":")
        files = [f for f in dict.fromkeys([*(frame.file for frame in context.stack(finding)),
                                           *context.run.info.sources])
                 if os.path.basename(f) == name and context.source(f) is not None]
        if len(files) != 1 or not number.isdigit():
            return Proposal(finding, finding.fix)
        source, line = context.source(files[0]), int(number)
        assert source is not None
        subscripts = [node for node in ast.walk(source.tree) if isinstance(node, ast.Subscript)
                      and node.lineno == line == node.end_lineno]
        sliced = [(node, bound) for node in subscripts if (bound := _python_bound_slice(node)) is not None]
        inside = {id(inner) for node, _ in sliced for inner in ast.walk(node.value)}
        indexed = [(node, index) for node in subscripts if (index := _python_index(node)) is not None
                   and id(node) not in inside]
        nested = {id(inner) for node, _ in indexed for inner in ast.walk(node.value)}
        indexed = [(node, index) for node, index in indexed if id(node) not in nested]
        # Each rewritten index must be one the graph saw change: a line that also indexes a
        # list with a Python number (`names[i]`) has more candidates than changed values.
        # (TorchScript selects the index, XLA slices one element: aten::select_copy, xla::generic_slice.)
        selects = sum(1 for c in changed if c.source_line == where and ("select" in c.op or "slice" in c.op))
        if not sliced and not indexed:
            return Proposal(finding, f"{finding.fix} (no slice or Python-number index of a tensor at {where} to "
                                     "rewrite)")
        if indexed and len(sliced) + len(indexed) > max(selects, 1):
            return Proposal(finding, f"{finding.fix} ({len(sliced) + len(indexed)} slices and indices at {where} "
                                     f"but {selects} changing in the graph: which are tensors is not sure)")
        text = source.line(line)
        if sliced:
            arange, made = call_name(source, "torch.arange", "torch")
            imports.update(dict.fromkeys(made))
            for node, (dim, element) in sorted(sliced, key=lambda pair: -pair[0].col_offset):  # right to left
                value = ast.get_source_segment(source.text, node.value)
                lower = ast.get_source_segment(source.text, element.lower) if element.lower is not None else "0"
                upper = ast.get_source_segment(source.text, element.upper)
                text = (text[:node.col_offset]
                        + f"{value}.index_select({dim}, {arange}({lower}, {upper}).to({value}.device))"
                        + text[node.end_col_offset:])
        if indexed:
            tensor, made = call_name(source, "torch.tensor", "torch")
            imports.update(dict.fromkeys(made))
            text = indices_as_data(source.text, text, indexed, tensor)
        slices, indices = slices + len(sliced), indices + len(indexed)
        changes.append(Change(source.path, line, line + 1, (text,)))
    places = " and ".join(f"{os.path.basename(c.file)}:{c.start}" for c in changes)
    if not indices:
        many, its = ("slice", "its") if slices == 1 else (f"{slices} slices", "their")
        return Proposal(finding, f"the {many} at {places} as index_select with indices made on the CPU: {its} "
                                 "bounds reach the device as data, not as constants in the graph, so one graph "
                                 "serves every step (index_select copies: where the code writes into the slice, "
                                 "edit by hand)", (*changes, *imports))
    what = " and ".join(part for part in (f"{slices} slice{'s' * (slices != 1)}" if slices else "",
                                          "the index" if indices == 1 and not slices else
                                          f"{indices} ind{'ices' if indices != 1 else 'ex'}") if part)
    return Proposal(finding, f"{what} at {places} as index_select with indices made on the CPU: they reach the "
                             "device as data, not as constants in the graph, so one graph serves every step, with "
                             "the same values and shapes out (where the code writes into the indexed tensor, edit "
                             "by hand)", (*changes, *imports))


def answers(finding: Finding, context: Context) -> bool:
    return finding.kind == FindingKind.RECOMPILE and isinstance(finding.details, RecompileDetails) \
        and finding.details.changes == ("attribute",)
