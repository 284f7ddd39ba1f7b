"""The collectives XLA's SPMD partitioner put into a graph, and what asked for each.

A script on PyTorch/XLA SPMD annotates some tensors (xs.mark_sharding) and the
partitioner decides the rest: where an op uses a tensor split another way than its
annotation says, it moves data between devices every step. The HLO XLA compiled (after
its optimizations, as the trace keeps it) holds each collective, with the op and line
from its metadata:

    %all-gather = f32[64,256]{0,1} all-gather(%maximum_copy_fusion), replica_groups={{0,1,2,3}},
        dimensions={1}, metadata={op_type="aten__mm" source_file="mlp.py" source_line=37}

What the layout asks for is told apart from what it does not: a sum over a split
dimension (all-reduce, reduce-scatter: data-parallel gradients, a tensor-parallel
layer's partial sums) and, where weights are split over the batch's axes (FSDP), every
collective along those axes are designed; a gather or a reshuffle of anything else is
the partitioner working around an annotation that disagrees with how an op uses the
tensor, or an op it cannot keep split over the batch (whole_batch).
"""
from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from lazyviz.hlo_text import HloInstruction, split_instruction
from lazyviz.trace.model import Annotation
from lazyviz.trace.table import ExecutionTable

KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
          "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1, "s4": 1, "u4": 1}
_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([\d,]*)\]")
_GROUPS = re.compile(r"(?:replica_groups|source_target_pairs)=(\{[{}\d,\s]*\}|\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?)")
_DIMENSIONS = re.compile(r"\bdimensions=\{(\d+)\}")
_SHARDING = re.compile(r"sharding=(\{[^{}]*\})")
_TILES = re.compile(r"devices=\[([\d,]+)\]((?:\d+,)*\d+|<=\[[\d,]+\](?:T\([\d,]+\))?)")
_CONTRACTING = re.compile(r"(lhs|rhs)_contracting_dims=\{([\d,]*)\}")
_TRANSPOSE = re.compile(r"\bdimensions=\{([\d,]+)\}")
# Ops a gathered value passes through on its way to the matmul that uses it.
_PASS_ON = frozenset({"copy", "convert", "bitcast", "reshape"})


class Collective(NamedTuple):
    kind: str  # one of KINDS
    shape: str  # the result on each device: "f32[64,256]" (a tuple's arrays joined by ", ")
    bytes: int  # the result's bytes on each device
    sent: int  # the bytes each device sends for it, as a ring moves them
    groups: tuple[tuple[int, ...], ...]  # the devices that take part together; () all of them
    dimension: int | None  # the dimension gathered or scattered
    op: str  # the IR op it lowers, from its metadata ("aten::mm"), "" without
    file: str
    line: int  # 0 where its metadata names none (autograd's backward has no Python line)
    name: str  # the instruction's name in the module: "all-gather.1"

    @property
    def location(self) -> str:
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line}" if self.line else ""

    @property
    def group_size(self) -> int:
        return max((len(g) for g in self.groups), default=0)

    def to_json(self) -> dict:
        return {"kind": self.kind, "shape": self.shape, "bytes": self.bytes, "sent_bytes": self.sent,
                "groups": [list(g) for g in self.groups], "dimension": self.dimension, "op": self.op,
                "file": self.file, "line": self.line or None}


class Moved(NamedTuple):
    """A collective of one graph, as the run ran it."""

    collective: Collective
    graph: str
    positions: Sequence[int]  # the positions in the run's executions of its graph's runs
    expected: str  # why the layout asks for it ("a sum over a split dimension"), "" where nothing did
    axes: tuple[str, ...]  # the mesh axes it runs along, () where not known


def run_collectives(table: ExecutionTable, hlo: Callable[[str], str],
                    annotations: Sequence[Annotation]) -> list[Moved]:
    """Every collective of every graph the run ran, graph by graph in the order they first
    ran; [] where the script asked for no sharding (not SPMD): each graph's HLO is read
    from the trace, which a run of a thousand graphs should not pay for nothing."""
    if not annotations:
        return []
    devices = max(len(a.device_ids) for a in annotations)
    return [Moved(c, graph_id, positions, expectation(c, annotations), mesh_axes(c.groups, annotations))
            for graph_id, positions in table.group_by(lambda kind: kind.graph).items()
            for c in graph_collectives(hlo(graph_id), devices)]


def graph_rows(hlo: str, annotations: Sequence[Annotation]) -> list[Row]:
    """One graph's collectives as rows, the bytes each device sends for one run of it."""
    devices = max((len(a.device_ids) for a in annotations), default=0)
    return collective_rows((Moved(c, "", (0,), expectation(c, annotations), mesh_axes(c.groups, annotations))
                            for c in graph_collectives(hlo, devices)), 1)


