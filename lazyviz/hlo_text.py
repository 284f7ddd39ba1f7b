"""HLO text as XLA prints it, split into parts: shared by the XLA backend (which matches
its compiler dump's modules with graphs, and writes each graph's IR from its module:
hlo_as_ir) and the analysis (which compares two modules). Pure text functions, no torch.

    ENTRY %SyncTensorsGraph.30 (p0.1: f32[16,1], p1.2: f32[]) -> (f32[], /*index=1*/f32[16,1]) {
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

_ENTRY = re.compile(r"^ENTRY \S+ \((.*)\) -> (.*) \{$")
_COMMENT = re.compile(r"/\*.*?\*/")


def top_level(text: str) -> list[str]:
    """The comma-separated parts of a list whose items may hold brackets (shapes
    "f32[8,16]{1,0}", tuples "(f32[2], s64[])") and quoted strings, each stripped."""
    parts, depth, start, quoted = [], 0, 0, False
    for at, char in enumerate(text):
        if char == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:at].strip())
            start = at + 1
    if text[start:].strip():
        parts.append(text[start:].strip())
    return parts


def entry_computation(lines: Iterable[str]) -> tuple[list[str], list[str]] | None:
    """The entry computation's parameters ("p0.1: f32[16,1]") and results ("f32[]"); None
    without an entry line (a module not all written yet)."""
    for line in lines:
        if line.startswith("ENTRY "):
            match = _ENTRY.match(_COMMENT.sub("", line.rstrip("\n")))
            if match is None:
                return None
            params, result = match.groups()
            return top_level(params), top_level(result[1:-1]) if result.startswith("(") else [result]
    return None


# The first line of an IR text hlo_as_ir wrote.
FROM_HLO = "## the graph's HLO before XLA's optimizations, one node per instruction (XLA's compiler dump)"

_INSTRUCTION = re.compile(r"^\s*(ROOT )?%([\w.\-]+) = ")
_METADATA = re.compile(r", metadata=\{([^}]*)\}")
_FIELD = re.compile(r'(\w+)=(?:"([^"]*)"|(\S+))')
_NAME_ID = re.compile(r"(%[\w\-]+?)\.\d+\b")
_OPERAND = re.compile(r"%([\w.\-]+)")


class HloInstruction(NamedTuple):
    """One line of an HLO computation, split: `%dot.9 = f32[4,16]{1,0} dot(%p4.8, %t.7),
    lhs_contracting_dims={1}, metadata={op_type="aten__addmm" source_line=134 ...}`."""

    name: str  # "dot.9"
    root: bool
    shape: str  # "f32[4,16]{1,0}", or a tuple "(f32[], s32[])", comments left out
    opcode: str  # "dot"
    operands: str  # what its parentheses hold: "%p4.8, %t.7", or a constant's literal
    attributes: list[str]  # "lhs_contracting_dims={1}", ...
    metadata: dict[str, str]  # op_type, op_name, source_file, source_line


def without_ids(text: str) -> str:
    """Instruction names without the ids XLA numbers them by ("%AddComputation.28" ->
    "%AddComputation"): they differ between two compiles of one computation."""
    return _NAME_ID.sub(r"\1", text)


def balanced_end(text: str, start: int) -> int:
    """The index just past the bracket group that opens at text[start]."""
    depth = 0
    for at in range(start, len(text)):
        if text[at] in "([{":
            depth += 1
        elif text[at] in ")]}":
            depth -= 1
            if depth == 0:
                return at + 1
    return len(text)


def split_instruction(line: str) -> HloInstruction | None:
    """An instruction line in parts; None where the line is not one."""
    head = _INSTRUCTION.match(line)
    if head is None:
        return None
    rest = _COMMENT.sub("", line[head.end():]).rstrip()
    found = _METADATA.search(rest)
    metadata = {name: quoted or bare for name, quoted, bare in _FIELD.findall(found.group(1))} if found else {}
    if found:
        rest = rest[:found.start()] + rest[found.end():]
    shape_end = balanced_end(rest, 0) if rest.startswith("(") else rest.find(" ")
    opened = rest.find("(", shape_end)
    if shape_end < 0 or opened < 0:
        return None
    closed = balanced_end(rest, opened)
    return HloInstruction(head.group(2), bool(head.group(1)), rest[:shape_end], rest[shape_end:opened].strip(),
                          rest[opened + 1:closed - 1], top_level(rest[closed:].lstrip(", ")), metadata)


def hlo_as_ir(hlo: str) -> str:
    """The entry computation of an HLO module (XLA's, before its optimizations) written as
    PyTorch/XLA's IR text, one node per instruction, so what reads the IR reads it: where
    XLA's own IR dump is not taken (it formats every graph at every sync), the graph is
    known from the module XLA dumps once per compile. Each node is the IR op its metadata
    names (`aten::addmm`), its HLO opcode an attribute, its location the line the metadata
    names (XLA_IR_DEBUG); the entry's output tuple becomes ROOT marks. "" without an entry."""
    lines = hlo.splitlines()
    start = next((at for at, line in enumerate(lines) if line.startswith("ENTRY ")), None)
    if start is None:
        return ""
    ids: dict[str, str] = {}
    nodes: list[list[str]] = []
    roots: list[str] = []
    for line in lines[start + 1:]:
        if line.startswith("}"):
            break
        instruction = split_instruction(line)
        if instruction is None:
            continue
        if instruction.root and instruction.opcode == "tuple":
            roots = _OPERAND.findall(instruction.operands)
            continue
        node_id = ids[instruction.name] = f"%{len(ids)}"
        nodes.append(_ir_line(node_id, instruction, ids))
        if instruction.root:
            roots = [instruction.name]
    for index, operand in enumerate(roots):
        node = ids.get(operand)
        if node is not None and not nodes[int(node[1:])][-1].startswith("ROOT="):
            nodes[int(node[1:])].append(f"ROOT={index}")
    return "\n".join([FROM_HLO,
                      "IR {", *(f"  {', '.join(parts)}" for parts in nodes), "}", ""])


def _ir_line(node_id: str, instruction: HloInstruction, ids: dict[str, str]) -> list[str]:
    op_type = instruction.metadata.get("op_type", "")
    if instruction.opcode == "parameter":
        op = "xla::device_data"
    else:
        # An IR op is a name: "hlo::get_tuple_element" for an instruction no IR op lowered.
        op = op_type.replace("__", "::", 1) if op_type else f"hlo::{instruction.opcode.replace('-', '_')}"
    shape = instruction.shape
    if shape.startswith("("):  # a tuple: its tensors, flat
        shape = "(" + shape[1:-1].replace("(", "").replace(")", "") + ")"
    if instruction.opcode in ("constant", "parameter"):
        operands, values = [], ([f"value={instruction.operands}"] if instruction.opcode == "constant" else [])
    else:
        # Names only: XLA may print each operand's shape before it ("f32[4,8]{1,0} %p0.1").
        operands = [ids[name] for name in _OPERAND.findall(instruction.operands) if name in ids]
        values = []
    attributes = [without_ids(attribute) for attribute in instruction.attributes]
    parts = [f"{node_id} = {shape} {op}({', '.join(operands)})", *values, *attributes]
    if op_type and instruction.opcode != "parameter":
        parts.append(f"hlo={instruction.opcode}")
    file, line = instruction.metadata.get("source_file", ""), instruction.metadata.get("source_line", "")
    if file and line:
        parts.append(f"location={file.rsplit('/', 1)[-1]}:{line}")
    return parts
