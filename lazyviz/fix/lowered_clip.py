"""clip_grad_norm_ falling back once per parameter (its linalg_vector_norm): the same
clipping from ops that lower, a function put once in the user's file and called instead."""
from __future__ import annotations

import ast

from lazyviz.analysis.findings import FallbackDetails, Finding
from lazyviz.fix.source import Context, Proposal, call_name, calls_named, define_once, renamed_call

LOWERED_CLIP = """\


def clip_grad_norm_lowered(parameters, max_norm):
    \"\"\"torch.nn.utils.clip_grad_norm_ (the 2-norm) from ops that lower on the lazy device:
    torch's takes each gradient's norm with linalg_vector_norm, which falls back there.\"\"\"
    tensors = [parameters] if isinstance(parameters, {torch}.Tensor) else parameters
    grads = [p.grad for p in tensors if p.grad is not None]
    if not grads:
        return {torch}.tensor(0.0)
    total = {torch}.stack([g.detach().float().pow(2).sum() for g in grads]).sum().sqrt()
    scale = {torch}.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.detach().mul_(scale.to(g.dtype))
    return total
"""
LOWERED_CLIP_NAME = "clip_grad_norm_lowered"


def _clip_call(call: ast.Call) -> bool:
    """clip_grad_norm_(parameters, max_norm) with the 2-norm and nothing the lowered one
    leaves out (error_if_nonfinite=True raises on a NaN norm: it reads the norm on the host)."""
    name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
    if name != "clip_grad_norm_" or len(call.args) > 2 or any(isinstance(a, ast.Starred) for a in call.args):
        return False
    keywords = {k.arg: k.value for k in call.keywords}
    if None in keywords or len(call.args) + sum(k in keywords for k in ("parameters", "max_norm")) != 2:
        return False
    norm = keywords.get("norm_type", call.args[2] if len(call.args) > 2 else None)
    if norm is not None and not (isinstance(norm, ast.Constant) and norm.value in (2, 2.0)):
        return False
    error = keywords.get("error_if_nonfinite")
    if error is not None and not (isinstance(error, ast.Constant) and error.value is False):
        return False
    return set(keywords) <= {"parameters", "max_norm", "norm_type", "error_if_nonfinite", "foreach"}


def propose(finding: Finding, context: Context) -> Proposal:
    """clip_grad_norm_ falls back once per parameter (its linalg_vector_norm): the same
    clipping from ops that lower, as a function put once in the user's file, called instead."""
    frame = finding.frame
    source = context.source(frame.file) if frame is not None else None
    if source is None or frame is None:
        return Proposal(finding, finding.fix)
    calls = calls_named(source, frame.line, "clip_grad_norm_")
    if len(calls) != 1 or not _clip_call(calls[0]) or calls[0].func.end_lineno != calls[0].func.lineno:
        return Proposal(finding, f"{finding.fix} (the call at {source.at(frame.line)} is not one the lowered "
                                 "function can stand for: another norm, or error_if_nonfinite)")
    line = calls[0].func.lineno
    changes = [renamed_call(source, calls[0], LOWERED_CLIP_NAME)]
    torch, imports = call_name(source, "torch.stack", "torch")
    defined = define_once(source, LOWERED_CLIP_NAME, LOWERED_CLIP.format(torch=torch.rpartition(".")[0]))
    if defined:
        changes += [*imports, *defined]
    return Proposal(finding, f"clip_grad_norm_ at {source.at(line)} as {LOWERED_CLIP_NAME}, the same clipping "
                             "(the 2-norm of all gradients, scaled by max_norm / (norm + 1e-6) up to 1) from ops "
                             "that lower, defined once in the file: no fallback, no sync per parameter",
                    tuple(changes))


def answers(finding: Finding, context: Context) -> bool:
    return isinstance(finding.details, FallbackDetails) and (finding.details.call or "").endswith("clip_grad_norm_") \
        and finding.details.op == "aten::linalg_vector_norm"
