"""A loop's iterations where it has no steps, from the optimizer steps the tracer counted
(RunInfo.optimizer_marks: the executions recorded when each optimizer step returned)."""
from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence


def unsynced_iterations(marks: Sequence[int]) -> list[int]:
    """The iterations (0-based) that no execution separated from the one before: their
    work and the next one's are pending in one graph."""
    return [k for k, (before, after) in enumerate(itertools.pairwise(marks), 1) if after == before]


def iteration_of(marks: Sequence[int], execution: int) -> int | None:
    """The iteration (0-based) an execution ran in: the optimizer steps that had returned
    before it. None past the marks kept. (Marks only grow: a binary search, asked per miss.)"""
    iteration = bisect.bisect_right(marks, execution)
    return iteration if iteration < len(marks) else None
