"""SPMD: collectives the sharding layout did not ask for (an all-gather of a whole batch),
with the layout that avoids them."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from lazyviz.analysis.collectives import KINDS as COLLECTIVE_KINDS
from lazyviz.analysis.collectives import Advice, Collective, Moved, advice, per_step, run_collectives, whole_batch
from lazyviz.analysis.findings.base import Details, Finding, FindingKind, KindInfo, RunFacts
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.units import size_text
from lazyviz.trace.model import Annotation, Frame
from lazyviz.trace.table import ExecutionTable


@dataclass(frozen=True)
class MovedCollective:
    collective: Collective
    axes: tuple[str, ...]  # the mesh axes it runs along
    executions: int  # the executions that ran it

    def to_json(self) -> dict:
        return dict(self.collective.to_json(), axes=list(self.axes), executions=self.executions)


@dataclass(frozen=True, kw_only=True)
class CollectiveDetails(Details):
    collectives: tuple[MovedCollective, ...]
    sent_bytes_per_step: int | None = None  # what each device sends per step (a run with steps)
    sent_bytes: int | None = None  # in the whole run (without steps)
    annotation: Frame | None = None  # the annotation that disagrees, its spec, and the spec that agrees
    annotated_spec: tuple | None = None
    suggested_spec: tuple | None = None


def collective_findings(table: ExecutionTable, graphs: IRGraphs, annotations: Sequence[Annotation],
                        steps: int) -> list[Finding]:
    """Data moved between devices that the layout did not ask for (PyTorch/XLA SPMD): a
    gather or a reshuffle the partitioner added because an annotation disagrees with how
    an op uses the tensor. One finding per line of the op it serves; those without a line
    (autograd's backward) go with the finding of their graph."""
    if not graphs.has_hlo:
        return []
    at_line: dict[str, list[Moved]] = defaultdict(list)
    lineless: dict[str, list[Moved]] = defaultdict(list)  # by graph
    advised: dict[str, Advice] = {}
    batch_gathered: dict[str, tuple[int, int]] = {}
    for moved in run_collectives(table, graphs.hlo, annotations):
        collective = moved.collective
        if moved.expected:
            continue
        if not collective.line:
            lineless[moved.graph].append(moved)
            continue
        at_line[collective.location].append(moved)
        if collective.location not in advised:
            found = advice(graphs.hlo(moved.graph), collective, annotations)
            if found is not None:
                advised[collective.location] = found
        counted = whole_batch(graphs.hlo(moved.graph), collective, annotations)
        if counted is not None and collective.location not in batch_gathered:
            batch_gathered[collective.location] = counted
    for graph_id, moved in lineless.items():  # with the graph's line that moves the most, else on their own
        lines = [line for line, group in at_line.items() if any(m.graph == graph_id for m in group)]
        at_line[max(lines, key=lambda line: per_step(at_line[line], steps)) if lines else ""].extend(moved)
    return [_collective_finding(moved, advised.get(location), steps, table, batch_gathered.get(location))
            for location, moved in at_line.items()]


def _collective_finding(moved: list[Moved], found: Advice | None, steps: int, table: ExecutionTable,
                        batch: tuple[int, int] | None = None) -> Finding:
    kinds = sorted({m.collective.kind for m in moved}, key=COLLECTIVE_KINDS.index)
    named = [m for m in moved if m.collective.line]
    first = (named or moved)[0].collective
    distinct = list(dict.fromkeys((m.collective.kind, m.collective.shape, m.collective.line, _over(m)) for m in moved))
    shown = [f"{kind} {shape}{over}" for kind, shape, line, over in distinct if line][:3]
    backward = [f"{kind} {shape}{over}" for kind, shape, line, over in distinct if not line]
    per = "per step" if steps else "in the run"
    sent = size_text(per_step(moved, steps))
    message = (f"XLA moves data between devices here that the layout did not ask for: "
               f"{', '.join(shown) or ', '.join(backward[:3])}{f' for {first.op}' if named and first.op else ''}"
               + (f", and {len(backward)} more in the backward pass ({', '.join(backward[:3])})" if named and backward
                  else "")
               + f"; each device sends {sent} {per} for them.")
    if batch is not None:  # the batch itself gathered: the op could not stay split over it
        whole, of = batch
        message = (f"XLA gathers the whole batch ({first.shape}, its first dimension split over "
                   f"{_over(named[0] if named else moved[0]).removeprefix(' over ')}) for {first.op or 'this op'}: "
                   f"{whole} of the graph's {of} matmuls and convolutions over the batch run on the whole of it on "
                   f"every device, not on the device's share; each device sends {sent} {per} for the gather.")
        fix = _WHOLE_BATCH_FIX.get(first.op, _WHOLE_BATCH_FIX[""])
    elif found is not None:
        where = f"{found.annotation.frame.file.rsplit('/', 1)[-1]}:{found.annotation.frame.line}"
        message += (f" The annotation at {where} splits its tensor {_spec(found.annotation.spec)} on a dimension "
                    "the matmul keeps, so XLA gathers the other operand to use it.")
        fix = (f"annotate it {_spec(found.spec)} at {where}: split on the dimension the matmul sums over, and XLA "
               "adds partial products with one all-reduce instead of gathering")
    else:
        fix = ("by hand: make the annotations of this op's operands agree with how it uses them (a matmul's weight "
               "split on the dimension it sums over, its input split as the weight expects); `lazyviz diff` of the "
               "two runs shows the collectives gone")
    frame = Frame(first.file, first.line, "") if named else (found.annotation.frame if found else None)
    indices = table.indices(sorted({p for m in moved for p in m.positions}))
    sent_bytes = round(per_step(moved, steps))
    details = CollectiveDetails(
        collectives=tuple(MovedCollective(m.collective, m.axes, len(m.positions)) for m in moved),
        sent_bytes_per_step=sent_bytes if steps else None, sent_bytes=None if steps else sent_bytes,
        annotation=found.annotation.frame if found else None, annotated_spec=found.annotation.spec if found else None,
        suggested_spec=tuple(found.spec) if found else None)
    return Finding(FindingKind.UNASKED_COLLECTIVE, "warning", message, frame, indices, fix, details,
                   short=f"{' and '.join(kinds)} the layout did not ask for: {sent} {per}")


# What keeps a batch split through an op XLA's partitioner gathers it for (checked on
# torch_xla 2.9's CPU devices: tests/programs/xla_spmd_batchnorm.py).
_WHOLE_BATCH_FIX = {
    "aten::native_batch_norm": (
        "by hand: XLA's partitioner does not split batch norm over the batch here, and annotating its output "
        "back to the split does not stop the gather; batch statistics from reductions split with an all-reduce of "
        "the statistics instead: mean = x.mean((0, 2, 3), keepdim=True), var = x.var((0, 2, 3), unbiased=False, "
        "keepdim=True), then (x - mean) / torch.sqrt(var + eps) * weight + bias (the same loss, the gather gone)"),
    "": ("by hand: XLA's partitioner could not keep this op split over the batch; write it from ops it splits "
         "(elementwise ops, reductions and matmuls over the batch's dimension), and check with `lazyviz diff` of "
         "the two runs that the gather is gone"),
}


def _over(moved: Moved) -> str:
    """The mesh axes and devices a collective runs over, as the sentence says it: " over 'model' (4 devices)"."""
    devices = moved.collective.group_size
    axes = "+".join(f"'{axis}'" for axis in moved.axes)
    return f" over {axes} ({devices} devices)" if axes and devices else f" over {devices} devices" if devices else ""


def _spec(spec: Sequence) -> str:
    """A partition spec as the script writes it: ('model', None)."""
    return repr(tuple(tuple(e) if isinstance(e, list) else e for e in spec))


KINDS = (KindInfo(FindingKind.UNASKED_COLLECTIVE, "unasked collective", "sync", CollectiveDetails),)


def find(facts: RunFacts) -> list[Finding]:
    return collective_findings(facts.executions, facts.graphs, facts.run.annotations if facts.run else [],
                               facts.steps or (facts.run.optimizer_steps if facts.run else 0))
