"""Align two IR graphs and say what differs, classified, origins first.

Nodes are matched by structure (op and operands, recursively, ignoring shapes and
attribute values), then the rest by op in order. A matched node whose difference is
not explained by a differing operand is an *origin*: the place the change came in.
"""
from __future__ import annotations

import difflib
import itertools
import operator
import re
from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache
from typing import NamedTuple

from lazyviz.analysis.ir import IRGraph, Node, bits, source_line

# Change kinds, in the order a user should read them.
# Aliasing comes last among origins: it explains a miss only when nothing else changed.
KINDS = ("input_shape", "dtype", "structure", "op_added", "op_removed", "attribute", "aliasing", "shape")


class Change(NamedTuple):
    """One difference. A tuple: a run whose shapes change every step makes hundreds of
    thousands (every node's output type), and a frozen dataclass costs 4x to make."""

    kind: str
    node: str  # the node's id in the new graph ("" for a removed node)
    op: str
    before: str
    after: str
    origin: bool  # True where the change came in; False where it was carried by operands
    old_node: str = ""
    location: str = ""  # the source line that built the node, where the backend records it
    partner_location: str = ""  # aliasing: where the input it shares a buffer with was built

    def describe(self) -> str:
        where = self.node or self.old_node
        at = f", built at {self.source_line}" if self.location else ""
        if self.kind == "aliasing":
            # Python numbers that became equal share one cached device buffer.
            built = f" (built at {self.source_line})" if self.location else ""
            partner_at = source_line(self.partner_location)
            partner_built = f" (built at {partner_at})" if partner_at else ""
            if self.after != "-":
                inputs = "inputs" if "," in self.after else "input"
                return (f"aliasing: input {where}{built} now shares one buffer with {inputs} "
                        f"{self.after}{partner_built}: equal Python numbers")
            return f"aliasing: input {where}{built} no longer shares a buffer with input {self.before}"
        if self.kind in ("op_added", "op_removed"):
            return f"{self.kind.replace('_', ' ')}: {self.op} ({where}){at}"
        return f"{self.kind.replace('_', ' ')}: {self.op} {where}: {self.before} -> {self.after}{at}"

    @property
    def source_line(self) -> str:
        """"train.py:29" from XLA's "main@train.py:29"."""
        return source_line(self.location)


class GraphDiff:
    """What differs between two graphs. The origins and which nodes differ are found at
    once; the carried changes (every node downstream of a new input shape, say) are
    listed on first use of .changes: a report of a run whose shapes change each step
    reads only the origins of its thousands of diffs. It holds no graph: `graphs` gives
    the two again when the carried changes are asked for (a run's store may have let them
    go), so a run's thousands of recompiles do not keep every graph they compared."""

    def __init__(self, origins: tuple[Change, ...], changed_nodes: frozenset[str] | ChangedNodes, matched: int,
                 graphs: Callable[[], tuple[IRGraph | None, IRGraph | None]]) -> None:
        self.origins = origins  # where each change came in, in the order a user should read them
        self._changed = changed_nodes
        self.matched = matched  # nodes aligned between the two graphs
        self._graphs = graphs
        self._values: tuple[Change, ...] | None = None  # with_values: the changes, known

    @property
    def changed_nodes(self) -> frozenset[str]:
        """The ids in the new graph of the nodes that differ in any way."""
        if isinstance(self._changed, ChangedNodes):
            self._changed = self._changed.ids()
        return self._changed

    @property
    def changed_count(self) -> int:
        """len(changed_nodes), without listing them where they are bits."""
        return self._changed.count if isinstance(self._changed, ChangedNodes) else len(self._changed)

    @property
    def changes(self) -> tuple[Change, ...]:
        """Every change: the origins first, then the carried ones in topological order.
        Listed again at each ask, not kept: the JSON report asks once for each of a run's
        thousands of recompiles (every node of a graph whose input shape changed)."""
        if self._values is not None:
            return self._values
        old, new = self._graphs()
        if old is None or new is None:
            return self.origins
        changes, _ = _changes(old, new, align(old, new), carried=True)
        return changes

    @classmethod
    def of_changes(cls, changes: tuple[Change, ...]) -> GraphDiff:
        """A diff known without the IR (from XLA's HLO, in light capture): these changes."""
        return cls((), frozenset(), 0, lambda: (None, None)).with_values(changes)

    def with_values(self, changes: tuple[Change, ...]) -> GraphDiff:
        """This diff, empty, with the changed values the backend's IR text did not print,
        found elsewhere (XLA's HLO): they are its origins and all its changes."""
        diff = GraphDiff(changes, self._changed, self.matched, self._graphs)
        diff._values = changes
        return diff

    @property
    def is_empty(self) -> bool:
        return not self.origins and not self.changed_count

    @property
    def first(self) -> Change | None:
        return self.origins[0] if self.origins else (self.changes[0] if self.changes else None)


