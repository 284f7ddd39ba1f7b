"""A graph that grows over Hugging Face generate()'s decode loop (transformers'
generation/utils.py, _sample): the loop is the library's, so no mark_step() of the user's
can go at its end. generate() asks each stopping criterion once per new token; one that
calls the backend's step call there and stops nothing cuts the graph per token. The
edit defines that criterion once in the user's file and passes it to the call."""
from __future__ import annotations

import ast

from lazyviz.analysis.findings import Finding, GrowingGraph, RepeatedBlock
from lazyviz.fix.source import Change, Context, Proposal, Source, call_name, calls_named, define_once

GENERATE_LOOPS = "transformers/generation/utils.py"
CRITERION = "SyncEachToken"
CRITERION_CLASS = """\


class SyncEachToken({stopping_criteria}):
    \"\"\"Once per new token, as generate() asks its stopping criteria: runs the token's
    lazy graph ({step}()), so it does not grow over the whole decode. Stops nothing.\"\"\"

    def __call__(self, input_ids, scores, **kwargs):
        if input_ids.device.type == "{device}":
            {step}()
        return {torch}.zeros(input_ids.shape[0], dtype={torch}.bool, device=input_ids.device)
"""


def answers(finding: Finding, context: Context) -> bool:
    loop = finding.details.library_loop if isinstance(finding.details, (GrowingGraph, RepeatedBlock)) else None
    return loop is not None and loop.path == GENERATE_LOOPS


def propose(finding: Finding, context: Context) -> Proposal:
    frame = finding.frame
    source = context.source(frame.file) if frame is not None else None
    step_call = context.run.info.capabilities.step_call
    if source is None or frame is None:
        return Proposal(finding, finding.fix)
    calls = calls_named(source, frame.line, "generate")
    if len(calls) != 1:
        return Proposal(finding, f"{finding.fix} (no single generate() call at {source.at(frame.line)} to edit)")
    call = calls[0]
    given = next((k for k in call.keywords if k.arg == "stopping_criteria"), None)
    if given is not None:
        if CRITERION in ast.unparse(given.value):
            return Proposal(finding, f"generate() at {source.at(frame.line)} is given {CRITERION} already, and the "
                                     "graph still grows: the growth is elsewhere (read the repeated block's lines)",
                            outlived=True)
        return Proposal(finding, f"{finding.fix} (the call has stopping criteria of its own: add {CRITERION}() to "
                                 "them by hand)")
    if any(k.arg is None for k in call.keywords):
        return Proposal(finding, f"{finding.fix} (the call passes **kwargs, which may hold stopping_criteria: add "
                                 "it by hand)")
    step, step_imports = call_name(source, *step_call)
    criteria, criteria_imports = call_name(source, "transformers.StoppingCriteria", "transformers")
    listed, _ = call_name(source, "transformers.StoppingCriteriaList", "transformers")
    torch, torch_imports = call_name(source, "torch.zeros", "torch")
    changes = [_argument(source, call, f"stopping_criteria={listed}([{CRITERION}()])")]
    text = CRITERION_CLASS.format(stopping_criteria=criteria, step=step, torch=torch.rpartition(".")[0],
                                  device=context.run.info.device)
    defined = define_once(source, CRITERION, text)
    changes += [*step_imports, *criteria_imports, *torch_imports, *defined]
    return Proposal(finding, f"pass generate() at {source.at(frame.line)} a stopping criterion that calls {step}() "
                             f"once per new token and stops nothing ({CRITERION}, defined once in the file): each "
                             "token runs its own small graph instead of the whole decode so far", tuple(changes))


def _argument(source: Source, call: ast.Call, argument: str) -> Change:
    """`argument` added last to the call: right after its last argument, whatever the layout."""
    given = [*call.args, *call.keywords]
    if not given:  # right after the opening parenthesis
        line, column = call.func.end_lineno or call.lineno, (call.func.end_col_offset or 0) + 1
    else:
        last = max(given, key=lambda node: (node.end_lineno or 0, node.end_col_offset or 0))
        line, column, argument = last.end_lineno or last.lineno, last.end_col_offset or 0, f", {argument}"
    text = source.line(line)
    return Change(source.path, line, line + 1, (f"{text[:column]}{argument}{text[column:]}",))
