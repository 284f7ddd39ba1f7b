"""A host-side library call (torchvision's save_image, TensorBoard, matplotlib) handed a
lazy tensor: one finding at the user's call, with the `.cpu()` edit (analysis.host_calls
names the calls)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from lazyviz.analysis.findings.base import Details, Finding, FindingKind, KindInfo, RunFacts
from lazyviz.analysis.host_calls import ABSORBED_KINDS, host_calls
from lazyviz.analysis.library import Stacks
from lazyviz.trace.table import ExecutionTable


@dataclass(frozen=True, kw_only=True)
class HostCallDetails(Details):
    call: str  # the host-side function handed a lazy tensor (save_image)
    absorbed: tuple[str, ...] = ()  # kinds of finding its own work made, taken into it

    @property
    def subject(self) -> str:
        return self.call


def host_call_findings(table: ExecutionTable, stacks: Stacks) -> list[Finding]:
    """A host-side library call (save_image, SummaryWriter.add_image) handed a lazy tensor
    is one finding at the user's call: the fallbacks, recompiles and syncs its own work
    made are that finding's, whatever they were (make_grid's copy per image: KINDS' absorbs)."""
    findings = []
    for (frame, function), positions in host_calls([table.kind_at(p).stack_id for p in range(len(table))],
                                                   stacks).items():
        ops: Counter[str] = Counter()
        for p in positions:
            ops.update(table.kind_at(p).fallback_ops)
        inside = ", ".join(f"{op} x{count}" for op, count in ops.most_common(3))
        findings.append(Finding(
            FindingKind.HOST_CALL, "warning",
            f"{function}() works on the host and is handed a lazy tensor: {len(positions)} execution"
            f"{'s' * (len(positions) != 1)} run inside it{f' ({inside} fall back)' if inside else ''}, "
            f"{table.sum(table.sync_ms, positions):.0f} ms of sync",
            frame, table.indices(sorted(positions)),
            f"hand {function}() a tensor on the CPU, {function}(x.detach().cpu(), ...): the pending graph runs "
            "once and the call works on the host, as it was written to",
            HostCallDetails(call=function),
            short=f"{function}() given a lazy tensor ({len(positions)} executions inside it)"))
    return findings


KINDS = (KindInfo(FindingKind.HOST_CALL, "host call", "sync", HostCallDetails, absorbs=ABSORBED_KINDS),)


def find(facts: RunFacts) -> list[Finding]:
    return host_call_findings(facts.executions, facts.stacks)
