"""Adam and AdamW falling back once per parameter on TS (their moments' lerp_): the same
update from ops that lower (mul_, add_, addcmul_, addcdiv_). The optimizer is made from a
subclass whose step() is that update, a function put once in the user's file wrapping
the class at each construction (`with_lowered_step(torch.optim.Adam)(params, ...)`): its
state is the optimizer's own (step, exp_avg, exp_avg_sq, max_exp_avg_sq), so a checkpoint
of optimizer.state_dict() saves and loads the same; its options come from each param
group (lr as a scheduler sets it, betas, eps, weight_decay, amsgrad, maximize); and
torch's step hooks still run (lazyviz counts optimizer steps by them)."""
from __future__ import annotations

import ast

from lazyviz.analysis.findings import FallbackDetails, Finding
from lazyviz.fix.source import STAND_INS, Change, Context, Proposal, Source, define_beside

LOWERED_ADAM_NAME = "with_lowered_step"
LOWERED_ADAM = """\


def with_lowered_step(optimizer_class):
    \"\"\"torch.optim.Adam or AdamW with its step() from ops that lower on the lazy device:
    torch's updates the moments with lerp_, which falls back there once per parameter.
    The same arithmetic as torch's single-tensor step, the same state, the same hooks.\"\"\"
    decoupled = issubclass(optimizer_class, {torch}.optim.AdamW)

    class Lowered(optimizer_class):
        @{torch}.no_grad()
        def step(self, closure=None):
            loss = None
            if closure is not None:
                with {torch}.enable_grad():
                    loss = closure()
            for group in self.param_groups:
                beta1, beta2 = group["betas"]
                lr, eps, weight_decay = group["lr"], group["eps"], group["weight_decay"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    grad = -p.grad if group.get("maximize") else p.grad
                    state = self.state[p]
                    if not state:
                        state["step"] = {torch}.tensor(0.0)
                        state["exp_avg"] = {torch}.zeros_like(p, memory_format={torch}.preserve_format)
                        state["exp_avg_sq"] = {torch}.zeros_like(p, memory_format={torch}.preserve_format)
                        if group["amsgrad"]:
                            state["max_exp_avg_sq"] = {torch}.zeros_like(p, memory_format={torch}.preserve_format)
                    state["step"] += 1
                    step = float(state["step"])
                    if weight_decay and decoupled:
                        p.mul_(1 - lr * weight_decay)
                    elif weight_decay:
                        grad = grad.add(p, alpha=weight_decay)
                    exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                    exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                    second = exp_avg_sq
                    if group["amsgrad"]:
                        # A new tensor, not copy_ into the old one: copy_ falls back on TS.
                        state["max_exp_avg_sq"] = {torch}.maximum(state["max_exp_avg_sq"], exp_avg_sq)
                        second = state["max_exp_avg_sq"]
                    denom = (second.sqrt() / (1 - beta2 ** step) ** 0.5).add_(eps)
                    p.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1 ** step))
            return loss

    Lowered.__name__ = Lowered.__qualname__ = f"{{optimizer_class.__name__}}Lowered"
    return Lowered
"""


# torch 2.13's AdamW inherits Adam's step(): a finding "in Adam.step()" is either's.
ADAMS = ("Adam", "AdamW")


def _constructions(source: Source) -> list[ast.Call]:
    """Calls that make the optimizer: `torch.optim.Adam(...)`, `optim.Adam(...)`, `Adam(...)`,
    their class named on one line (one made through with_lowered_step is not such a call)."""
    found = []
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Call) and node.func.lineno == node.func.end_lineno and \
                (node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")) in ADAMS:
            found.append(node)
    return sorted(found, key=lambda call: (call.lineno, call.col_offset))


def propose(finding: Finding, context: Context) -> Proposal:
    """Every construction of the optimizer class the finding names in the file of its line
    (a GAN's two Adams), else in the run's other files (minGPT makes its AdamW in the
    model's configure_optimizers, and steps it in trainer.py), made through
    with_lowered_step."""
    frame = finding.frame
    source = context.source(frame.file) if frame is not None else None
    name = "/".join(ADAMS)
    if source is None or frame is None:
        return Proposal(finding, finding.fix)
    others = [other for path in sorted(context.run.info.sources)
              if path != frame.file and (other := context.source(path)) is not None]
    made = [source] if _constructions(source) else [other for other in others if _constructions(other)]
    if not made and any(LOWERED_ADAM_NAME in each.text for each in [source, *others]):
        return Proposal(finding, f"every {name} of the run is made through {LOWERED_ADAM_NAME}() already, and "
                                 "lerp_ still falls back: another optimizer of that class is made elsewhere",
                        outlived=True)
    if not made:
        return Proposal(finding, f"{finding.fix} (no {name}(...) made in {source.name} or the run's other files "
                                 "to edit)")
    changes: list[Change] = []
    where: list[str] = []
    for each in made:
        constructions, support = _made_lowered(each)
        changes += [*constructions, *support]
        where += [each.at(change.start) for change in constructions]
    return Proposal(finding, f"the optimizer at {', '.join(where)} made through {LOWERED_ADAM_NAME}(): its step() "
                             "from ops that lower (the same update, options, state and hooks), defined in "
                             f"{STAND_INS} beside it and imported in one line: no lerp_ fallback, no sync per "
                             "parameter", tuple(changes))


def _made_lowered(source: Source) -> tuple[list[Change], list[Change]]:
    """The file's constructions made through with_lowered_step, and what defines it there once."""
    by_line: dict[int, list[ast.Call]] = {}
    for call in _constructions(source):
        by_line.setdefault(call.func.lineno, []).append(call)
    changes: list[Change] = []
    for line, here in sorted(by_line.items()):
        text = source.line(line)
        for call in sorted(here, key=lambda c: c.func.col_offset, reverse=True):
            start, end = call.func.col_offset, call.func.end_col_offset or 0
            text = f"{text[:start]}{LOWERED_ADAM_NAME}({text[start:end]}){text[end:]}"
        changes.append(Change(source.path, line, line + 1, (text,)))
    return changes, list(define_beside(source, LOWERED_ADAM_NAME, LOWERED_ADAM.format(torch="torch")))


def answers(finding: Finding, context: Context) -> bool:
    return isinstance(finding.details, FallbackDetails) and finding.details.op == "aten::lerp.Scalar" \
        and (finding.details.call or "").rpartition(".")[0] in ADAMS