class ChangedNodes(NamedTuple):
    """The nodes of a graph that differ, as bits by position (a diff of two graphs of one
    structure): counted at once, listed by id only when asked."""

    mask: int
    ids_in_order: tuple[str, ...]

    @property
    def count(self) -> int:
        return self.mask.bit_count()

    def ids(self) -> frozenset[str]:
        return frozenset(itertools.compress(self.ids_in_order, _unbits(self.mask, len(self.ids_in_order))))


def align(old: IRGraph, new: IRGraph) -> dict[str, str]:
    """new node id -> old node id, for the nodes that correspond."""
    if old.structure == new.structure:
        # Node for node the same computation (a constant or a shape changed): position is
        # the alignment. The common case on long runs, and linear.
        return dict(zip(new.ids, old.ids))
    old_keys, new_keys = old.structure_keys, new.structure_keys
    pool: dict[int, list[str]] = {}
    for node in old.nodes:
        if not node.is_input:
            pool.setdefault(old_keys[node.id], []).append(node.id)
    mapping: dict[str, str] = {}
    for node in new.nodes:
        candidates = pool.get(new_keys[node.id]) if not node.is_input else None
        if candidates:
            same_type = next((i for i, old_id in enumerate(candidates)
                              if old.by_id[old_id].outputs == node.outputs), 0)
            mapping[node.id] = candidates.pop(same_type)
    # Inputs all look alike (device data, no operands): an input is the one that feeds
    # the same operand of the op it was matched through.
    used = set(mapping.values())
    for node in new.nodes:
        before = old.by_id.get(mapping.get(node.id, ""))
        if before is None:
            continue
        for new_operand, old_operand in zip(node.operands, before.operands):
            new_input, old_input = new.by_id[node.operand_node(new_operand)], old.by_id[before.operand_node(old_operand)]
            if new_input.is_input and old_input.is_input and new_input.id not in mapping \
                    and old_input.id not in used:
                mapping[new_input.id] = old_input.id
                used.add(old_input.id)
    # The rest: inputs by type, then anything by op in order (downstream of an added op).
    spare_inputs = [n for n in old.nodes if n.is_input and n.id not in used]
    for node in new.nodes:
        if node.is_input and node.id not in mapping:
            match = next((o for o in spare_inputs if o.outputs == node.outputs), None)
            if match is not None:
                mapping[node.id] = match.id
                spare_inputs.remove(match)
                used.add(match.id)
    rest_old = [n for n in old.nodes if n.id not in used]
    rest_new = [n for n in new.nodes if n.id not in mapping]
    for old_at, new_at, size in _matching_ops(tuple(map(_OP, rest_old)), tuple(map(_OP, rest_new))):
        for offset in range(size):
            mapping[rest_new[new_at + offset].id] = rest_old[old_at + offset].id
    return mapping


@lru_cache(maxsize=256)
def _matching_ops(old: tuple[str, ...], new: tuple[str, ...]) -> list[difflib.Match]:
    """difflib's matching blocks of two op sequences. Kept: a run's recompiles compare the
    same pairs of phases again (a step with and without a fallback's split)."""
    return difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_matching_blocks()


def diff_graphs(old: IRGraph, new: IRGraph,
                graphs: Callable[[], tuple[IRGraph | None, IRGraph | None]] | None = None) -> GraphDiff:
    """graphs: gives the two graphs again for the carried changes (default: keeps them)."""
    again = graphs or (lambda: (old, new))
    if old.structure == new.structure:
        # Node for node the same computation, numbered alike (a shape or a constant
        # changed): the common case on long runs, and what a run's thousands of diffs are.
        origins, changed_nodes = _positional_origins(old, new)
        return GraphDiff(origins, changed_nodes, len(new.nodes), again)
    mapping = align(old, new)
    origins, changed_nodes = _changes(old, new, mapping, carried=False)
    return GraphDiff(origins, changed_nodes, len(mapping), again)


