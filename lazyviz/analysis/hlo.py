"""What differs between two HLO modules XLA compiled from the same IR text.

PyTorch/XLA's IR text does not print every value a node holds: `x[:, i:i + 16]` is an
`xla::select` node whose bounds its text leaves out, so the graph of every `i` reads
the same while XLA hashes (and compiles) each anew. The HLO it compiled says them:

    %slice.4 = f32[64,16]{1,0} slice(%p0.1), slice={[0:64], [3:19]}, metadata={op_type="xla__select" ...}

Instructions are compared without their ids; one whose values differ (its attributes,
or a constant's literal) at the same op and line in both modules is a changed value.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import NamedTuple

from lazyviz.analysis.diff import Change
from lazyviz.hlo_text import entry_computation, split_instruction, without_ids

_NAME_ID = re.compile(r"\.\d+$")


class Instruction(NamedTuple):
    name: str  # without its id: "slice"
    op: str  # the IR op it lowers ("xla::select"), else its opcode
    location: str  # "file.py:10" from its metadata, "" without
    values: tuple[str, ...]  # its operands and attributes, ids left out


def parse_instruction(line: str) -> Instruction | None:
    found = split_instruction(line)
    if found is None:
        return None
    fields = found.metadata
    op_type = fields.get("op_type", "")
    op = op_type.replace("__", "::", 1) if op_type else found.opcode
    file = fields.get("source_file", "").rsplit("/", 1)[-1]
    location = f"{file}:{fields['source_line']}" if file and "source_line" in fields else ""
    operands = without_ids(f"({found.operands})")
    return Instruction(_NAME_ID.sub("", found.name), op, location,
                       (found.shape, found.opcode, operands, *map(without_ids, found.attributes)))


def _instructions(hlo: str) -> Counter[Instruction]:
    found: Counter[Instruction] = Counter()
    for line in hlo.splitlines():
        instruction = parse_instruction(line)
        if instruction is not None:
            found[instruction] += 1
    return found


def hlo_changes(old_hlo: str, new_hlo: str) -> tuple[Change, ...]:
    """The values that differ between two modules of one computation: an instruction
    gone and one come at the same op, line, shape and opcode, paired in order, that
    differ in their attributes or a constant's literal. () where the modules are the
    same, or differ otherwise: an instruction without a partner, or one that reads
    other operands, is another computation, not another value."""
    old, new = _instructions(old_hlo), _instructions(new_hlo)
    gone, come = old - new, new - old
    pool: dict[tuple, list[Instruction]] = {}
    for instruction in gone.elements():
        pool.setdefault((instruction.op, instruction.location, instruction.values[:2]), []).append(instruction)
    changes = []
    for instruction in come.elements():
        partners = pool.get((instruction.op, instruction.location, instruction.values[:2]))
        if not partners:
            return ()
        before = partners.pop(0)
        if before.values[2] != instruction.values[2] and instruction.values[1] != "constant":
            return ()
        # The operands with their opcode: "constant(0.5)", not "(0.5)".
        shown = [(f"{before.values[1]}{a}", f"{instruction.values[1]}{b}") if at == 2 else (a, b)
                 for at, (a, b) in enumerate(zip(before.values, instruction.values))]
        differ = [pair for pair in shown if pair[0] != pair[1]]
        changes.append(Change("attribute", f"%{instruction.name}", instruction.op,
                              ", ".join(a for a, _ in differ), ", ".join(b for _, b in differ), True,
                              location=instruction.location))
    # One value a change: fused computations repeat an instruction per use.
    return tuple(dict.fromkeys(changes))


def _parameters(hlo: str) -> list[tuple[str, str]]:
    """The entry computation's parameters, (name without its id, shape), in order."""
    found = entry_computation(hlo.splitlines())
    if found is None:
        return []
    return [(_NAME_ID.sub("", name.strip()), shape.strip()) for name, _, shape in
            (part.partition(":") for part in found[0])]


def hlo_input_changes(old_hlo: str, new_hlo: str) -> tuple[Change, ...]:
    """The graph inputs whose shapes differ, where both modules take as many (in light
    capture the IR is not there to say; XLA's parameters are its device data)."""
    old, new = _parameters(old_hlo), _parameters(new_hlo)
    if not old or len(old) != len(new):
        return ()
    # "f32[16,8]" -> "f16[16,8]" is a dtype, as the IR's diff says it.
    return tuple(Change("dtype" if before.partition("[")[2] == after.partition("[")[2] else "input_shape",
                        f"%{name}", "xla::device_data", before, after, True)
                 for (_, before), (name, after) in zip(old, new) if before != after)
