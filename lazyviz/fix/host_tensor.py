"""A host-side library call handed a lazy tensor (torchvision's save_image, TensorBoard's
add_image): the tensor it is given moved to the CPU first, `x.detach().cpu()`, at the
user's call. The pending graph then runs once, and the call's own work (make_grid's copy
per image) runs on the host, where it was written to run."""
from __future__ import annotations

import ast

from lazyviz.analysis.findings import Finding, HostCallDetails
from lazyviz.analysis.kinds import FindingKind
from lazyviz.fix.source import Change, Context, Proposal, calls_named


def _on_the_cpu(node: ast.expr) -> bool:
    """Already moved: `x.cpu()`, `x.to("cpu")`, `x.detach().cpu()`."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    return node.func.attr in ("cpu", "numpy") or (
        node.func.attr == "to" and any(isinstance(a, ast.Constant) and a.value == "cpu" for a in node.args))


def propose(finding: Finding, context: Context) -> Proposal:
    frame = finding.frame
    function = finding.details.call if isinstance(finding.details, HostCallDetails) else ""
    source = context.source(frame.file) if frame is not None else None
    if source is None or frame is None:
        return Proposal(finding, finding.fix)
    calls = [call for call in calls_named(source, frame.line, function) if call.args]
    if len(calls) != 1:
        return Proposal(finding, f"{finding.fix} (no single {function}() call at {source.at(frame.line)} to edit)")
    tensor = calls[0].args[0]
    if _on_the_cpu(tensor):
        return Proposal(finding, f"{function}() at {source.at(frame.line)} is already handed a tensor on the CPU, "
                                 "and the finding is still there: another argument is on the device", outlived=True)
    if tensor.lineno != tensor.end_lineno:
        return Proposal(finding, f"{finding.fix} (its first argument spans lines: change it by hand)")
    text = source.line(tensor.lineno)
    start, end = tensor.col_offset, tensor.end_col_offset or 0
    moved = text[start:end]
    if not isinstance(tensor, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
        moved = f"({moved})"
    # `fake.detach()` is already off the autograd graph: `.cpu()` alone, not a second detach.
    detached = isinstance(tensor, ast.Call) and isinstance(tensor.func, ast.Attribute) and tensor.func.attr == "detach"
    moved += ".cpu()" if detached else ".detach().cpu()"
    new = f"{text[:start]}{moved}{text[end:]}"
    return Proposal(finding, f"hand {function}() at {source.at(frame.line)} its tensor on the CPU "
                             f"({moved}): one transfer after the graph runs, and the "
                             "call's own work on the host", (Change(source.path, tensor.lineno, tensor.lineno + 1, (new,)),))


def answers(finding: Finding, context: Context) -> bool:
    return finding.kind == FindingKind.HOST_CALL
