"""A parser from torch's lazy IR text (`DumpUtil::ToText`) to a graph model.

    IR {
      %8 = [Float[128,64]] aten::view_copy(%7), size=128 64, NodeType=...
      %66 = [Float[8,16,64], Float[8,16,1]] aten::native_layer_norm(%65, %24), num_outputs=3, ...
      %70 = [Float[8,16,64]] aten::add(%66.0, %69), ROOT=1, NodeType=...
    }

and PyTorch/XLA's dialect of it, with XLA_IR_DEBUG=1 source locations:

      %13 = f32[16,1]{1,0} aten::sub(%12, %2, %1), scope=aten::sub.1, location=main@train.py:29, xla_shape=f32[16,1]{1,0}

and the same dialect lazyviz writes from an XLA graph's HLO (lazyviz.hlo_text.hlo_as_ir),
one node per HLO instruction, its location without a function:

      %5 = f32[4,16]{1,0} aten::addmm(%2, %4), lhs_contracting_dims={1}, hlo=dot, location=train.py:7
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import NamedTuple

INPUT_OPS = frozenset({"lazy_tensors::device_data", "prim::Constant", "xla::device_data"})

# Output types: "[Float[2], Long[2]]" (TS), "f32[16,1]{1,0}" or "(f32[2]{0}, s64[2]{0})" (XLA).
_NODE = re.compile(
    r"^\s*(%\d+) = (\[.*?\]|\(.*?\)|\w+\[[^\]]*\](?:\{[^}]*\})?) ([\w:.]+)\((.*?)\)(?:, (.*))?\s*$"
)
_TENSOR = re.compile(r"([\w]+)\[([^\]]*)\]")
_OPERAND = re.compile(r"^%\d+(\.\d+)?$")
# Attributes are "name=value" joined by ", ", but values may hold spaces ("size=128 64").
_ATTR_SPLIT = re.compile(r", (?=[A-Za-z_][\w.]*=)")
# Debug attributes that say where or how a node was built, not what it computes.
_DEBUG_ATTRS = frozenset({"NodeType", "xla_shape", "scope"})


class IRParseError(ValueError):
    """The text is not IR as torch prints it; says which line and why."""


class TensorType(NamedTuple):
    dtype: str
    shape: tuple[str, ...]  # strings: a dynamic size may print as "?" or a symbol

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(self.shape)}]"


class Node(NamedTuple):
    """One IR node. A tuple: a run's graphs hold hundreds of thousands of them, made in
    microseconds, and equal lines at equal places share one (nothing may change it)."""

    id: str  # "%13"
    op: str  # "aten::addmm"
    outputs: tuple[TensorType, ...]
    operands: tuple[str, ...]  # "%12", or "%22.1" for output 1 of a multi-output node
    attrs: dict[str, str]  # without NodeType and ROOT
    root: int | None  # the ROOT=N mark: this node is the graph's output N
    line: int
    location: str  # "fn@file.py:12" where the backend records it (XLA_IR_DEBUG=1)
    # Worked out once per distinct line, for the diff and the structure hash:
    is_input: bool  # device data or a constant: no operands, fed from outside the graph
    operand_ids: tuple[str, ...]  # the nodes its operands come from: "%22" for "%22.1"
    form: tuple  # its attribute names and which output of each operand it reads

    @property
    def source_line(self) -> str:
        return source_line(self.location)

    @property
    def type_text(self) -> str:
        return _type_text(self.outputs)

    def operand_node(self, operand: str) -> str:
        return operand.split(".", 1)[0]


@lru_cache(maxsize=4096)
def _type_text(outputs: tuple[TensorType, ...]) -> str:
    return ", ".join(map(str, outputs))


@dataclass(frozen=True)
class IRGraph:
    nodes: tuple[Node, ...]  # in topological order, as printed

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_id", {node.id: node for node in self.nodes})

    by_id: dict[str, Node] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.nodes)

    @cached_property
    def structure_keys(self) -> dict[str, int]:
        """A hash per node of its op and its operands' structure: same key, same
        computation up to shapes and attribute values. Kept with the graph: a diff asks
        for it once per graph, not once per pair."""
        keys: dict[str, int] = {}
        for node in self.nodes:
            keys[node.id] = hash((node.op, node.form, tuple(map(keys.__getitem__, node.operand_ids))))
        return keys

    @cached_property
    def structure(self) -> tuple[int, ...]:
        """The structure keys in node order: equal tuples, node-for-node the same computation."""
        return tuple(self.structure_keys.values())

    @cached_property
    def ids(self) -> tuple[str, ...]:
        return tuple(node.id for node in self.nodes)

    @cached_property
    def ops(self) -> tuple[str, ...]:
        """The ops that are not inputs, in order."""
        return tuple(node.op for node in self.nodes if not node.is_input)

    @cached_property
    def op_counts(self) -> Counter[str]:
        """Every node's op, inputs too, and how many nodes have it."""
        return Counter(node.op for node in self.nodes)

    @cached_property
    def built_at(self) -> Counter[str]:
        """The lines that built its ops ("train.py:28") and how many, where the IR says."""
        return Counter(node.source_line for node in self.nodes if node.location and not node.is_input)

    @cached_property
    def inputs(self) -> tuple[Node, ...]:
        """Its device data and constants, in order."""
        return tuple(node for node in self.nodes if node.is_input)

    @cached_property
    def buffer_groups(self) -> dict[str, frozenset[str]]:
        """Input id -> the inputs sharing its buffer (itself included), from the hook's
        `alias=%j` marks (the later users of a buffer point at its first); {} where no
        input shares one."""
        groups: dict[str, set[str]] = {}
        for node in self.inputs:
            if "alias" in node.attrs:
                groups.setdefault(node.attrs["alias"], {node.attrs["alias"]}).add(node.id)
        return {member: frozenset(group) for group in groups.values() for member in group}

    def users(self) -> dict[str, list[str]]:
        users: dict[str, list[str]] = {node.id: [] for node in self.nodes}
        for node in self.nodes:
            for operand in node.operands:
                users.setdefault(node.operand_node(operand), []).append(node.id)
        return users