def _changes(old: IRGraph, new: IRGraph, mapping: dict[str, str],
             carried: bool) -> tuple[tuple[Change, ...], frozenset[str]]:
    """The changes sorted origins first, and the ids of the new nodes that differ. Without
    carried, only the origins: a node with a changed operand and the same op is then
    only looked at to know whether it differs (none of its changes can be an origin)."""
    # Same ids node for node (a recompile that changed a value): an operand is rewired
    # exactly when its text differs, no need to map it.
    same_ids = len(mapping) == len(new.nodes) == len(old.nodes) and list(mapping) == list(mapping.values())
    positional = same_ids and old.structure == new.structure  # node for node: none added or gone
    changes, differing = _walk(old, new, mapping, same_ids, carried)
    if not positional:
        mapped_old = set(mapping.values())
        for node in old.nodes:
            if node.id not in mapped_old:
                changes.append(Change("op_removed", "", node.op, node.type_text, "", True, old_node=node.id,
                                      location=node.location))
    changes += _aliasing(old, new, mapping, same_ids)
    changes = _in_order(changes)
    changed_nodes = frozenset(differing.union(c.node for c in changes if c.node))
    return tuple(changes) if carried else tuple(c for c in changes if c.origin), changed_nodes


def _in_order(changes: list[Change]) -> list[Change]:
    """The changes, those a new input's sizes explain carried, origins first in the order a user reads them."""
    changes = _carry_shape_constants(changes)
    changes.sort(key=lambda c: (not c.origin, KINDS.index(c.kind) if c.origin else 0))
    return changes


def _walk(old: IRGraph, new: IRGraph, mapping: dict[str, str], same_ids: bool,
          carried: bool) -> tuple[list[Change], set[str]]:
    """(the changes node by node, the new ids of carried nodes that differ when carried
    changes are not listed)."""
    changed: set[str] = set()  # new ids that differ in any way, or whose operands do
    differing: set[str] = set()
    changes: list[Change] = []
    for node in new.nodes:
        before = old.by_id.get(mapping.get(node.id, ""))
        if before is None:
            changed.add(node.id)
            changes.append(Change("op_added", node.id, node.op, "", node.type_text, True,
                                  location=node.location))
            continue
        operands_changed = (changed and not changed.isdisjoint(node.operand_ids)) or \
            (node.operands != before.operands if same_ids else _rewired(node, before, mapping))
        if operands_changed and not carried and before.op == node.op and not node.is_input:
            changed.add(node.id)
            if before is not node and (before.outputs != node.outputs or _compare(before, node, True)):
                differing.add(node.id)
            continue
        node_changes = _compare(before, node, operands_changed)
        if node_changes or operands_changed:
            changed.add(node.id)
        changes.extend(node_changes)
    return changes, differing


def _positional_origins(old: IRGraph, new: IRGraph) -> tuple[tuple[Change, ...], ChangedNodes]:
    """_changes without carried changes, for two graphs of one structure (aligned by
    position). Nodes are compared whole columns at a time, as bits: the lines that
    differ (equal lines at equal places are one Node), then in graph order the first
    differing node not downstream of a change, an origin, whose descendants are then
    carried, and so on. A run's thousands of recompiles each pay for their few origins,
    not for every node after a new input shape."""
    old_nodes, new_nodes = old.nodes, new.nodes
    count = len(new_nodes)
    (old_serials, old_types, old_attrs), (new_serials, new_types, new_attrs) = old.columns, new.columns
    pending, carried, found = _differing(old_serials ^ new_serials, count), 0, 0
    changes: list[Change] = []
    while pending:
        low = pending & -pending
        pending ^= low
        at = low.bit_length() - 1
        before, node = old_nodes[at], new_nodes[at]
        if node.operands != before.operands:  # rewired: the same op (the same structure), carried
            carried |= low
        else:
            origins = _compare(before, node, False)
            if not origins:
                continue
            changes.extend(origins)
            found |= low
        downstream = _descendants(new, at)
        carried |= downstream & pending
        pending &= ~downstream
    if carried:
        # Which carried nodes differ: new output types, or attributes (other than the alias mark).
        found |= carried & _differing(old_types ^ new_types, count)
        same_types = carried & ~found
        for at in _positions(same_types & _differing(old_attrs ^ new_attrs, count)) if same_types else ():
            if _compare(old_nodes[at], new_nodes[at], True):
                found |= 1 << at
    changes += _aliasing(old, new, {}, same_ids=True)
    for change in changes:  # an alias change's input, found apart
        if change.kind == "aliasing":
            found |= 1 << new.ids.index(change.node)
    return tuple(c for c in _in_order(changes) if c.origin), ChangedNodes(found, new.ids)


