"""What every kind of finding shares: the Finding record, the facts finders read, and
each kind's name, label and colour role (declared by its own module, gathered here)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lazyviz.analysis.details import Details
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.kinds import FindingKind
from lazyviz.analysis.library import Stacks, no_stacks
from lazyviz.analysis.recompiles import PendingRecompile, Recompile
from lazyviz.trace.model import Frame, RunInfo
from lazyviz.trace.table import ExecutionTable

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class KindInfo:
    """How the report and the UI name a kind: a label of a few words, and the palette's
    colour role (tui.theme.Palette's field: miss, sync, fallback, info)."""

    kind: FindingKind
    label: str
    colour: str
    details: type[Details]  # the record its findings' details are
    # Kinds whose findings this one takes in where their executions are all its own (a
    # host call's work inside it: make_grid's copies are not a recompile of the user's).
    absorbs: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Finding:
    kind: FindingKind  # a plain str where a test or a reader made one: compared the same
    severity: str
    message: str
    frame: Frame | None
    executions: tuple[int, ...]
    fix: str = ""
    details: Details = field(default_factory=Details)  # the kind's own record (its module's)
    cost_ms: float = 0.0  # the sync time of the executions it points at: what ranks it
    short: str = ""  # the message in a few words, where it can be shorter (the UI's strip)
    uncut_syncs: int = 0  # its syncs that ran a graph a missing mark_step() left uncut

    def to_json(self) -> dict:
        return {
            "kind": self.kind, "severity": self.severity, "message": self.message,
            "site": self.frame.to_json() if self.frame else None,
            "executions": list(self.executions), "fix": self.fix, "details": self.details.to_json(),
            "cost_ms": round(self.cost_ms, 3), "uncut_syncs": self.uncut_syncs,
        }


@dataclass(frozen=True)
class RunFacts:
    """What finders read: the run's executions and what analysis already derived."""

    executions: ExecutionTable
    steps: int
    recompiles: list[Recompile | PendingRecompile]
    graphs: IRGraphs
    names: Mapping[str, str]  # the backend's names for the calls fixes mention (RunInfo.names)
    run: RunInfo | None = None  # how it ended: failed executions, the exception it raised
    quick: bool = False  # skip what parses every graph's IR (an unrolled loop's repeated block)
    stacks: Stacks = no_stacks  # an execution's Python stack by its stack id (the trace's)
