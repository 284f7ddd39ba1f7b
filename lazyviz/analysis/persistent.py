"""PyTorch/XLA's persistent compile cache (torch_xla.runtime.initialize_cache): how a run
had each graph new to it, counted from the counter XLA moved at the graph's lookup
(Kind.persistent)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lazyviz.trace.model import Execution
from lazyviz.trace.table import ExecutionTable


@dataclass(frozen=True)
class PersistentCache:
    loaded: tuple[int, ...]  # executions whose graph came from the cache, not compiled
    not_cached: tuple[int, ...]  # compiled, and written to the cache
    load_failed: tuple[int, ...]  # in the cache, but XLA could not load it: compiled again

    def text(self) -> str:
        loaded = len(self.loaded)
        parts = [f"{loaded} graph{'s' if loaded != 1 else ''} loaded from it",
                 f"{len(self.not_cached)} compiled and written to it"]
        if self.load_failed:
            parts.append(f"{len(self.load_failed)} in it that XLA could not load, compiled again")
        return ", ".join(parts)

    def to_json(self) -> dict:
        return {"loaded": len(self.loaded), "not_cached": len(self.not_cached), "load_failed": len(self.load_failed)}


def persistent_cache(executions: Sequence[Execution]) -> PersistentCache | None:
    """Each graph new to the run, by how it was had; None without the cache."""
    table = ExecutionTable.of(executions)
    found = {state: table.indices(table.where(lambda kind, state=state: kind.persistent == state))
             for state in ("loaded", "not_cached", "load_failed")}
    if not any(found.values()):
        return None
    return PersistentCache(found["loaded"], found["not_cached"], found["load_failed"])
