"""A slice bound past the dimension's start (`idx[:, -block_size:]` while the sequence is
shorter than block_size): eager PyTorch and LTC clamp it to the start, PyTorch/XLA 2.9
raises "Value out of range". The bound of the statement that raised is clamped as eager
clamps it, `-min(n, x.size(d))`: the same elements on every device, and no error."""
from __future__ import annotations

import ast

from lazyviz.analysis.failures import FailureDetails
from lazyviz.analysis.findings import Finding
from lazyviz.fix.source import Change, Context, Proposal

# What may be named twice (the bound, the sliced tensor): no call, so nothing runs twice.
_PLAIN = (ast.Name, ast.Attribute, ast.Constant, ast.Subscript, ast.BinOp)


def answers(finding: Finding, context: Context) -> bool:
    return isinstance(finding.details, FailureDetails) and finding.details.slice_bound is not None \
        and finding.frame is not None


def _negative_bounds(subscript: ast.Subscript) -> list[tuple[int, ast.UnaryOp]]:
    """(dimension, bound) for each `-n` bound of the subscript's slices, up to an Ellipsis
    or an index that is not a slice of a dimension (None adds one: left alone)."""
    items = subscript.slice.elts if isinstance(subscript.slice, ast.Tuple) else [subscript.slice]
    found = []
    for dimension, item in enumerate(items):
        if not isinstance(item, ast.Slice):
            if isinstance(item, ast.Constant) and item.value in (None, Ellipsis):
                break
            continue
        for bound in (item.lower, item.upper):
            # `-n`, n an int or an expression without calls (so naming it twice runs nothing twice)
            if isinstance(bound, ast.UnaryOp) and isinstance(bound.op, ast.USub) and _plain(bound.operand) \
                    and (not isinstance(bound.operand, ast.Constant) or isinstance(bound.operand.value, int)):
                found.append((dimension, bound))
    return found


def _plain(node: ast.AST) -> bool:
    return all(not isinstance(inner, (ast.Call, ast.NamedExpr, ast.Await, ast.Yield)) for inner in ast.walk(node)) \
        and isinstance(node, _PLAIN)


def propose(finding: Finding, context: Context) -> Proposal:
    raised = context.raising_statement(finding)
    if raised is None:
        return Proposal(finding, finding.fix)
    source, statement, last = raised
    cuts: list[tuple[int, int, int, str]] = []  # (line, start, end, text): byte columns
    for node in ast.walk(statement):
        if not isinstance(node, ast.Subscript) or node.lineno > last or not _plain(node.value):
            continue
        tensor = ast.get_source_segment(source.text, node.value) or ""
        for dimension, bound in _negative_bounds(node):
            if bound.lineno != bound.end_lineno or "\n" in tensor:
                continue
            amount = ast.get_source_segment(source.text, bound.operand) or ""
            cuts.append((bound.lineno, bound.col_offset, bound.end_col_offset or 0,
                         f"-min({amount}, {tensor}.size({dimension}))"))
    if not cuts:
        return Proposal(finding, f"{finding.fix} (no slice with a bound `-n` in the statement at "
                                 f"{source.at(statement.lineno)}: clamp it by hand)")
    changes = []
    for line in sorted({cut[0] for cut in cuts}):
        raw = source.line(line).encode()  # ast's columns count UTF-8 bytes
        for _, start, end, text in sorted((c for c in cuts if c[0] == line), key=lambda c: -c[1]):
            raw = raw[:start] + text.encode() + raw[end:]
        changes.append(Change(source.path, line, line + 1, (raw.decode(),)))
    shown = ", ".join(text for *_, text in cuts[:2])
    return Proposal(finding, f"clamp the slice bound{'s' * (len(cuts) > 1)} at {source.at(statement.lineno)} as eager "
                             f"PyTorch does ({shown}): the same elements on every device, where PyTorch/XLA raises "
                             "for a bound past the dimension's start", tuple(changes))
