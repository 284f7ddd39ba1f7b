"""The edits that fix a run's findings: each finding offered to the kinds of edit in
EDITS, in order, each a module of this package (`answers(finding, context)`,
`propose(finding, context)`), made from the user's source and its syntax tree. A finding
gets an edit only where the change is mechanical; otherwise its proposal says what to
change in words. Here: the registry, the proposals for a run (one edit made once), and
the changes applied and shown as a unified diff.

- sync_each_token.py: a graph grown over generate()'s decode loop, cut per token by a stopping criterion;
- mark_step.py: a missing mark_step() at the end of the loop that grows the graph;
- step_closure.py: a per-step `.item()`/`print` moved into a step closure;
- device_branch.py: `if tensor:` choosing a value, the choice made on the device;
- lowered_clip.py: clip_grad_norm_'s fallback, the same clipping from ops that lower;
- lowered_argmax.py: the user's own argmax/argmin falling back, the indices of max/min over the dimension;
- lowered_adam.py: Adam/AdamW's lerp_ fallback per parameter, the same update from ops that lower;
- lowered_rnn.py: nn.LSTM, nn.GRU, nn.RNN, which cannot run on TS (they unbind the sequence), as their cell over the time steps;
- eager_attention.py: transformers' scaled_dot_product_attention fallback, attn_implementation="eager";
- padding.py: per-batch padding given pad_to_multiple_of;
- drop_last.py: a last short batch, drop_last=True on the DataLoader;
- baked_values.py: a Python slice bound or index made data (index_select);
- split_pieces.py: a split/chunk/unbind whose fallback handed back host pieces, by narrow/select;
- cpu_state.py: torch.save of lazy tensors, the state moved to the CPU after one sync;
- lowered_attention.py: the user's own scaled_dot_product_attention falling back, from ops that lower;
- sharding_spec.py: an SPMD annotation that forces a gather, the partition spec that avoids it;
- host_tensor.py: a host-side library call (save_image) handed a lazy tensor, given x.detach().cpu();
- dense_layout.py: a sparse tensor sent to a lazy device (no sparse layout there), kept dense;
- slice_bounds.py: a slice bound past the dimension's start (PyTorch/XLA raises), clamped as eager does.
"""
from __future__ import annotations

from collections.abc import Callable

from lazyviz.analysis.findings import Finding
from lazyviz.analysis.run import Run
from lazyviz.fix import (
    baked_values,
    cpu_state,
    dense_layout,
    device_branch,
    drop_last,
    eager_attention,
    host_tensor,
    lowered_adam,
    lowered_argmax,
    lowered_attention,
    lowered_clip,
    lowered_rnn,
    mark_step,
    padding,
    sharding_spec,
    slice_bounds,
    split_pieces,
    step_closure,
    sync_each_token,
)
from lazyviz.fix.source import (
    STAND_INS,
    Change,
    Context,
    Proposal,
    Source,
    apply_changes,
    diff_texts,
    file_hash,
    overlap,
    read_source,
    read_texts,
    unified_diff,
)

__all__ = ["EDITS", "STAND_INS", "Change", "Proposal", "Source", "apply_changes", "diff_texts", "file_hash",
           "propose", "read_source", "read_texts", "unified_diff"]

# Every kind of edit, in the order a finding is offered to them: (does it answer this
# finding, the proposal). The first that answers makes the proposal; none: words.
EDITS: list[tuple[Callable[[Finding, Context], bool], Callable[[Finding, Context], Proposal]]] = [
    (sync_each_token.answers, sync_each_token.propose),
    (mark_step.answers, mark_step.propose),
    (step_closure.answers, step_closure.propose),
    (device_branch.answers, device_branch.propose),
    (lowered_clip.answers, lowered_clip.propose),
    (lowered_argmax.answers, lowered_argmax.propose),
    (lowered_adam.answers, lowered_adam.propose),
    (lowered_rnn.answers, lowered_rnn.propose),
    (eager_attention.answers, eager_attention.propose),
    (padding.answers, padding.propose),
    (drop_last.answers, drop_last.propose),
    (baked_values.answers, baked_values.propose),
    (split_pieces.answers, split_pieces.propose),
    (cpu_state.answers, cpu_state.propose),
    (lowered_attention.answers, lowered_attention.propose),
    (sharding_spec.answers, sharding_spec.propose),
    (host_tensor.answers, host_tensor.propose),
    (dense_layout.answers, dense_layout.propose),
    (slice_bounds.answers, slice_bounds.propose),
]


def _proposal(finding: Finding, context: Context) -> Proposal:
    for answers, proposal in EDITS:
        if answers(finding, context):
            return proposal(finding, context)
    return Proposal(finding, finding.fix)


def _already_made(change: Change, context: Context) -> bool:
    """Does the file already read as the change would make it: the lines to insert just
    above where they would go, or the lines to replace the same? Never the same edit twice."""
    source = context.source(change.file)
    if source is None:
        return False
    if change.start == change.end:
        above = source.lines[max(0, change.start - 1 - len(change.lines)):change.start - 1]
        return [line.rstrip() for line in above] == [line.rstrip() for line in change.lines]
    return source.lines[change.start - 1:change.end - 1] == list(change.lines)


def propose(run: Run, read: Callable[[str], Source | None] = read_source) -> list[Proposal]:
    """A proposal for each finding, in the findings' order. An edit that another finding's
    edit already makes is not made twice; one that overlaps it becomes words."""
    context = Context(run, read)
    proposals: list[Proposal] = []
    taken: dict[Change, int] = {}  # change -> the proposal that makes it
    for finding in run.findings:
        proposal = context.unless_stale(_proposal(finding, context))
        if proposal.changes and _already_made(proposal.changes[0], context):
            proposal = Proposal(finding, f"{finding.fix} (the code already has this edit, and the finding is still "
                                         "there: the diagnosis was wrong or the cause is elsewhere)", outlived=True)
        if proposal.changes:
            new = [c for c in proposal.changes if c not in taken]
            main = proposal.changes[0]  # the edit itself (the rest: imports, the `continue`s)
            if main in taken:
                proposal = Proposal(finding, proposal.summary, (), same_as=taken[main])
            elif any(overlap(c, t) for c in new for t in taken):
                proposal = Proposal(finding, f"{finding.fix} (the edit for an earlier finding changes the same lines)")
            else:
                taken.update(dict.fromkeys(new, len(proposals)))
                proposal = Proposal(finding, proposal.summary, tuple(new), proposal.alters_results)
        proposals.append(proposal)
    return proposals
