"""torch.save of a state holding lazy tensors (a state_dict, a checkpoint dict with the
optimizer's state): on TS it raises (a lazy tensor has no storage on the host); on
PyTorch/XLA it reads the state one tensor at a time, a graph each. The state
handed to torch.save is made on the CPU first by a function put once in the user's file:
the pending work run in one sync (the backend's step call), then each tensor moved, the
dicts, lists and tuples kept as they were. On torch 2.13's TS backend each of a
state_dict's detached tensors still runs a small graph of its own when it moves (an
AdamW checkpoint of 12 tensors: 13 graphs, whether by mark_step, sync_multi or
torch._lazy.to_cpu): the save costs that once, and works.
"""
from __future__ import annotations

import ast

from lazyviz.analysis.findings import Finding
from lazyviz.fix.source import STEP_CALLS, Change, Context, Proposal, call_name, define_once

STATE_ON_CPU_NAME = "state_on_cpu"
STATE_ON_CPU = """\


def state_on_cpu(state):
    \"\"\"`state` as torch.save can write it: a lazy tensor has no storage on the host. The
    pending work runs in one sync, then every tensor moves to the CPU; dicts (with a
    state_dict's _metadata), lists and tuples stay as they were.\"\"\"
    {step}()

    def moved(value):
        if isinstance(value, {torch}.Tensor):
            return value.cpu()
        if isinstance(value, dict):
            copy = type(value)((key, moved(item)) for key, item in value.items())
            if hasattr(value, "_metadata"):
                copy._metadata = value._metadata
            return copy
        if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
            return type(value)(moved(item) for item in value)
        return value

    return moved(state)
"""


def _save_calls(tree: ast.AST, line: int) -> list[ast.Call]:
    """torch.save(obj, f, ...) calls that start on this line."""
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and node.lineno == line
            and isinstance(node.func, ast.Attribute) and node.func.attr == "save"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch" and node.args
            and not isinstance(node.args[0], ast.Starred)]


def answers(finding: Finding, context: Context) -> bool:
    """TS: torch.save raised (no storage on the host); PyTorch/XLA: it read the state one
    tensor at a time, a graph each."""
    crashed = finding.kind == "crash" and bool(finding.details.get("no_storage"))
    return (crashed or finding.kind == "one_by_one_reads") and finding.frame is not None


def propose(finding: Finding, context: Context) -> Proposal:
    frame = finding.frame
    source = context.source(frame.file) if frame is not None else None
    step = STEP_CALLS.get(context.run.info.names.get("mark_step", ""))
    if source is None or frame is None or step is None:
        return Proposal(finding, finding.fix)
    calls = _save_calls(source.tree, frame.line)
    state = calls[0].args[0] if len(calls) == 1 else None
    if state is None or state.lineno != state.end_lineno:
        return Proposal(finding, finding.fix)
    text = source.line(state.lineno)
    start, end = state.col_offset, state.end_col_offset or 0
    new = f"{text[:start]}{STATE_ON_CPU_NAME}({text[start:end]}){text[end:]}"
    step_name, step_imports = call_name(source, *step)
    torch, torch_imports = call_name(source, "torch.Tensor", "torch")
    defined = define_once(source, STATE_ON_CPU_NAME,
                          STATE_ON_CPU.format(step=step_name, torch=torch.rpartition(".")[0]))
    changes = (Change(source.path, state.lineno, state.lineno + 1, (new,)),
               *((*step_imports, *torch_imports, *defined) if defined else ()))
    return Proposal(finding, f"torch.save at {source.name}:{frame.line} saves {STATE_ON_CPU_NAME}(...): the state "
                             "on the CPU, after one sync (a lazy tensor has no storage on the host for torch.save "
                             "to write), defined once in the file; torch.load gives the same values", changes)
