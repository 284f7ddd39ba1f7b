"""The user's own F.scaled_dot_product_attention falling back on TS (through isneginf,
all.dim and where): the same attention from ops that lower, a function put once in the
user's file and called instead (the scale, is_causal and a boolean attn_mask as
masked_fill, a float mask added, softmax, dropout where dropout_p > 0). Checked against
the op on the CPU in tests/test_fix.py."""
from __future__ import annotations

from lazyviz.analysis.findings import FallbackDetails, Finding
from lazyviz.fix.source import Context, Proposal, call_name, calls_named, define_once, renamed_call

LOWERED_NAME = "scaled_dot_product_attention_lowered"
LOWERED = """\


def scaled_dot_product_attention_lowered(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                         scale=None):
    \"\"\"F.scaled_dot_product_attention from ops that lower on the lazy device: its own path
    falls back there (isneginf, all, where), a sync each.\"\"\"
    scale = query.size(-1) ** -0.5 if scale is None else scale
    scores = (query @ key.transpose(-2, -1)) * scale
    if is_causal:
        rows = {torch}.arange(query.size(-2), device=query.device)
        columns = {torch}.arange(key.size(-2), device=query.device)
        scores = scores.masked_fill(rows[:, None] < columns[None, :], float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == {torch}.bool:
            scores = scores.masked_fill(attn_mask == 0, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = {torch}.softmax(scores, dim=-1)
    if dropout_p > 0.0:
        weights = {torch}.nn.functional.dropout(weights, p=dropout_p)
    return weights @ value
"""
_KEYWORDS = {"attn_mask", "dropout_p", "is_causal", "scale"}


def answers(finding: Finding, context: Context) -> bool:
    return isinstance(finding.details, FallbackDetails) and finding.details.call == "scaled_dot_product_attention" \
        and not finding.details.library_line and finding.frame is not None


def propose(finding: Finding, context: Context) -> Proposal:
    frame = finding.frame
    source = context.source(frame.file) if frame is not None else None
    if source is None or frame is None:
        return Proposal(finding, finding.fix)
    calls = calls_named(source, frame.line, "scaled_dot_product_attention")
    if len(calls) != 1 or calls[0].func.lineno != calls[0].func.end_lineno \
            or len(calls[0].args) > 3 or any(k.arg not in _KEYWORDS for k in calls[0].keywords):
        return Proposal(finding, finding.fix)
    line = calls[0].func.lineno
    changes = [renamed_call(source, calls[0], LOWERED_NAME)]
    torch, imports = call_name(source, "torch.softmax", "torch")
    defined = define_once(source, LOWERED_NAME, LOWERED.format(torch=torch.rpartition(".")[0]))
    if defined:
        changes += [*imports, *defined]
    return Proposal(finding, f"scaled_dot_product_attention at {source.at(line)} as {LOWERED_NAME}, the same "
                             "attention (scale, causal and boolean masks by masked_fill, softmax, dropout) from ops "
                             "that lower, defined once in the file: no fallback, no sync", tuple(changes))
