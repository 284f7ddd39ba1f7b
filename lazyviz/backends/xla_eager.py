"""Eager mode's executions, as the XLA backend hands them on. With
`torch_xla.experimental.eager_mode(True)` each op outside a `torch_xla.compile`d function
runs at once, a small graph of its own. XLA writes no analysis for these (no frames, no
graph hash: debug_util.cpp skips eager mode) and times them by metrics of their own
(EagerOpCompileTime, EagerOpExecuteTime), so each poll finds them as executions without
a report. A part of XlaBackend with its own state: where each eager graph was built, and
the executions still awaiting their execute time.

What is known of each, and from where (checked on torch_xla 2.9, PJRT CPU):
- that it is eager: the poll ran while eager mode was on (the backend polls before each
  change of the mode, so what ran before a change is read under the mode it ran in);
- which of a poll's executions compiled: each metric sample carries when it ended, and an
  op compiles, then runs, before the next op compiles;
- where it was built: its graph's HLO metadata names the user's line of each op (full
  capture, XLA_IR_DEBUG with lazyviz's frame getter). A cache hit names no graph: it is
  taken to be the graph at its place, counted from the poll's end, in the last poll from
  the same Python stack (a loop's eager ops come in the same order each step).
"""
from __future__ import annotations

import ast
import bisect
import functools
import re
import sys
from collections import Counter, deque
from pathlib import Path

from lazyviz.backends import Frame

# A node's location in the IR written from the HLO (hlo_text.hlo_as_ir): file name, line.
_LOCATION = re.compile(r", location=([^,\n:]+):(\d+)")


def compiled_flags(count: int, compiles: int, compile_ends: list[float], execute_ends: list[float]) -> list[bool]:
    """Which of `count` eager executions, in order, compiled. By the samples' end times
    where every execution has its sample: a compile belongs to the first execution that
    ended after it. Else the first `compiles` are taken to be the compiles."""
    if len(execute_ends) < count or len(compile_ends) != compiles:
        return [number < compiles for number in range(count)]
    flags = [False] * count
    ends = sorted(execute_ends[-count:])
    for end in sorted(compile_ends):
        at = bisect.bisect_right(ends, end)
        while at < count and flags[at]:
            at += 1
        if at < count:
            flags[at] = True
        else:  # later than every execution: the counts disagree, keep the totals
            return [number < compiles for number in range(count)]
    return flags


def built_at(ir_text: str, stack: list[Frame]) -> Frame | None:
    """The user's line that built an eager graph: the line its nodes name most, as a frame
    (the file found on the poll's stack or among the modules loaded, the function read
    from the file). None without locations (light capture)."""
    lines = Counter((name, int(line)) for name, line in _LOCATION.findall(ir_text))
    if not lines:
        return None
    (name, line), _count = lines.most_common(1)[0]
    path = next((file for file, _line, _function in stack if Path(file).name == name), None) or _module_file(name)
    return (path, line, _function_at(path, line)) if path else None


def _module_file(name: str) -> str | None:
    """A loaded module's file of this name (the user's own first: not in site-packages)."""
    found = [file for module in list(sys.modules.values())
             if isinstance(file := getattr(module, "__file__", None), str) and Path(file).name == name]
    return min(found, key=lambda file: "site-packages" in file, default=None)


@functools.lru_cache(maxsize=64)
def _function_at(path: str, line: int) -> str:
    """The innermost function whose body holds the line, as its frame would name it."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return "<module>"
    name, start = "<module>", 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and start < node.lineno <= line \
                and line <= (node.end_lineno or 0):
            name, start = node.name, node.lineno
    return name


class EagerGraphs:
    """Which graph each eager execution ran and where it was built; the executions
    awaiting their execute time."""

    def __init__(self) -> None:
        # Per Python stack of the poll: the last batch's graphs, as (graph id, built at).
        self._batches: dict[tuple, list[tuple[str, Frame | None]]] = {}
        self._last: tuple[str, Frame | None] | None = None  # the last eager graph compiled
        self.awaiting_execute: deque[int] = deque()

    def hit(self, where: tuple, number: int, count: int) -> tuple[str, Frame | None] | None:
        """The graph a cache hit ran: at the same place, counted from the batch's end, in
        the last batch polled from `where`; else the last eager graph compiled."""
        last = self._batches.get(where)
        back = count - number
        if last is not None and back <= len(last):
            return last[-back]
        return self._last

    def compiled(self, graph: tuple[str, Frame | None]) -> None:
        self._last = graph

    def batch(self, where: tuple, graphs: list[tuple[str, Frame | None]]) -> None:
        """A poll's eager executions, in order, to place the next poll's hits by."""
        if graphs:
            self._batches[where] = graphs
