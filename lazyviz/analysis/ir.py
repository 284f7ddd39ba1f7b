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

import functools
import itertools
import operator
import re
from array import array
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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
    operands: tuple[str, ...]  # "%12", or "%22.1" for output 1 of a multi-output node
    attrs: dict[str, str]  # without NodeType and ROOT
    root: int | None  # the ROOT=N mark: this node is the graph's output N
    location: str  # "fn@file.py:12" where the backend records it (XLA_IR_DEBUG=1)
    # Worked out once per distinct line, for the diff and the structure hash:
    is_input: bool  # device data or a constant: no operands, fed from outside the graph
    operand_ids: tuple[str, ...]  # the nodes its operands come from: "%22" for "%22.1"
    form: tuple  # its attribute names and which output of each operand it reads
    key: int  # a hash of its id, op, form and operand ids: graphs with equal keys node for node
    # compute the same, up to shapes and attribute values
    number: int  # the N of its id %N
    feeds_forward: bool  # every operand is a node numbered before it
    # Small numbers, one per distinct value in the process, that a diff compares a whole
    # graph of at once (IRGraph.columns): its attribute values as a diff compares them
    # (attrs without the alias mark), which Node this is (two nodes are one exactly when
    # these are equal), its output types as printed.
    attrs_id: int
    # The fields above are the same for the lines that differ only in output types (a new
    # batch size rewrites every line): read once for them all (_parse_line).
    outputs: tuple[TensorType, ...]
    line: int
    serial: int
    types_id: int

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

    @cached_property
    def by_id(self) -> dict[str, Node]:
        return dict(zip(map(_ID, self.nodes), self.nodes))

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
        """Each node's op, form and operand ids (Node.key) in node order: equal tuples,
        node for node the same computation, nodes numbered alike (a diff aligns them by
        position). Read per line, not per graph: a run's thousand graphs ask it."""
        return tuple(map(_KEY, self.nodes))

    @cached_property
    def of_structure(self) -> dict[str, object]:
        """What is worked out about this graph's structure (a diff's downstream nodes), one
        dict for every graph of the structure: a run's graphs at each new batch length share it."""
        if len(_STRUCTURES) >= _KEPT_STRUCTURES:
            _STRUCTURES.clear()
        return _STRUCTURES.setdefault(self.structure, {})

    @cached_property
    def ids(self) -> tuple[str, ...]:
        return tuple(map(_ID, self.nodes))

    @cached_property
    def columns(self) -> tuple[int, int, int]:
        """Node.serial, .types_id and .attrs_id of every node, each as one int of 4 bytes a
        node in node order: where the XOR of two graphs' is not 0, their nodes differ."""
        return tuple(int.from_bytes(array("I", map(field, self.nodes)).tobytes(), "little")
                     for field in (_SERIAL, _TYPES_ID, _ATTRS_ID))

    @cached_property
    def input_bits(self) -> int:
        """Which nodes are inputs without operands, as bits by position (bit i: node i):
        the same for every graph of the structure, worked out once for them."""
        known = self.of_structure.get("input_bits")
        if known is None:
            flags = bytes(node.is_input and not node.operands for node in self.nodes)
            known = self.of_structure["input_bits"] = bits(flags)
        return known  # type: ignore[return-value]

    @cached_property
    def ops(self) -> tuple[str, ...]:
        """The ops that are not inputs, in order."""
        return tuple(node.op for node in self.nodes if not node.is_input)

    @cached_property
    def op_counts(self) -> Counter[str]:
        """Every node's op, inputs too, and how many nodes have it: one Counter for every
        graph of the structure (a BERT fine-tune's 1,099 graphs have 182). Not to be changed."""
        known = self.of_structure.get("op_counts")
        if known is None:
            known = self.of_structure["op_counts"] = Counter(map(_OP, self.nodes))
        return known  # type: ignore[return-value]

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
        for node_id, alias in self.alias_marks:
            groups.setdefault(alias, {alias}).add(node_id)
        return {member: frozenset(group) for group in groups.values() for member in group}

    @cached_property
    def alias_marks(self) -> tuple[tuple[str, str], ...]:
        """(input id, the input whose buffer it shares) for each `alias=%j` mark, in order:
        equal marks, equal buffer_groups (and quicker to compare)."""
        return tuple((node.id, node.attrs["alias"]) for node in self.inputs if "alias" in node.attrs)

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
    lines = text.splitlines()
    # Most lines were met before at the same place (a recompile changes a few of them):
    # one lookup each, in C. A line met for the first time is read, then kept.
    keys = list(zip(lines, itertools.count(1)))
    return _graph_of(list(map(_KNOWN_LINES.get, keys)), keys, _KNOWN_LINES, lines.__getitem__)


