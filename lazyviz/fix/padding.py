"""Each batch padded to its own longest (a new sequence length, a new graph):
`pad_to_multiple_of=N` on the call that pads, N from the lengths the trace saw."""
from __future__ import annotations

import ast
import re
from collections.abc import Sequence

from lazyviz.analysis.findings import Finding, RecompileDetails
from lazyviz.analysis.kinds import FindingKind
from lazyviz.fix.drop_last import short_batch
from lazyviz.fix.source import Context, Proposal, Source, keyword_set

_SHAPE = re.compile(r"\[([\d,]+)\]")


def padded_lengths(changes: Sequence[str]) -> list[int]:
    """The lengths a per-batch padding produced, from a shape change's history ("%25
    Long[4,24] -> Long[4,30]"): the sizes of the one dimension, not the first (the batch),
    that differs between the two shapes of a change."""
    lengths: set[int] = set()
    for change in changes:
        shapes = [[int(d) for d in m.group(1).split(",")] for m in _SHAPE.finditer(change)]
        if len(shapes) != 2 or len(shapes[0]) != len(shapes[1]):
            continue
        differ = [d for d, (a, b) in enumerate(zip(*shapes)) if a != b]
        if len(differ) == 1 and differ[0] > 0:
            lengths.update({shapes[0][differ[0]], shapes[1][differ[0]]})
    return sorted(lengths)


def padding_multiple(lengths: Sequence[int]) -> tuple[int, int, float]:
    """(pad_to_multiple_of, the shapes it leaves of the lengths seen, the padding it adds
    over them as a share of their tokens): the smallest power of two from 8 that puts
    every length seen in one shape; a longer batch later gets the next multiple."""
    multiple = 8
    while multiple < max(lengths):
        multiple *= 2
    padded = [-(-length // multiple) * multiple for length in lengths]
    return multiple, len(set(padded)), (sum(padded) - sum(lengths)) / sum(lengths)


def _padding_calls(source: Source) -> list[ast.Call]:
    """Calls that pad each batch to its own longest: DataCollatorWithPadding (padding=True
    by default) and any call given padding=True or "longest" (a tokenizer's __call__,
    tokenizer.pad), without a pad_to_multiple_of already."""
    found = []
    for node in ast.walk(source.tree):
        if not isinstance(node, ast.Call) or any(k.arg == "pad_to_multiple_of" for k in node.keywords):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        padding = next((k.value for k in node.keywords if k.arg == "padding"), None)
        # `is True`: Conv2d(..., padding=1) pads by one, and 1 == True.
        per_batch = isinstance(padding, ast.Constant) and (padding.value is True or padding.value == "longest")
        if per_batch or (name == "DataCollatorWithPadding" and padding is None):
            found.append(node)
    return found


def propose(finding: Finding, context: Context) -> Proposal:
    """Each batch padded to its own longest: a new sequence length is a new graph. The
    padding call given pad_to_multiple_of, the multiple chosen from the lengths the
    trace saw: one shape for all of them."""
    steps = finding.details.history if isinstance(finding.details, RecompileDetails) else ()
    history = [change for step in steps for change in step.changes]
    lengths = padded_lengths(history)
    if len(lengths) < 2:
        return Proposal(finding, finding.fix)
    calls = [(source, call) for file in dict.fromkeys([*(f.file for f in context.stack(finding)),
                                                       *context.run.info.sources])
             if (source := context.source(file)) is not None for call in _padding_calls(source)]
    if not calls:  # a collate function of the user's, pad_sequence: in words
        return Proposal(finding, finding.fix)
    if len(calls) > 1:
        return Proposal(finding, f"{finding.fix} ({len(calls)} calls pad per batch: give the one the training "
                                 "batches come from pad_to_multiple_of)")
    source, call = calls[0]
    multiple, shapes, cost = padding_multiple(lengths)
    change = keyword_set(source, call, "pad_to_multiple_of", str(multiple))
    assert change is not None  # the call has no pad_to_multiple_of (_padding_calls): it is added
    shown = f"{len(lengths)} lengths seen ({lengths[0]} to {lengths[-1]})"
    return Proposal(finding, f"pad_to_multiple_of={multiple} on the padding at {source.at(call.lineno)}: the "
                             f"{shown} become {shapes} shape{'s' * (shapes != 1)}, so one graph serves them, for "
                             f"{cost:.0%} more tokens over those lengths",
                    (change,),
                    # Measured on tests/programs/bert_classifier.py without dropout: SGD's loss the
                    # same to the last digit, AdamW's 0.6962 -> 0.6950 after 12 steps.
                    alters_results="the padding is masked, but sums run over more elements (float rounding, which "
                                   "Adam's update magnifies) and dropout draws a number for every padded token too: "
                                   "losses differ a little")


# torch.nn.utils.clip_grad_norm_'s 2-norm from ops that lower on the lazy device: the
# same arithmetic (the norm of all gradients, scaled by max_norm / (norm + 1e-6) clamped
# to 1), without linalg_vector_norm, which falls back once per parameter on TorchScript.


def answers(finding: Finding, context: Context) -> bool:
    """A shape that changes at many steps, not a last short batch (drop_last's)."""
    return finding.kind == FindingKind.DYNAMIC_SHAPE and not short_batch(finding, context)
