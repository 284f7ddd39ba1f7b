"""The user's own `argmax`/`argmin` falling back (pytorch/examples' mnist: `pred =
output.argmax(dim=1, keepdim=True)` in its test loop): the same indices from `max`/`min`
over the dimension, which lower (`x.max(dim=1, keepdim=True).indices`; the first index
of a tie, as argmax gives; checked on TS: no fallback, equal values)."""
from __future__ import annotations

import ast

from lazyviz.analysis.findings import FallbackDetails, Finding
from lazyviz.fix.source import Change, Context, Proposal

_REDUCTIONS = {"aten::argmax": "max", "aten::argmin": "min"}


def _rewritten(call: ast.Call, text: str, reduction: str) -> str | None:
    """`x.argmax(dim=1, keepdim=True)` or `torch.argmax(x, 1)` as the same indices from
    max; None where its arguments are not ones it knows."""
    func = call.func
    if not isinstance(func, ast.Attribute) or any(isinstance(a, ast.Starred) for a in call.args):
        return None
    args = list(call.args)
    if isinstance(func.value, ast.Name) and func.value.id == "torch":  # torch.argmax(x, ...)
        if not args:
            return None
        tensor = args.pop(0)
    else:
        tensor = func.value
    keywords = {k.arg: k.value for k in call.keywords}
    if None in keywords or set(keywords) - {"dim", "keepdim"} or len(args) > 2 \
            or len(args) + len(keywords) > 2 or (args and "dim" in keywords):
        return None
    dim = args[0] if args else keywords.get("dim")
    keepdim = args[1] if len(args) > 1 else keywords.get("keepdim")
    segment = ast.get_source_segment
    of = segment(text, tensor) or ""
    if not isinstance(tensor, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
        of = f"({of})"
    if dim is None or (isinstance(dim, ast.Constant) and dim.value is None):
        # Over every element: the flat index, as argmax without a dim gives.
        return None if keepdim is not None else f"{of}.flatten().{reduction}(dim=0).indices"
    kept = f", keepdim={segment(text, keepdim)}" if keepdim is not None else ""
    return f"{of}.{reduction}(dim={segment(text, dim)}{kept}).indices"


def propose(finding: Finding, context: Context) -> Proposal:
    op = finding.details.subject
    frame = finding.frame
    source = context.source(frame.file) if frame is not None else None
    if source is None or frame is None:
        return Proposal(finding, finding.fix)
    name = op.removeprefix("aten::")
    calls = [node for node in ast.walk(source.tree) if isinstance(node, ast.Call) and node.lineno == frame.line
             and isinstance(node.func, ast.Attribute) and node.func.attr == name]
    new = _rewritten(calls[0], source.text, _REDUCTIONS[op]) if len(calls) == 1 else None
    if new is None or calls[0].end_lineno != calls[0].lineno:
        return Proposal(finding, f"{finding.fix} (the {name} at {source.at(frame.line)} is not one call this edit "
                                 "knows: change it by hand)")
    call = calls[0]
    line = source.line(call.lineno)
    changed = line[:call.col_offset] + new + line[call.end_col_offset or 0:]
    return Proposal(finding, f"{name} at {source.at(frame.line)} as {new}: the same indices, from a reduction "
                             "that lowers", (Change(source.path, call.lineno, call.lineno + 1, (changed,)),))


def answers(finding: Finding, context: Context) -> bool:
    # The user's own call: inside a library's code the line is not theirs to edit.
    return isinstance(finding.details, FallbackDetails) and finding.details.op in _REDUCTIONS \
        and not finding.details.library_line and not finding.details.call