def per_step(moved: Iterable[Moved], steps: int) -> float:
    """Bytes each device sends per step for these (per run, without steps)."""
    return sum(m.collective.sent * len(m.positions) for m in moved) / max(steps, 1)


class Row(NamedTuple):
    """One collective as a report lists it: alike ones of several graphs added up."""

    kind: str
    shape: str
    axes: tuple[str, ...]
    op: str
    location: str  # "mlp.py:37", "" in the backward pass
    expected: str  # why the layout asks for it; "" where nothing did
    sent_per_step: float  # bytes each device sends for it per step (per run, without steps)
    executions: int

    def describe(self) -> str:
        """"all-gather f32[64,256] over model at mlp.py:37 (aten::mm)"."""
        over = f" over {'+'.join(self.axes)}" if self.axes else ""
        where = f" at {self.location}" if self.location else " in the backward pass"
        return f"{self.kind} {self.shape}{over}{where}" + (f" ({self.op})" if self.op else "")


def collective_rows(moved: Iterable[Moved], steps: int) -> list[Row]:
    """The run's collectives, alike ones added up, the most bytes first."""
    rows: dict[tuple, list[Moved]] = {}
    for m in moved:
        c = m.collective
        rows.setdefault((c.kind, c.shape, m.axes, c.op, c.location, m.expected), []).append(m)
    return sorted((Row(*key, per_step(group, steps), sum(len(m.positions) for m in group))
                   for key, group in rows.items()), key=lambda row: -row.sent_per_step)


@functools.lru_cache(maxsize=256)  # a report, the UI and the findings all ask for one graph's
def graph_collectives(hlo: str, devices: int = 0) -> tuple[Collective, ...]:
    """Each collective of an HLO module, in the module's order; devices: how many take
    part where its groups say "all" (0: unknown)."""
    if not any(kind in hlo for kind in KINDS):
        return ()
    found = []
    for line in hlo.splitlines():
        if not any(kind in line for kind in KINDS):
            continue
        instruction = split_instruction(line)
        if instruction is None:
            continue
        kind = instruction.opcode.removesuffix("-start")
        if kind not in KINDS:
            continue  # "-done" halves, and lines that only name one
        found.append(_collective(instruction, kind, devices))
    return tuple(found)