def parse_ir_lines(ids: Sequence[int], lines: Sequence[str], known: dict[int, Node | object]) -> IRGraph:
    """parse_ir for a text stored as the ids of its lines (lines: id -> line, each at one
    place in every graph that has it; lazyviz.trace.model.GraphTexts). known: id -> its
    node, kept by the caller for every graph of the trace: a line is read once."""
    return _graph_of(list(map(known.get, ids)), ids, known, lambda at: lines[ids[at]])


def _graph_of(found: list, keys: Sequence, known: dict, raw: Callable[[int], str]) -> IRGraph:
    """The graph from each line's node as known (None: not met before: its text, raw(its
    position), is read now and kept in known under its key)."""
    if None in found:
        if len(known) >= _KEPT_LINES:
            known.clear()
        # The lines not met before, found in C (a node is a non-empty tuple, _SKIPPED an object).
        for at in list(itertools.compress(itertools.count(), map(operator.not_, found))):
            line = raw(at).strip()
            if not line or line in _NOT_NODES or line.startswith("##"):
                node = _SKIPPED
            else:
                node = _parse_line(line, at + 1)
                if isinstance(node, str):
                    raise IRParseError(f"line {at + 1}: {node}")
            found[at] = known[keys[at]] = node
    nodes = tuple(filter(_IS_NODE, found))
    # LTC and XLA number nodes %0, %1, ... in the order they print them, each operand
    # before its user: then nothing is used before it is defined, nor defined twice.
    if not all(map(_FEEDS_FORWARD, nodes)) or tuple(map(_NUMBER, nodes)) != _numbers(len(nodes)):
        _check_order(nodes)
    return IRGraph(nodes)


_STRUCTURES: dict[tuple[int, ...], dict[str, object]] = {}  # IRGraph.of_structure's
_KEPT_STRUCTURES = 1024
_SKIPPED = object()  # a line that is no node: blank, a brace, a comment
_IS_NODE = functools.partial(operator.is_not, _SKIPPED)  # in C, for a graph's 300,000 lines
_NOT_NODES = frozenset({"IR {", "}", "{"})
_KNOWN_LINES: dict[tuple[str, int], Node | object] = {}  # (line, number) -> its node, for every run read
_KEPT_LINES = 150_000  # past this many, the kept lines are let go (a long session reading many traces)
_KEY, _NUMBER, _FEEDS_FORWARD, _ID, _OP, _SERIAL, _TYPES_ID, _ATTRS_ID = (operator.attrgetter(name) for name in (
    "key", "number", "feeds_forward", "id", "op", "serial", "types_id", "attrs_id"))
_TO_DIGITS = bytes.maketrans(b"\x00\x01", b"01")


def bits(flags: bytes) -> int:
    """One flag (0 or 1) per node as an int whose bit i is node i's."""
    return int(flags.translate(_TO_DIGITS)[::-1], 2) if flags else 0


@lru_cache(maxsize=64)
def _numbers(count: int) -> tuple[int, ...]:
    return tuple(range(count))


def _check_order(nodes: tuple[Node, ...]) -> None:
    """Nodes numbered otherwise (by hand, in a test): each defined once, before its users."""
    seen: set[str] = set()
    for node in nodes:
        if not seen.issuperset(node.operand_ids):
            operand = next(o for o in node.operands if o.split(".", 1)[0] not in seen)
            raise IRParseError(f"line {node.line}: {operand} is used before it is defined")
        if node.id in seen:
            raise IRParseError(f"line {node.line}: {node.id} is defined twice")
        seen.add(node.id)


