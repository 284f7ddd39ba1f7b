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

from lazyviz.analysis.findings import FailureDetails, Finding
from lazyviz.analysis.kinds import FindingKind
from lazyviz.fix.source import Change, Context, Proposal, Source, call_name, define_once

STATE_ON_CPU_NAME = "state_on_cpu"
STATE_ON_CPU = """\


def state_on_cpu(state, device="cpu"):
    \"\"\"`state` as torch.save can write it: a lazy tensor has no storage on the host. The
    pending work runs in one sync (where the state is on the lazy device), then every
    tensor moves to the CPU (or to `device`); dicts (with a state_dict's _metadata), lists
    and tuples stay as they were, and a whole module is copied with its parameters,
    buffers and tensor attributes (a cached mask) moved (the model itself stays where it is).\"\"\"
    import copy

    pending = [str(device) == "cpu"]  # one sync for the whole state, before its first {device} tensor moves

    def moved(value):
        if pending and isinstance(value, {torch}.Tensor) and value.device.type == "{device}":
            pending.clear()
            {step}()
        if isinstance(value, {torch}.nn.Parameter):
            return {torch}.nn.Parameter(value.detach().to(device), requires_grad=value.requires_grad)
        if isinstance(value, {torch}.Tensor):
            return value.to(device)
        if isinstance(value, {torch}.nn.Module):
            tensors = [t for m in value.modules() for t in (*m._parameters.values(), *m._buffers.values(),
                                                            *vars(m).values()) if isinstance(t, {torch}.Tensor)]
            return copy.deepcopy(value, {{id(t): moved(t) for t in tensors}})
        if isinstance(value, dict):
            copied = type(value)((key, moved(item)) for key, item in value.items())
            if hasattr(value, "_metadata"):
                copied._metadata = value._metadata
            return copied
        if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
            return type(value)(moved(item) for item in value)
        return value

    return moved(state)
"""


def _save_calls(tree: ast.AST) -> list[ast.Call]:
    """torch.save(obj, f, ...) calls, in source order."""
    found = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Attribute) and node.func.attr == "save"
             and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch" and node.args
             and not isinstance(node.args[0], ast.Starred)]
    return sorted(found, key=lambda call: (call.lineno, call.col_offset))


def _moved_to(tree: ast.AST, name: str) -> ast.expr | None:
    """The device a module named `name` was moved to where it was made: X of
    `name = Model(...).to(X)` (the program's own device, a variable or an argument)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            value = node.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "to" \
                    and len(value.args) == 1 and not value.keywords:
                return value.args[0]
    return None


def _loaded_back(source: Source, name: str) -> list[Change]:
    """`name = torch.load(...)` put back on the device the module was moved to, its tensor
    attributes too (Module.to moves only parameters and buffers): the file now holds a
    copy on the CPU, where the original's torch.save of a device module loaded back onto
    its device (word_language_model tests the model it loads)."""
    device = _moved_to(source.tree, name)
    if device is None:
        return []
    where = ast.get_source_segment(source.text, device)
    changes = []
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id == name and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "load" \
                and isinstance(node.value.func.value, ast.Name) and node.value.func.value.id == "torch" \
                and node.value.lineno == node.value.end_lineno and where and "\n" not in where:
            text, end = source.line(node.value.lineno), node.value.end_col_offset or 0
            start = node.value.col_offset
            changes.append(Change(source.path, node.value.lineno, node.value.lineno + 1,
                                  (f"{text[:start]}{STATE_ON_CPU_NAME}({text[start:end]}, {where}){text[end:]}",)))
    return changes


def _wrapped(state: ast.expr) -> bool:
    return isinstance(state, ast.Call) and isinstance(state.func, ast.Name) and state.func.id == STATE_ON_CPU_NAME


def answers(finding: Finding, context: Context) -> bool:
    """TS: torch.save raised (no storage on the host); PyTorch/XLA: it read the state one
    tensor at a time, a graph each."""
    crashed = finding.kind == FindingKind.CRASH and isinstance(finding.details, FailureDetails) and finding.details.no_storage
    return (crashed or finding.kind == FindingKind.ONE_BY_ONE_READS) and finding.frame is not None


def propose(finding: Finding, context: Context) -> Proposal:
    """Every torch.save of the file at once (dcgan saves netG and netD on two lines: one
    round, not two), each state handed through state_on_cpu."""
    frame = finding.frame
    source = context.source(frame.file) if frame is not None else None
    step = context.run.info.capabilities.step_call
    if source is None or frame is None:
        return Proposal(finding, finding.fix)
    calls = _save_calls(source.tree)
    here = [call for call in calls if call.lineno == frame.line]
    if len(here) != 1:
        return Proposal(finding, finding.fix)
    if _wrapped(here[0].args[0]):
        return Proposal(finding, f"torch.save at {source.at(frame.line)} already saves {STATE_ON_CPU_NAME}(...), "
                                 "and the finding is still there: what it saves holds a lazy tensor that helper does "
                                 "not reach", outlived=True)
    per_line: dict[int, list[ast.expr]] = {}
    for call in calls:
        per_line.setdefault(call.args[0].lineno, []).append(call.args[0])
    lines = []
    for line, states in sorted(per_line.items()):
        state = states[0]
        if len(states) == 1 and state.lineno == state.end_lineno and not _wrapped(state):
            text = source.line(line)
            start, end = state.col_offset, state.end_col_offset or 0
            lines.append(Change(source.path, line, line + 1,
                                (f"{text[:start]}{STATE_ON_CPU_NAME}({text[start:end]}){text[end:]}",)))
    if not any(change.start == here[0].args[0].lineno for change in lines):
        return Proposal(finding, finding.fix)
    step_name, step_imports = call_name(source, *step)
    torch, torch_imports = call_name(source, "torch.Tensor", "torch")
    defined = define_once(source, STATE_ON_CPU_NAME,
                          STATE_ON_CPU.format(step=step_name, torch=torch.rpartition(".")[0],
                                              device=context.run.info.device))
    main = next(change for change in lines if change.start == here[0].args[0].lineno)
    others = [change for change in lines if change is not main]
    # A whole module saved: where the file loads it back into the same name, back onto its device.
    saved = {state.id for call in calls if isinstance(state := call.args[0], ast.Name)}
    loads = [change for name in sorted(saved) for change in _loaded_back(source, name)]
    changes = (main, *others, *loads, *((*step_imports, *torch_imports, *defined) if defined else ()))
    where = ", ".join(f"{source.at(change.start)}" for change in sorted(lines, key=lambda c: c.start))
    loaded = (f"; the torch.load at {', '.join(source.at(c.start) for c in loads)} moves the module it loads back "
              "to the device the model was moved to") if loads else "; torch.load gives the same values"
    return Proposal(finding, f"torch.save at {where} saves {STATE_ON_CPU_NAME}(...): the state on the CPU, after "
                             "one sync (a lazy tensor has no storage on the host for torch.save to write; a whole "
                             "module is saved as a copy on the CPU, the model stays on the device), defined once "
                             f"in the file{loaded}", changes)
