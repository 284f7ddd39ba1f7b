"""torch.compile(backend="openxla") as the XLA backend reads it. Dynamo traces the
module into an FX graph; torch_xla's bridge (torch_xla/_dynamo/dynamo_bridge.py) syncs
once as it traces, compiles the FX graph to one XLA graph ahead of its first run
(`_xla_warm_up_cache`: a cache lookup with a Compilation Analysis and no execution),
then runs it at each call of the compiled module (`_run_cached_graph`: an Execution
Analysis "dynamo is executing a compiled program" and no cache lookup). Checked on
torch_xla 2.9 with torch 2.9.

Why dynamo traced again (a new input shape, a new dtype) is what `TORCH_LOGS=recompiles`
prints: dynamo keeps it with each compile's metrics (`recompile_reason`), read here
without turning its logs on."""
from __future__ import annotations

import re
import sys

RUN_CALL = "_run_cached_graph"  # the bridge's run of a compiled graph, on torch_xla._XLAC
WARM_UP_CALL = "_xla_warm_up_cache"  # its compile ahead of the first run
RUN_CAUSE = "dynamo is executing a compiled program"  # XLA's analysis of that run
COMPILE_CAUSE = "dynamo is compiling a FX graph to HLO"  # and of that compile
# The bridge's own syncs as it traces, by its function calling torch_xla.sync().
TRACING_SYNCS = {name: "torch.compile's XLA bridge, syncing once as it traces"
                 for name in ("extract_graph_helper", "extract_compiled_graph_helper")}


_FRAME_ID = re.compile(r"^\d+/\d+: ")


def runs_pending_inputs(frames: list[tuple[str, int, str]]) -> bool:
    """XLA's frames of a read of values inside the bridge's call of a compiled graph: it
    runs the module's inputs still pending first (`_xla_sync_multi`), an execution of
    their own at every call."""
    return any(function == "optimized_mod" and file.endswith("dynamo_bridge.py") for file, _, function in frames)


class RecompileReasons:
    """Dynamo's reasons for tracing again, each read once, in order."""

    def __init__(self) -> None:
        self._last: object | None = None  # the last compile's metrics read

    def new(self) -> list[str]:
        """The reasons of the compiles dynamo finished since the last call ("" for a first
        compile). Nothing where dynamo was never imported."""
        utils = sys.modules.get("torch._dynamo.utils")
        if utils is None or not hasattr(utils, "get_compilation_metrics"):
            return []
        metrics = utils.get_compilation_metrics()  # its last 64 compiles (a deque's copy)
        start = next((n + 1 for n in range(len(metrics) - 1, -1, -1) if metrics[n] is self._last), 0)
        if metrics:
            self._last = metrics[-1]
        # Dynamo numbers its frames and compiles ("0/1: "): not the user's words.
        return [_FRAME_ID.sub("", getattr(entry, "recompile_reason", None) or "") for entry in metrics[start:]]