def _parse_line(line: str, number: int) -> Node | str:
    """One node line as a Node, or what is wrong with it. Read once per run for each line
    at each place (parse_ir keeps them): the graphs of one run repeat most of their lines
    at the same places (a recompile changes a few), so a run's hundreds of graphs parse
    in little more than the time of their distinct lines, and share their nodes. A line
    new only in its output types (every line after a new batch size) reads only those."""
    node_id, _, rest = line.partition(" = ")
    split = rest.rfind(" ", 0, rest.find("(", 1))
    types, tail = rest[:split], rest[split + 1:]
    known = _SKELETONS.get((node_id, tail)) if split > 0 else None
    if known is not None and _TYPES_FORM.fullmatch(types):
        outputs = _types(types[1:-1] if types[0] in "[(" else types)
        if outputs is not None:
            return _new_tuple(Node, known + (outputs, number, next(_SERIALS), _number_of(_TYPE_IDS, types)))
    match = _NODE.match(line)
    if match is None:
        return f"not an IR node: {_clip(line)}"
    node_id, types, op, operand_text, attr_text = match.groups()
    outputs = _types(types[1:-1] if types[0] in "[(" else types)
    if outputs is None:
        return f"cannot read output types [{_clip(types)}]"
    # Each half is read once for all the lines that share it: the same at the same node
    # of every graph that differs only in shapes.
    read = _operands(operand_text)
    if isinstance(read, str):
        return read
    attrs = _attrs(attr_text) if attr_text else _NO_ATTRS
    if isinstance(attrs, str):
        return attrs
    (operands, operand_ids, outputs_read, highest), (values, root, location, names, attrs_id) = read, attrs
    form = (names, outputs_read)
    own = int(node_id[1:])
    is_input = op in INPUT_OPS or (not operands and "device_data" in op)
    skeleton = (node_id, op, operands, values, root, location, is_input, operand_ids, form,
                hash((node_id, op, form, operand_ids)), own, highest < own, attrs_id)
    if split > 0 and rest[:split] == types:
        if len(_SKELETONS) >= _KEPT_LINES:
            _SKELETONS.clear()
        _SKELETONS[node_id, tail] = skeleton
    # tuple.__new__ skips the NamedTuple's Python __new__: a run reads tens of thousands of lines.
    return _new_tuple(Node, skeleton + (outputs, number, next(_SERIALS), _number_of(_TYPE_IDS, types)))


# (node id, the line after its output types) -> the Node's fields before `outputs`.
_SKELETONS: dict[tuple[str, str], tuple] = {}
_TYPES_FORM = re.compile(r"\[.*\]|\(.*\)|\w+\[[^\]]*\](?:\{[^}]*\})?")
_new_tuple = tuple.__new__
_SERIALS = itertools.count(1)
# Never let go: a number names one text for the life of the process (a few thousand texts
# a run: its shapes, its attribute lists).
_TYPE_IDS: dict[str, int] = {}
_ATTR_IDS: dict[tuple, int] = {(): 0}  # no attributes: 0, as _NO_ATTRS


def _number_of(numbers: dict, text: object) -> int:
    number = numbers.get(text)
    if number is None:
        number = numbers[text] = len(numbers) + 1
    return number


@lru_cache(maxsize=4096)
def _types(types: str) -> tuple[TensorType, ...] | None:
    """"Float[16,64], Float[16]" as TensorTypes; None when there are none to read. A
    graph's nodes share a few types (a shape change rewrites them all alike)."""
    outputs = tuple(TensorType(dtype, tuple(filter(None, map(str.strip, dims.split(",")))))
                    for dtype, dims in _TENSOR.findall(types))
    return None if types.strip() and not outputs else outputs


@lru_cache(maxsize=65536)
def _operands(operand_text: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], int] | str:
    """(operands, the nodes they come from, which output of each, the highest node number
    among them or -1) or what is wrong."""
    operands = tuple(o.strip() for o in operand_text.split(",") if o.strip())
    for operand in operands:
        if not _OPERAND.match(operand):
            return f"bad operand {_clip(operand)!r}"
    ids = tuple(o.split(".", 1)[0] for o in operands)
    return operands, ids, tuple(o.partition(".")[2] for o in operands), max((int(i[1:]) for i in ids), default=-1)


@lru_cache(maxsize=65536)
def _attrs(attr_text: str) -> tuple[dict[str, str], int | None, str, tuple[str, ...], int] | str:
    """(attributes without the debug ones, ROOT, location, the attribute names sorted, the
    number of the values a diff compares: Node.attrs_id) or what is wrong."""
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
    compared = tuple(sorted(item for item in attrs.items() if item[0] != "alias"))  # as diff._compare does
    return attrs, root, location, tuple(sorted(attrs)), _number_of(_ATTR_IDS, compared)


_NO_ATTRS: tuple[dict[str, str], None, str, tuple[str, ...], int] = ({}, None, "", (), 0)


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