def source_line(location: str) -> str:
    """"train.py:29" from a node's "main@train.py:29"; "" where the backend records none."""
    return location.rpartition("@")[2]


def parse_location(location: str) -> tuple[str, str, int] | None:
    """(function, file, line) from a node's "main@train.py:29"; None where it is not one.
    The one reader of that form (LTC's and XLA's IR both write it)."""
    function, _, where = location.rpartition("@")
    file, _, line = where.rpartition(":")
    return (function, file, int(line)) if file and line.isdigit() else None


def parse_ir(text: str) -> IRGraph:
    """Parse IR text; blank and brace lines are skipped, anything else must be a node.
    A run's graphs are parsed once each, by lazyviz.analysis.graphs.IRGraphs: ask it."""
    nodes: list[Node] = []
    seen: set[str] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line in ("IR {", "}", "{") or line.startswith("##"):
            continue
        node = _parse_line(line, number)
        if isinstance(node, str):
            raise IRParseError(f"line {number}: {node}")
        if not seen.issuperset(node.operand_ids):
            operand = next(o for o in node.operands if o.split(".", 1)[0] not in seen)
            raise IRParseError(f"line {number}: {operand} is used before it is defined")
        if node.id in seen:
            raise IRParseError(f"line {number}: {node.id} is defined twice")
        seen.add(node.id)
        nodes.append(node)
    return IRGraph(tuple(nodes))


@lru_cache(maxsize=65536)
def _parse_line(line: str, number: int) -> Node | str:
    """One node line as a Node, or what is wrong with it. Cached: the graphs of one run
    repeat most of their lines at the same places (a recompile changes a few), so a
    run's hundreds of graphs parse in little more than the time of their distinct lines,
    and share their nodes."""
    match = _NODE.match(line)
    if match is None:
        return f"not an IR node: {_clip(line)}"
    node_id, types, op, operand_text, attr_text = match.groups()
    outputs = _types(types[1:-1] if types[0] in "[(" else types)
    if outputs is None:
        return f"cannot read output types [{_clip(types)}]"
    rest = _operands_and_attrs(operand_text, attr_text)
    if isinstance(rest, str):
        return rest
    operands, attrs, root, location, operand_ids, form = rest
    is_input = op in INPUT_OPS or (not operands and "device_data" in op)
    return Node(node_id, op, outputs, operands, attrs, root, number, location, is_input, operand_ids, form)


@lru_cache(maxsize=4096)
def _types(types: str) -> tuple[TensorType, ...] | None:
    """"Float[16,64], Float[16]" as TensorTypes; None when there are none to read. A
    graph's nodes share a few types (a shape change rewrites them all alike)."""
    outputs = tuple(TensorType(dtype, tuple(filter(None, map(str.strip, dims.split(",")))))
                    for dtype, dims in _TENSOR.findall(types))
    return None if types.strip() and not outputs else outputs


def _operands_and_attrs(operand_text: str, attr_text: str | None) -> tuple | str:
    """(operands, attrs, root, location, operand_ids, form) of a node line (see Node), or
    what is wrong with them. The same at the same node of every graph that differs only
    in shapes; each half is also read once for all the lines that share it."""
    operands = _operands(operand_text)
    if isinstance(operands, str):
        return operands
    attrs = _attrs(attr_text) if attr_text else _NO_ATTRS
    if isinstance(attrs, str):
        return attrs
    (operands, operand_ids, outputs_read), (attrs, root, location, names) = operands, attrs
    return operands, attrs, root, location, operand_ids, (names, outputs_read)


@lru_cache(maxsize=65536)
def _operands(operand_text: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]] | str:
    """(operands, the nodes they come from, which output of each) or what is wrong."""
    operands = tuple(o.strip() for o in operand_text.split(",") if o.strip())
    for operand in operands:
        if not _OPERAND.match(operand):
            return f"bad operand {_clip(operand)!r}"
    return operands, tuple(o.split(".", 1)[0] for o in operands), tuple(o.partition(".")[2] for o in operands)


@lru_cache(maxsize=65536)
def _attrs(attr_text: str) -> tuple[dict[str, str], int | None, str, tuple[str, ...]] | str:
    """(attributes without the debug ones, ROOT, location, the attribute names sorted) or what is wrong."""
    attrs: dict[str, str] = {}
    root, location = None, ""
    for item in _ATTR_SPLIT.split(attr_text):
        name, sep, value = item.partition("=")
        if not sep:
            return f"bad attribute {_clip(item)!r}"
        if name == "ROOT":
            root = int(value) if value.strip().lstrip("-").isdigit() else None
        elif name == "location":
            location = value
        elif name not in _DEBUG_ATTRS:
            attrs[name] = value
    return attrs, root, location, tuple(sorted(attrs))


_NO_ATTRS: tuple[dict[str, str], None, str, tuple[str, ...]] = ({}, None, "", ())


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
