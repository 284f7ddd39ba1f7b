"""HLO text as XLA prints it, split into parts: shared by the XLA backend (which matches
its compiler dump's modules with graphs) and the analysis (which compares two modules).
Pure text functions, no torch.

    ENTRY %SyncTensorsGraph.30 (p0.1: f32[16,1], p1.2: f32[]) -> (f32[], /*index=1*/f32[16,1]) {
"""
from __future__ import annotations

import re
from collections.abc import Iterable

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
