"""A per-step `.item()`/`print`: the statement moved into a step closure, which reads the
value after the step's own execution (the same output, no extra execution). A value read
with `.item()` only to be formatted into such a print (dcgan's `D_x =
output.mean().item()`) is kept a tensor instead: the closure formats it after the step."""
from __future__ import annotations

import ast
import re

from lazyviz.analysis.findings import ExtraSyncDetails, Finding
from lazyviz.fix.source import (
    SCOPES,
    Change,
    Context,
    Proposal,
    Source,
    alone_on_its_lines,
    call_name,
    device_condition,
    enclosing_loops,
    guarded_imports,
    path_to_line,
)

# Calls whose only effect is output: moved into a step closure, they print the same later.
OUTPUT_CALLS = frozenset({"print", "info", "debug", "warning", "warn", "error", "log", "write", "add_scalar",
                          "add_scalars", "add_text", "set_postfix", "set_description", "pprint", "echo"})
LONG_LINE = 120  # a first line longer than this breaks after add_step_closure(
READS = frozenset({"item", "tolist", "cpu", "numpy"})  # calls that read a tensor's values on the host
# A printf conversion; a 0-dim tensor formats as its number under the numeric ones.
_CONVERSION = re.compile(r"%(?:\([^)]*\))?[-+ #0]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?([a-zA-Z%])")
_NUMERIC = frozenset("diouxXeEfFgG")
_NUMERIC_SPEC = re.compile(r".*[dxXoeEfFgGn%]$")
_SCOPE_BINDERS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _names_bound_in(scope: ast.AST) -> set[str]:
    """Names assigned anywhere in a function (or at a module's top level), its parameters too."""
    bound: set[str] = set()
    if isinstance(scope, _SCOPE_BINDERS):
        arguments = scope.args
        for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                    *filter(None, [arguments.vararg, arguments.kwarg])]:
            bound.add(arg.arg)
    todo = list(scope.body) if isinstance(scope.body, list) else [scope.body]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        if isinstance(node, (*SCOPES, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            continue  # their own names are theirs
        todo.extend(ast.iter_child_nodes(node))
    return bound


def _free_names(expression: ast.expr) -> list[str]:
    """Names the expression reads, in order, without those its comprehensions bind."""
    inner = {n.id for n in ast.walk(expression) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    seen = [n.id for n in ast.walk(expression) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    return [name for name in dict.fromkeys(seen) if name not in inner]


def propose(finding: Finding, context: Context) -> Proposal:
    closure_call = context.run.info.capabilities.closure_call
    frame = finding.frame
    source = context.source(frame.file) if frame else None
    if source is None or frame is None:
        return Proposal(finding, finding.fix)
    chain = path_to_line(source.tree, frame.line)
    statement = chain[-1] if chain else None
    loops = enclosing_loops(source, frame.line)
    if loops and isinstance(statement, ast.Assign):
        kept = _kept_a_tensor(statement, source, context)
        if kept is not None:
            return Proposal(finding, kept[0], kept[1])
    if not loops or not isinstance(statement, ast.Expr) or not isinstance(statement.value, ast.Call) \
            or not alone_on_its_lines(source, statement):
        return Proposal(finding, f"{finding.fix} (the read at {frame.site.rpartition('/')[2]} is not a call "
                                 "statement of its own: move it by hand)")
    called = statement.value.func
    name = called.id if isinstance(called, ast.Name) else getattr(called, "attr", "")
    if name not in OUTPUT_CALLS:
        # imagenet's `losses.update(loss.item(), n)`: the meter it updates is printed later in
        # the same iteration, before the step ends; run after the step, it would print the
        # last iteration's value.
        return Proposal(finding, f"{finding.fix} (the read at {source.at(statement.lineno)} feeds {name or 'a'}"
                                 "(), which may keep state the loop reads before the step ends: moved after the "
                                 "step it could be read a step late; change it by hand)")
    computed = [call for call in ast.walk(statement.value) if isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute) and call.func.attr in READS
                and not isinstance(call.func.value, (ast.Name, ast.Attribute))]
    if computed:
        # In a closure, x.sum().item() would run x.sum() as a graph of its own: no saving.
        read = ast.get_source_segment(source.text, computed[0].func.value) or "the value"
        return Proposal(finding, f"compute {read} in the step (assign it to a name before "
                                 f"{context.run.info.names.get('mark_step', 'mark_step()')}), then read that name in "
                                 f"{context.run.info.names.get('step_closure', 'a step closure')}: a closure that "
                                 "computes on the device runs a graph of its own")
    # Bound as the closure's arguments: it runs at the step's end, after the loop body may
    # have rebound them. A name the loops never rebind (dcgan's opt, dataloader) is read
    # as it is.
    outermost = loops[0]
    rebound = _names_bound_in(outermost) | {n.id for n in ast.walk(getattr(outermost, "target", outermost))
                                            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    names = [n for n in _free_names(statement.value) if n in rebound]
    call, imports = call_name(source, *closure_call)
    expression = ast.get_source_segment(source.text, statement.value) or ""
    head = source.line(statement.lineno)[: statement.col_offset]
    listed = ", ".join(names)
    lam = f"lambda {listed}: " if names else "lambda: "
    opened = f"{call}("
    # A long first line breaks after the call's parenthesis, the lambda a level deeper.
    if len(head) + len(opened) + len(lam) + len(expression.splitlines()[0] if expression else "") > LONG_LINE:
        opened += f"{source.newline()}{head}{' ' * 4}"
    arguments = f", args=({listed}{',' if len(names) == 1 else ''})" if names else ""
    moved = f"{opened}{lam}{expression}{arguments})"
    tail = source.line(statement.end_lineno or statement.lineno)[statement.end_col_offset or 0:]
    text = head + moved + tail
    lines = tuple(text.splitlines(keepends=True))
    # A closure runs at the backend's step: on the CPU (no step) it would never print.
    guard = device_condition(source, statement.lineno, context.run.info.device)
    said = ""
    if guard is not None:
        test, guard_imports = guard
        original = source.lines[statement.lineno - 1:statement.end_lineno or statement.lineno]
        imports, inside = guarded_imports(imports)
        lines = (f"{head}if {test}:{source.newline()}", *(f"{head}    {s}{source.newline()}" for s in inside),
                 *(" " * 4 + line for line in lines),
                 f"{head}else:{source.newline()}", *(" " * 4 + line for line in original))
        imports = (*imports, *guard_imports)
        said = f" (where {test}; as it was on the other devices the program runs on)"
    change = Change(source.path, statement.lineno, (statement.end_lineno or statement.lineno) + 1, lines)
    return Proposal(finding, f"move the read at {source.at(statement.lineno)} into a step closure "
                             f"({call}){said}: it prints the same values after the step, without an extra "
                             "execution", (change, *imports))


def _kept_a_tensor(statement: ast.Assign, source: Source, context: Context) -> tuple[str, tuple[Change, ...]] | None:
    """`name = <tensor>.item()` whose every use formats it as a number (`'%.4f' % name`,
    `f"{name:.4f}"`, a step closure's argument): `.item()` dropped, so the value is read
    where it is formatted, after the step where that is in a step closure."""
    value = statement.value
    if len(statement.targets) != 1 or not isinstance(statement.targets[0], ast.Name) \
            or not isinstance(value, ast.Call) or value.args or value.keywords \
            or not isinstance(value.func, ast.Attribute) or value.func.attr != "item" \
            or statement.lineno != statement.end_lineno or not alone_on_its_lines(source, statement):
        return None
    name = statement.targets[0].id
    parents = {child: node for node in ast.walk(source.tree) for child in ast.iter_child_nodes(node)}
    uses = [node for node in ast.walk(source.tree) if isinstance(node, ast.Name) and node.id == name
            and isinstance(node.ctx, ast.Load)]
    if not uses or not all(_formatted(use, parents) for use in uses):
        return None
    # Detached: the value is all the print needs, not the autograd graph behind it.
    tensor = (ast.get_source_segment(source.text, value.func.value) or "") + ".detach()"
    line = source.line(statement.lineno)
    start, end = value.col_offset, value.end_col_offset or 0
    change = Change(source.path, statement.lineno, statement.lineno + 1, (line[:start] + tensor + line[end:],))
    closure = context.run.info.names.get("step_closure", "a step closure")
    return (f"keep {name} a tensor at {source.at(statement.lineno)} ({name} = {tensor}): every use formats it "
            f"as a number, so it is read where it is printed, after the step in {closure}, not in a graph of "
            "its own", (change,))


def _formatted(use: ast.Name, parents: dict[ast.AST, ast.AST]) -> bool:
    """The name is formatted as a number where it is used: an argument of a printf
    conversion that is numeric, an f-string field with a numeric spec, or handed to a step
    closure (whose own parameter of the name is checked where it is used)."""
    parent = parents.get(use)
    if isinstance(parent, ast.FormattedValue):
        spec = parent.format_spec
        text = "".join(v.value for v in spec.values if isinstance(v, ast.Constant)) if isinstance(spec, ast.JoinedStr) \
            else ""
        return parent.conversion == -1 and bool(_NUMERIC_SPEC.match(text))
    position, operands = 0, parent
    if isinstance(parent, ast.Tuple):
        position, operands = parent.elts.index(use), parents.get(parent)
    if isinstance(operands, ast.BinOp) and isinstance(operands.op, ast.Mod) and operands.right in (use, parent) \
            and isinstance(operands.left, ast.Constant) and isinstance(operands.left.value, str):
        conversions = [c for c in _CONVERSION.findall(operands.left.value) if c != "%"]
        return position < len(conversions) and conversions[position] in _NUMERIC
    call = parents.get(parent) if isinstance(parent, ast.Tuple) else None
    if isinstance(call, ast.keyword) and call.arg == "args":
        call = parents.get(call)
    return isinstance(call, ast.Call) and (ast.unparse(call.func).endswith("add_step_closure"))


def answers(finding: Finding, context: Context) -> bool:
    return isinstance(finding.details, ExtraSyncDetails) and finding.details.cause in ("item", "print", "tolist")
