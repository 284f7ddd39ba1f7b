"""`if tensor:` in the user's own code, choosing a value (`if loss < best: best = loss`,
`x = a if flag else b`): each step reads the condition on the host, an extra execution.
The choice made on the device instead, one expression: `torch.where(cond, a, b)` on
PyTorch/XLA; on TorchScript, whose where falls back, `a.masked_fill(cond == 0, 0) +
b.masked_fill(cond, 0)`, which lowers (both checked on the backends in tests)."""
from __future__ import annotations

import ast

from lazyviz.analysis.findings import ExtraSyncDetails, Finding
from lazyviz.fix.source import Change, Context, Proposal, Source, alone_on_its_lines, call_name, path_to_line

# What both branches may hold: names, constants, arithmetic, attributes and subscripts of
# names. Evaluated both, always, they must have no effect beyond their value.
_PURE = (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.Attribute, ast.Subscript,
         ast.Load, ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.Slice, ast.Tuple)


def _pure(expression: ast.expr) -> bool:
    return all(isinstance(node, _PURE) or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                                           and node.func.attr in ("detach", "clone") and not node.args)
               for node in ast.walk(expression) if not isinstance(node, ast.expr_context))


def _choice(statement: ast.stmt, line: int) -> tuple[str, ast.expr, ast.expr, ast.expr | None] | None:
    """(the name chosen, the condition, the value if true, the value if false: None where
    the name keeps its value) of `if c: n = a [else: n = b]` or `n = a if c else b`,
    whose condition is at `line`."""
    if isinstance(statement, ast.If) and statement.test.lineno <= line <= (statement.test.end_lineno or line):
        body, orelse = statement.body, statement.orelse
        if len(body) != 1 or len(orelse) > 1 or not isinstance(body[0], ast.Assign):
            return None
        name = _single_name(body[0])
        if name is None or (orelse and (not isinstance(orelse[0], ast.Assign) or _single_name(orelse[0]) != name)):
            return None
        other = orelse[0].value if orelse else None  # type: ignore[union-attr]
        return name, statement.test, body[0].value, other
    if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.IfExp):
        name = _single_name(statement)
        choice = statement.value
        if name is None or not choice.test.lineno <= line <= (choice.test.end_lineno or line):
            return None
        return name, choice.test, choice.body, choice.orelse
    return None


def _single_name(assign: ast.Assign) -> str | None:
    if len(assign.targets) == 1 and isinstance(assign.targets[0], ast.Name):
        return assign.targets[0].id
    return None


def _atom(text: str) -> str:
    """The expression as the receiver of a method call: in parentheses unless it is one
    already (a name, an attribute, a call, a subscript)."""
    node = ast.parse(text, mode="eval").body
    return text if isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) else f"({text})"


def on_the_device(source: Source, cond: str, a: str, b: str, where_lowers: bool) -> tuple[str, tuple[Change, ...]]:
    """The choice as one expression that stays in the graph (Capabilities.where_lowers:
    torch.where does)."""
    if where_lowers:
        where, imports = call_name(source, "torch.where", "torch")
        return f"{where}({cond}, {a}, {b})", imports
    return f"{_atom(a)}.masked_fill({_atom(cond)} == 0, 0) + {_atom(b)}.masked_fill({cond}, 0)", ()


def propose(finding: Finding, context: Context) -> Proposal:
    frame = finding.frame
    source = context.source(frame.file) if frame is not None else None
    if source is None or frame is None:
        return Proposal(finding, finding.fix)
    chain = path_to_line(source.tree, frame.line)
    statement = next((node for node in reversed(chain) if isinstance(node, (ast.If, ast.Assign))), None)
    choice = _choice(statement, frame.line) if isinstance(statement, ast.stmt) else None
    if statement is None or choice is None or not alone_on_its_lines(source, statement):
        return Proposal(finding, f"{finding.fix} (the branch at {source.at(frame.line)} does more than choose "
                                 "a value: keep it on the device by hand)")
    name, test, yes, no = choice
    if isinstance(test, ast.BoolOp):
        # `flag and loss < best`: Python's and/or short-circuit on the flag, which the device
        # would not; made into one device expression, a False flag would be the mask.
        return Proposal(finding, f"{finding.fix} (the condition at {source.at(frame.line)} joins conditions with "
                                 "and/or: keep the Python part as the `if` around it, and make the tensor "
                                 "comparison's choice on the device by hand)")
    if not all(_pure(part) for part in (test, yes, *([no] if no is not None else []))):
        return Proposal(finding, f"{finding.fix} (both values would be computed every step, and one calls "
                                 "something: rewrite it by hand)")
    segment = lambda node: ast.get_source_segment(source.text, node) or ""
    expression, imports = on_the_device(source, segment(test), segment(yes), segment(no) if no is not None else name,
                                        context.run.info.capabilities.where_lowers)
    indent = source.indent_of(statement.lineno)
    new = f"{indent}{name} = {expression}{source.newline()}"
    return Proposal(finding, f"the choice at {source.at(statement.lineno)} made on the device, {name} = "
                             f"{expression[:60]}{'...' if len(expression) > 60 else ''}: the same value, no read of "
                             "the condition on the host (both values are computed)",
                    (Change(source.path, statement.lineno, (statement.end_lineno or statement.lineno) + 1, (new,)),
                     *imports))


def answers(finding: Finding, context: Context) -> bool:
    """A host read of a condition in the user's own code (inside a library: its line is named, no edit)."""
    return isinstance(finding.details, ExtraSyncDetails) and finding.details.cause == "bool" \
        and not finding.details.library_line