def _collective(instruction: HloInstruction, kind: str, devices: int) -> Collective:
    arrays = _arrays(instruction.shape)
    if instruction.opcode.endswith("-start") and len(arrays) > 1:
        arrays = [max(arrays, key=lambda a: _size(*a))]  # (operand, result, ...) of an async pair
    size = sum(_size(*a) for a in arrays)
    attributes = ", ".join(instruction.attributes)
    groups = _groups(attributes)
    n = max((len(g) for g in groups), default=devices) or 1
    sent = {"all-gather": size * (n - 1) // n, "all-reduce": 2 * size * (n - 1) // n,
            "reduce-scatter": size * (n - 1), "all-to-all": size * (n - 1) // n}.get(kind, size)
    dimension = _DIMENSIONS.search(attributes)
    metadata = instruction.metadata
    op = metadata.get("op_type", "").replace("__", "::", 1)
    line = metadata.get("source_line", "")
    return Collective(kind, ", ".join(f"{t}[{','.join(map(str, d))}]" for t, d in arrays), size, sent, groups,
                      int(dimension.group(1)) if dimension else None, op, metadata.get("source_file", ""),
                      int(line) if line.isdigit() else 0, instruction.name)


def _arrays(shape: str) -> list[tuple[str, tuple[int, ...]]]:
    return [(dtype, tuple(int(d) for d in dims.split(",") if d)) for dtype, dims in _ARRAY.findall(shape)
            if dtype in _BYTES]


def _size(dtype: str, dims: tuple[int, ...]) -> int:
    return _BYTES.get(dtype, 4) * math.prod(dims)


def _groups(attributes: str) -> tuple[tuple[int, ...], ...]:
    found = _GROUPS.search(attributes)
    if found is None:
        return ()
    text = found.group(1)
    if text.startswith("["):  # iota form: [groups,size]<=[dims]T(perm)
        head, _, tail = text.partition("<=")
        shape = [int(n) for n in head.strip("[]").split(",")]
        devices = _iota(tail)
        return tuple(tuple(devices[i:i + shape[-1]]) for i in range(0, len(devices), shape[-1]))
    return tuple(tuple(int(n) for n in group.split(",") if n.strip())
                 for group in re.findall(r"\{([\d,\s]*)\}", text[1:-1]) if group.strip())


def _iota(text: str) -> list[int]:
    """XLA's iota device list, "[2,2]T(1,0)": 0..n-1 laid out in dims, transposed, flattened."""
    dims_text, _, perm_text = text.partition("T(")
    dims = [int(n) for n in dims_text.strip("[]").split(",")]
    perm = [int(n) for n in perm_text.rstrip(")").split(",")] if perm_text else list(range(len(dims)))
    strides = [math.prod(dims[i + 1:]) for i in range(len(dims))]
    return [sum(index[k] * strides[perm[k]] for k in range(len(perm)))
            for index in itertools.product(*(range(dims[p]) for p in perm))]


class Tiling(NamedTuple):
    """A sharding attribute: how many pieces each dimension is cut into, and on which devices."""

    tiles: tuple[int, ...]  # per tensor dimension (a last replicated dimension left out)
    devices: tuple[int, ...]

    @classmethod
    def parse(cls, text: str) -> Tiling | None:
        found = _TILES.search(text)
        if found is None:
            return None
        tiles = tuple(int(n) for n in found.group(1).split(","))
        devices = found.group(2)
        listed = tuple(_iota(devices[2:])) if devices.startswith("<=") else tuple(int(n) for n in devices.split(","))
        if "last_tile_dim_replicate" in text or "last_tile_dims" in text:
            tiles = tiles[:-1]
        return cls(tiles, listed)


# -- what the layout asked for ---------------------------------------------------------------
def mesh_axes(groups: Sequence[Sequence[int]], annotations: Sequence[Annotation]) -> tuple[str, ...]:
    """The mesh axes a collective's groups run along, by name; () where no annotated mesh
    forms these groups (or the groups are all devices of an unknown mesh)."""
    for annotation in annotations:
        shape, ids = annotation.mesh_shape, annotation.device_ids
        if math.prod(shape) != len(ids):
            continue
        wanted = {frozenset(g) for g in groups} if groups else {frozenset(ids)}
        for count in range(1, len(shape) + 1):
            for axes in itertools.combinations(range(len(shape)), count):
                if _groups_along(shape, ids, axes) == wanted:
                    return tuple(annotation.axis_names[a] for a in axes)
    return ()


def _groups_along(shape: tuple[int, ...], ids: tuple[int, ...], axes: tuple[int, ...]) -> set[frozenset[int]]:
    strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    groups: dict[tuple, set[int]] = {}
    for index in itertools.product(*(range(n) for n in shape)):
        key = tuple(index[d] for d in range(len(shape)) if d not in axes)
        groups.setdefault(key, set()).add(ids[sum(i * s for i, s in zip(index, strides))])
    return {frozenset(g) for g in groups.values()}


def batch_axes(annotations: Iterable[Annotation]) -> set[str]:
    """The mesh axes the script splits a batch over: those of the first dimension of any
    annotated tensor that is not a weight (or a loader's batches)."""
    return {axis for a in annotations if not a.parameter and a.spec for axis in a.axis_of(0)}


def expectation(collective: Collective, annotations: Sequence[Annotation]) -> str:
    """Why the layout asks for this collective, in a few words; "" where nothing did.
    Where weights are split over the batch's devices (FSDP: FSDPv2 annotates every
    parameter so), the partitioner gathers them where they are used and reshards what
    they make: every collective along those axes is the layout's."""
    axes = set(mesh_axes(collective.groups, annotations))
    over_batch = bool(axes) and axes <= batch_axes(annotations)
    if collective.kind in ("all-reduce", "reduce-scatter"):
        return "summed over the batch's devices (data parallel)" if over_batch \
            else "a sum over a split dimension (tensor parallel)"
    if over_batch and any(a.parameter and set(a.axis_of(d)) & axes for a in annotations for d in range(len(a.shape))):
        return "FSDP: weights split over the batch's devices, gathered where used"
    return ""


def whole_batch(hlo: str, collective: Collective, annotations: Sequence[Annotation]) -> tuple[int, int] | None:
    """Where a gather collects the batch itself (its first dimension, over the batch's
    axes: the partitioner could not keep an op split over the batch): how many of the
    module's matmuls and convolutions then run on the whole batch on every device, of
    those that run on the whole batch or on a device's share. None for other gathers."""
    axes = set(mesh_axes(collective.groups, annotations))
    arrays = _arrays(collective.shape)
    if collective.kind != "all-gather" or collective.dimension != 0 or not axes \
            or not axes <= batch_axes(annotations) or len(arrays) != 1 or not arrays[0][1]:
        return None
    whole = arrays[0][1][0]
    share = whole // max(collective.group_size, 1)
    leading = [_arrays(i.shape)[0][1][0] for i in _instructions(hlo).values()
               if i.opcode in ("dot", "convolution") and _arrays(i.shape) and _arrays(i.shape)[0][1]]
    return sum(n == whole for n in leading), sum(n in (whole, share) for n in leading)


# -- an annotation that avoids it ------------------------------------------------------------
class Advice(NamedTuple):
    annotation: Annotation  # the annotation that disagrees with the op's use
    spec: tuple  # the one that agrees: the axis moved to the dimension the op sums over


def advice(hlo: str, collective: Collective, annotations: Sequence[Annotation]) -> Advice | None:
    """Where a gather feeds a matmul whose other operand is an annotated weight split on a
    dimension the matmul keeps: that weight split on the dimension it sums over instead,
    so XLA sums partial products (one all-reduce) rather than gathering. None where the
    module does not show it plainly."""
    if collective.kind != "all-gather":
        return None
    entry = _instructions(hlo)
    dot = _user_dot(entry, collective.name)
    if dot is None:
        return None
    operands = re.findall(r"%([\w.\-]+)", dot.operands)
    contracting = {side: [int(n) for n in dims.split(",") if n] for side, dims in
                   _CONTRACTING.findall(", ".join(dot.attributes))}
    for side, operand in zip(("lhs", "rhs"), operands):
        traced = _parameter_of(entry, operand)
        if traced is None:
            continue
        parameter, order = traced
        annotation = _annotation_of(parameter, annotations)
        if annotation is None or not annotation.parameter:
            continue
        summed = [order[d] for d in contracting.get(side, []) if d < len(order)]
        split = [d for d in range(len(annotation.spec)) if annotation.spec[d] is not None]
        if len(split) != 1 or len(summed) != 1 or split[0] == summed[0] or annotation.spec[summed[0]] is not None:
            continue
        spec = list(annotation.spec)
        spec[summed[0]], spec[split[0]] = spec[split[0]], None
        return Advice(annotation, tuple(spec))
    return None


def _instructions(hlo: str) -> dict[str, HloInstruction]:
    """The entry computation's instructions by name (collectives live there on CPU)."""
    start = hlo.find("\nENTRY ")
    found: dict[str, HloInstruction] = {}
    for line in hlo[start:].splitlines()[1:] if start >= 0 else ():
        if line.startswith("}"):
            break
        instruction = split_instruction(line)
        if instruction is not None:
            found[instruction.name] = instruction
    return found


def _user_dot(entry: dict[str, HloInstruction], name: str, depth: int = 4) -> HloInstruction | None:
    """The dot that uses an instruction's value, through copies and reshapes."""
    users = [i for i in entry.values() if re.search(rf"%{re.escape(name)}\b(?![.\-\w])", i.operands)]
    for user in users:
        if user.opcode in ("dot", "convolution"):
            return user
    for user in users:
        if depth and user.opcode in _PASS_ON:
            found = _user_dot(entry, user.name, depth - 1)
            if found is not None:
                return found
    return None


def _parameter_of(entry: dict[str, HloInstruction], name: str, depth: int = 4) -> tuple[HloInstruction, list[int]] | None:
    """The parameter an operand is, through copies and transposes, with the parameter's
    dimension behind each of the operand's."""
    instruction = entry.get(name)
    if instruction is None:
        return None
    if instruction.opcode == "parameter":
        return instruction, list(range(len(_arrays(instruction.shape)[0][1]) if _arrays(instruction.shape) else 0))
    operand = re.findall(r"%([\w.\-]+)", instruction.operands)
    if not depth or len(operand) != 1:
        return None
    if instruction.opcode == "transpose":
        permutation = _TRANSPOSE.search(", ".join(instruction.attributes))
        traced = _parameter_of(entry, operand[0], depth - 1)
        if traced is None or permutation is None:
            return None
        order = traced[1]
        return traced[0], [order[int(p)] for p in permutation.group(1).split(",")]
    if instruction.opcode in ("copy", "convert") or (instruction.opcode in ("bitcast", "reshape") and _same_dims(
            entry, instruction, operand[0])):
        return _parameter_of(entry, operand[0], depth - 1)
    return None


def _same_dims(entry: dict[str, HloInstruction], instruction: HloInstruction, operand: str) -> bool:
    source = entry.get(operand)
    return source is not None and [d for _, d in _arrays(source.shape)] == [d for _, d in _arrays(instruction.shape)]


def _annotation_of(parameter: HloInstruction, annotations: Sequence[Annotation]) -> Annotation | None:
    """The annotation a partitioned parameter came from: the same whole shape and tiling.
    None where none, or several alike, fit."""
    sharding = _SHARDING.search(", ".join(parameter.attributes))
    tiling = Tiling.parse(sharding.group(1)) if sharding else None
    arrays = _arrays(parameter.shape)
    if tiling is None or len(arrays) != 1 or len(tiling.tiles) != len(arrays[0][1]):
        return None
    whole = tuple(d * t for d, t in zip(arrays[0][1], tiling.tiles))
    fitting = {a for a in annotations if a.shape == whole and Tiling.parse(a.sharding) == tiling}
    return next(iter(fitting)) if len(fitting) == 1 else None
