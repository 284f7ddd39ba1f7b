"""A sparse tensor sent to a lazy device, which has no sparse layout (pytorch/examples'
gcn: `return features.to_sparse().to(device), ..., adj_mat.to_sparse().to(device)`
raises "Could not run ... from the 'SparseLazy' backend"; 'SparseXLA' on PyTorch/XLA):
the `.to_sparse()` calls of the statement that raised dropped, so the tensors stay
dense. torch.mm, torch.spmm and torch.sparse.mm give the same values on dense
tensors (checked on the CPU and on TS); on the CPU the dense tensor takes more memory."""
from __future__ import annotations

import ast

from lazyviz.analysis.failures import FailureDetails
from lazyviz.analysis.findings import Finding
from lazyviz.fix.source import Change, Context, Proposal

# The conversions to a sparse layout a tensor method makes.
_TO_SPARSE = frozenset({"to_sparse", "to_sparse_coo", "to_sparse_csr", "to_sparse_csc", "to_sparse_bsr",
                        "to_sparse_bsc"})


def answers(finding: Finding, context: Context) -> bool:
    return isinstance(finding.details, FailureDetails) and finding.details.sparse and finding.frame is not None


def propose(finding: Finding, context: Context) -> Proposal:
    raised = context.raising_statement(finding)
    if raised is None:
        return Proposal(finding, finding.fix)
    source, statement, last = raised
    calls = [node for node in ast.walk(statement) if isinstance(node, ast.Call) and node.lineno <= last
             and isinstance(node.func, ast.Attribute) and node.func.attr in _TO_SPARSE]
    if not calls or any(call.lineno != call.end_lineno for call in calls):
        return Proposal(finding, f"{finding.fix} (no .to_sparse() of one line in the statement at "
                                 f"{source.at(statement.lineno)}: make the tensor dense by hand)")
    changes = []
    for line in sorted({call.lineno for call in calls}):
        text = source.line(line)
        # Right to left, so each cut leaves the columns of the ones before it alone.
        for call in sorted((c for c in calls if c.lineno == line), key=lambda c: -c.col_offset):
            text = _without(text, call)
        changes.append(Change(source.path, line, line + 1, (text,)))
    count = f"{len(calls)} .to_sparse() calls" if len(calls) > 1 else "the .to_sparse() call"
    return Proposal(finding, f"drop {count} at {source.at(statement.lineno)}: the tensors stay dense on every device (the "
                             "same values; lazy tensors have no sparse layout)", tuple(changes))


def _without(text: str, call: ast.Call) -> str:
    """The line with `X.to_sparse(...)` made `X` (a parenthesised X keeps its parentheses).
    ast's columns count UTF-8 bytes: the line is cut as bytes (a non-ASCII string before it)."""
    assert isinstance(call.func, ast.Attribute)
    raw, end = text.encode(), call.end_col_offset or 0
    dot = raw.rindex(f".{call.func.attr}".encode(), call.func.value.end_col_offset or 0, end)
    return (raw[:dot] + raw[end:]).decode()
