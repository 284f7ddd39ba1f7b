"""The kinds of finding, outside the findings package: modules it imports (host_calls)
compare kinds too."""
from __future__ import annotations

from enum import StrEnum


class FindingKind(StrEnum):
    """The kinds of finding. A str: the trace, the JSON report and `check` write the value."""

    FAILED_EXECUTION = "failed_execution"
    CRASH = "crash"
    RECOMPILE = "recompile"
    DYNAMIC_SHAPE = "dynamic_shape"
    EXTRA_SYNC = "extra_sync"
    FALLBACK = "fallback"
    ONE_BY_ONE_READS = "one_by_one_reads"
    MISSING_MARK_STEP = "missing_mark_step"
    UNASKED_COLLECTIVE = "unasked_collective"
    HOST_CALL = "host_call"
