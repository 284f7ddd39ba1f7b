"""lazyviz: a debugger for lazy-tensor PyTorch programs.

From Python: `with lazyviz.trace("run.trace") as recorder:` records the code inside
(lazyviz.record.recorder.Recorder), and `recorder.run` is the analysed run. `lazyviz.open(path)`
reads a trace (lazyviz.trace.reader.Trace). In Jupyter: `%load_ext lazyviz`, then
`%%lazyviz` on a cell.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from lazyviz.errors import LazyvizError
from lazyviz.trace.reader import Trace, TraceError, open, open_ranks

if TYPE_CHECKING:
    from lazyviz.record.recorder import Recorder

__version__ = "0.1.0"
__all__ = ["LazyvizError", "Recorder", "Trace", "TraceError", "load_ipython_extension", "open", "open_ranks", "trace"]


# `lazyviz.trace` is this plain function: it is defined after the imports above have
# loaded the trace package (lazyviz/trace/), whose modules are imported by their full
# names (`from lazyviz.trace import open`).
def trace(path: str | os.PathLike[str] | None = None, *, capture: str = "full", backend: str | None = None,
          force: bool = False, source_lines: bool = True) -> Recorder:
    """Record lazy-tensor graph executions in this process into a trace file:

        with lazyviz.trace("run.trace", capture="light") as recorder:
            train()
        print(recorder.findings)

    Also a decorator (`@lazyviz.trace("run.trace")`) and, for callbacks,
    `recorder = lazyviz.trace(...).start()` ... `recorder.stop()`. See Recorder."""
    from lazyviz.record.recorder import Recorder

    return Recorder(path, capture=capture, backend=backend, force=force, source_lines=source_lines)


def load_ipython_extension(shell: Any) -> None:
    """`%load_ext lazyviz`: the %lazyviz and %%lazyviz magics."""
    from lazyviz.ipython import register

    register(shell)


def __getattr__(name: str) -> Any:
    # The recorder (and the analysis it hands its run to) loads when first asked: a command
    # that only reads a trace starts a tenth of a second sooner without it.
    if name == "Recorder":
        from lazyviz.record.recorder import Recorder

        return Recorder
    raise AttributeError(f"module 'lazyviz' has no attribute {name!r}")
