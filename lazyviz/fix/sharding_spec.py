"""A sharding annotation that disagrees with how an op uses its tensor (PyTorch/XLA SPMD):
the partition spec the finding suggests, written into the `mark_sharding` call at the
annotation's line (`(None, "model")` -> `("model", None)`)."""
from __future__ import annotations

import ast

from lazyviz.analysis.findings import Finding
from lazyviz.analysis.findings.collective import CollectiveDetails
from lazyviz.fix.source import Change, Context, Proposal, calls_named


def answers(finding: Finding, context: Context) -> bool:
    return isinstance(finding.details, CollectiveDetails) and finding.details.suggested_spec is not None


def propose(finding: Finding, context: Context) -> Proposal:
    details = finding.details
    assert isinstance(details, CollectiveDetails) and details.annotation is not None and details.suggested_spec
    where, spec = details.annotation, details.suggested_spec
    source = context.source(where.file)
    calls = calls_named(source, where.line, "mark_sharding") if source is not None else []
    if source is None or len(calls) != 1:
        return Proposal(finding, finding.fix)
    call = calls[0]
    given = call.args[2] if len(call.args) > 2 else \
        next((k.value for k in call.keywords if k.arg == "partition_spec"), None)
    # Only a spec written out at the call, on one line, as the trace recorded it: a
    # name bound elsewhere may be shared by other annotations.
    if not isinstance(given, (ast.Tuple, ast.List)) or given.lineno != given.end_lineno \
            or _literal(given) != [tuple(e) if isinstance(e, list) else e for e in details.annotated_spec or ()]:
        return Proposal(finding, finding.fix)
    text = source.line(given.lineno)
    quote = "'" if "'" in text[given.col_offset:given.end_col_offset] else '"'
    written = ", ".join(_entry(e, quote) for e in spec) + ("," if len(spec) == 1 else "")
    opened, closed = ("[", "]") if isinstance(given, ast.List) else ("(", ")")
    change = Change(source.path, given.lineno, given.lineno + 1,
                    (text[:given.col_offset] + opened + written + closed + text[given.end_col_offset or 0:],))
    return Proposal(finding, f"annotate the tensor at {source.at(given.lineno)} {opened}{written}{closed}: split on "
                             "the dimension the matmul sums over, so XLA sums partial products (one all-reduce) "
                             "rather than gathering", (change,))


def _literal(node: ast.expr) -> list | None:
    try:
        return [tuple(e) if isinstance(e, (list, tuple)) else e for e in ast.literal_eval(node)]
    except ValueError:
        return None


def _entry(entry: object, quote: str) -> str:
    if isinstance(entry, list):
        return "(" + ", ".join(_entry(e, quote) for e in entry) + ("," if len(entry) == 1 else "") + ")"
    return f"{quote}{entry}{quote}" if isinstance(entry, str) else repr(entry)