def least_score(old: IRGraph, new: IRGraph) -> tuple[int, int]:
    """For two graphs of one structure, a floor under what their diff finds, from their
    columns alone: (origins, nodes that differ). An input whose types differ is an origin
    (it has no operands: no change is carried to it, and an input's new shape is never
    folded into another's), and a node whose types or compared attributes differ is
    among the changed (an origin, or carried and found different). A recompile's
    ranking skips a candidate whose floor cannot beat the best diff so far."""
    count = len(new.nodes)
    (_, old_types, old_attrs), (_, new_types, new_attrs) = old.columns, new.columns
    types = _differing(old_types ^ new_types, count)
    return (types & new.input_bits).bit_count(), (types | _differing(old_attrs ^ new_attrs, count)).bit_count()


def _differing(xor: int, count: int) -> int:
    """From the XOR of two graphs' IRGraph.columns (4 bytes a node), the nodes that differ, as bits."""
    flags = xor.to_bytes(4 * count, "little").translate(_NOT_ZERO)
    lanes = [int.from_bytes(flags[byte::4], "little") for byte in range(4)]
    return bits((lanes[0] | lanes[1] | lanes[2] | lanes[3]).to_bytes(count, "little"))


_OP = operator.attrgetter("op")
_FROM_DIGITS = bytes.maketrans(b"01", b"\x00\x01")
_NOT_ZERO = bytes([0] + [1] * 255)


def _unbits(mask: int, count: int) -> bytes:
    """bits undone: one flag per node, for itertools.compress."""
    return format(mask, f"0{count}b")[::-1].encode().translate(_FROM_DIGITS)


def _positions(mask: int) -> list[int]:
    positions = []
    while mask:
        low = mask & -mask
        positions.append(low.bit_length() - 1)
        mask ^= low
    return positions


def _descendants(graph: IRGraph, at: int) -> int:
    """The nodes downstream of node `at`, as bits; kept for every graph of the structure:
    the same few inputs are the origins of most of a run's diffs (the batch, the mask)."""
    downstream = graph.of_structure.setdefault("downstream", {})
    found = downstream.get(at)
    if found is None:
        nodes = graph.nodes
        reached = {nodes[at].id}
        flags = bytearray(len(nodes))
        for later in range(at + 1, len(nodes)):
            node = nodes[later]
            if not reached.isdisjoint(node.operand_ids):
                reached.add(node.id)
                flags[later] = 1
        found = downstream[at] = bits(bytes(flags))
    return found


def _carry_shape_constants(changes: list[Change]) -> list[Change]:
    """A size attribute that only repeats an input's new dimensions (expand size=16 1 ->
    24 1 after a batch change) follows that input: it is not an origin of its own."""
    dims: dict[str, str] = {}
    for change in changes:
        if change.kind == "input_shape" and change.origin:
            for old_dim, new_dim in zip(_DIGITS.findall(change.before), _DIGITS.findall(change.after)):
                if old_dim != new_dim:
                    dims[old_dim] = new_dim
    if not dims:
        return changes
    changed = tuple(dims.items())
    return [
        change._replace(origin=False)
        if change.origin and change.kind in ("attribute", "shape") and _follows_inputs(changed, change.before, change.after)
        else change
        for change in changes
    ]


_DIGITS = re.compile(r"\d+")
_NUMBERS = re.compile(r"(\d+)")


@lru_cache(maxsize=8192)
def _follows_inputs(changed: tuple[tuple[str, str], ...], before: str, after: str) -> bool:
    """Whether before -> after follows from the inputs' sizes that changed (old -> new):
    the same text with those sizes swapped, or each number that differs scaled by some of
    them (a flattened [4, 24] -> [4, 32], f32[96] -> f32[128]; the count a mean divides by).
    Kept: a run's recompiles meet the same few values again and again."""
    dims = dict(changed)
    if _DIGITS.sub(lambda m: dims.get(m.group(0), m.group(0)), before) == after:
        return True
    scales = {Fraction(1)}
    for old_dim, new_dim in changed:
        if int(old_dim):
            scales |= {scale * Fraction(int(new_dim), int(old_dim)) for scale in scales}
    parts_before, parts_after = _NUMBERS.split(before), _NUMBERS.split(after)
    return len(parts_before) == len(parts_after) and all(
        a == b or (a.isdigit() and b.isdigit() and int(a) and Fraction(int(b), int(a)) in scales)
        for a, b in zip(parts_before, parts_after))


