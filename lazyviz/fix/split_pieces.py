"""A split, chunk or unbind that falls back and hands its pieces back on the host (TS:
split_copy, whose pieces are CPU tensors that say lazy:0; the first lazy op on one
raises): the same pieces taken by narrow or select, which lower, from a function put
once in the user's file and called instead. The commonest crash of GPT code on the TS
backend: `q, k, v = self.c_attn(x).split(self.n_embd, dim=2)`."""
from __future__ import annotations

import ast

from lazyviz.analysis.findings import Finding
from lazyviz.analysis.kinds import FindingKind
from lazyviz.fix.source import Change, Context, Proposal, define_once

# Tensor.split / torch.split take (split_size_or_sections, dim=0); chunk (chunks, dim=0);
# unbind (dim=0). Each function hands back what torch's does (a tuple of views), from
# narrow and select, which lower on the lazy device.
HELPERS = {
    "split": ("split_lowered", """\


def split_lowered(tensor, split_size_or_sections, dim=0):
    \"\"\"tensor.split(...) from narrow, which lowers on the lazy device: split falls back
    there and hands its pieces back on the host.\"\"\"
    size = tensor.size(dim)
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        sizes = [min(step, size - start) for start in range(0, size, step)] or [0]
    else:
        sizes = list(split_size_or_sections)
    pieces, start = [], 0
    for length in sizes:
        pieces.append(tensor.narrow(dim, start, length))
        start += length
    return tuple(pieces)
"""),
    "chunk": ("chunk_lowered", """\


def chunk_lowered(tensor, chunks, dim=0):
    \"\"\"tensor.chunk(...) from narrow, which lowers on the lazy device: chunk splits, and
    split falls back there and hands its pieces back on the host.\"\"\"
    size = tensor.size(dim)
    step = max(1, -(-size // chunks))
    return tuple(tensor.narrow(dim, start, min(step, size - start)) for start in range(0, size, step))
"""),
    "unbind": ("unbind_lowered", """\


def unbind_lowered(tensor, dim=0):
    \"\"\"tensor.unbind(...) from select, which lowers on the lazy device: unbind falls back
    there and hands its pieces back on the host.\"\"\"
    return tuple(tensor.select(dim, index) for index in range(tensor.size(dim)))
"""),
}
# The fallback ops each call shows as (chunk goes through split).
_OPS = {"aten::split_copy": ("split", "chunk"), "aten::split_with_sizes_copy": ("split",),
        "aten::unbind_copy": ("unbind",), "aten::split": ("split", "chunk"), "aten::unbind": ("unbind",)}


def _calls_of(finding: Finding) -> tuple[str, ...]:
    op = finding.details.subject.split(".")[0]
    return _OPS.get(op, ())


def answers(finding: Finding, context: Context) -> bool:
    return finding.kind == FindingKind.CRASH and bool(_calls_of(finding)) and finding.frame is not None


def _piece_call(node: ast.AST, names: tuple[str, ...]) -> str | None:
    """The call's name when it is x.split(...) or torch.split(x, ...) (and chunk, unbind)."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute) or node.func.attr not in names:
        return None
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        return None
    return node.func.attr


def propose(finding: Finding, context: Context) -> Proposal:
    frame = finding.frame
    source = context.source(frame.file) if frame is not None else None
    if source is None or frame is None:
        return Proposal(finding, finding.fix)
    names = _calls_of(finding)
    calls = [node for node in ast.walk(source.tree) if _piece_call(node, names)
             and node.lineno == frame.line == node.end_lineno]
    if len(calls) != 1:
        return Proposal(finding, f"{finding.fix} ({len(calls)} {'/'.join(names)} calls on one line at "
                                 f"{source.at(frame.line)}: change it by hand)")
    call = calls[0]
    name = _piece_call(call, names)
    assert name is not None and isinstance(call.func, ast.Attribute)
    text = source.line(frame.line)
    receiver = ast.get_source_segment(text, _on_line(call.func.value))
    arguments = [ast.get_source_segment(text, _on_line(a)) for a in call.args]
    arguments += [f"{k.arg}={ast.get_source_segment(text, _on_line(k.value))}" for k in call.keywords]
    module_call = isinstance(call.func.value, ast.Name) and call.func.value.id in ("torch",)
    if module_call:  # torch.split(x, n, dim): the tensor is the first argument
        if not call.args:
            return Proposal(finding, finding.fix)
        receiver, arguments = arguments[0], arguments[1:]
    if receiver is None or None in arguments:
        return Proposal(finding, finding.fix)
    helper, body = HELPERS[name]
    replaced = f"{helper}({', '.join([receiver, *arguments])})"
    new = text[:call.col_offset] + replaced + text[call.end_col_offset or 0:]
    changes = (Change(source.path, frame.line, frame.line + 1, (new,)), *define_once(source, helper, body))
    return Proposal(finding, f"{name} at {source.at(frame.line)} as {helper}, the same pieces taken by "
                             f"{'select' if name == 'unbind' else 'narrow'} (which lowers), defined once in the file: "
                             f"{name} falls back on this backend and hands its pieces back on the host", changes)


def _on_line(node: ast.expr) -> ast.expr:
    """The node with its offsets read against its one line (the edit is of one line)."""
    copy = ast.Constant(value=None)
    copy.lineno = copy.end_lineno = 1
    copy.col_offset, copy.end_col_offset = node.col_offset, node.end_col_offset
    return copy