def _rewired(node: Node, before: Node, mapping: dict[str, str]) -> bool:
    """Operands that now point at nodes not matched to the old operands."""
    if len(node.operands) != len(before.operands):
        return True
    for new_operand, old_operand in zip(node.operands, before.operands):
        new_id, _, new_out = new_operand.partition(".")
        old_id, _, old_out = old_operand.partition(".")
        if mapping.get(new_id) != old_id or new_out != old_out:
            return True
    return False


def _compare(before: Node, after: Node, operands_changed: bool) -> list[Change]:
    """What differs on one matched node. Without a changed operand, it is an origin."""
    if before is after:
        return []
    same_op, same_outputs, same_attrs = before.op == after.op, before.outputs == after.outputs, before.attrs == after.attrs
    if same_op and same_outputs and same_attrs and len(before.operands) == len(after.operands):
        return []  # most nodes of a recompiled graph: nothing to say
    origin = not operands_changed
    changes = []
    location = after.location or before.location
    if not same_op:
        changes.append(Change("structure", after.id, after.op, before.op, after.op, True, before.id, location))
    elif not same_outputs:
        dtypes_differ = [a.dtype for a in before.outputs] != [b.dtype for b in after.outputs]
        kind = "dtype" if dtypes_differ else ("input_shape" if after.is_input else "shape")
        changes.append(Change(kind, after.id, after.op, before.type_text, after.type_text,
                              origin or after.is_input, before.id, location))
    for name in () if same_attrs else sorted(set(before.attrs) | set(after.attrs)):
        if name == "alias":  # which input it shares a buffer with: compared as groups (_aliasing)
            continue
        if before.attrs.get(name) != after.attrs.get(name):
            changes.append(Change(
                "attribute", after.id, f"{after.op}.{name}", before.attrs.get(name, "-"),
                after.attrs.get(name, "-"), origin, before.id, location,
            ))
    if not origin and before.operands != after.operands and not changes and len(before.operands) != len(after.operands):
        changes.append(Change("structure", after.id, after.op, ", ".join(before.operands),
                              ", ".join(after.operands), False, before.id, location))
    return changes


def _aliasing(old: IRGraph, new: IRGraph, mapping: dict[str, str], same_ids: bool = False) -> list[Change]:
    """Inputs that now share one buffer, or no longer do: the executor's cache key covers
    that sharing (equal Python numbers get one buffer), so the same IR can miss. One
    change per group of the new graph whose members' partners differ from before.
    same_ids: the mapping is every node to the node of its own id (then only the inputs
    in a group in either graph are in it)."""
    if same_ids and old.alias_marks == new.alias_marks:
        return []  # the same inputs share the same buffers in both: nothing to compare
    old_groups, new_groups = old.buffer_groups, new.buffer_groups
    if not old_groups and not new_groups:
        return []
    # old id -> new id: the same id where the mapping is one to one by id.
    reverse = new.by_id if same_ids else {old_id: new_id for new_id, old_id in mapping.items()}
    inputs = new.inputs
    if same_ids:  # an input in no group in either graph has nothing to say
        inputs = [new.by_id[i] for i in sorted(new_groups.keys() | old_groups.keys(), key=_order) if i in new.by_id]
        mapping = {node.id: node.id for node in inputs}
    changes, checked = [], set()
    for node in inputs:
        # An input alone with its buffer in both graphs (most are) has nothing to say.
        if node.id not in new_groups and mapping.get(node.id) not in old_groups:
            continue
        group = new_groups.get(node.id, frozenset((node.id,)))
        if group in checked or node.id not in mapping:
            continue
        # One member answers for its group: were its partners the same, so are every member's.
        checked.add(group)
        old_id = mapping[node.id]
        before = {o if same_ids else reverse[o] for o in old_groups.get(old_id, (old_id,)) if o in reverse}
        after = {m for m in group if m in mapping}
        if before == after:
            continue
        partner = next((new.by_id[m] for m in sorted(group, key=_order) if m != node.id), None)
        changes.append(Change(
            "aliasing", node.id, node.op, ", ".join(sorted(before - {node.id}, key=_order)) or "-",
            ", ".join(sorted(after - {node.id}, key=_order)) or "-", True, mapping[node.id], node.location,
            partner.location if partner else ""))
    return changes


def _order(node_id: str) -> int:
    return int(node_id.lstrip("%").split(".")[0])
