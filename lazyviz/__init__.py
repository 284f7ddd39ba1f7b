"""lazyviz: a debugger for lazy-tensor PyTorch programs.

From Python: `with lazyviz.trace("run.trace"):` records the code inside (see
lazyviz.session.Session); `lazyviz.trace.open("run.trace")` reads a trace. In Jupyter:
`%load_ext lazyviz`, then `%%lazyviz` on a cell.
"""
from __future__ import annotations

from typing import Any

from lazyviz import trace
from lazyviz.errors import LazyvizError

__version__ = "0.1.0"
__all__ = ["LazyvizError", "Session", "load_ipython_extension", "trace"]


def __getattr__(name: str) -> Any:
    if name == "Session":  # imported on use: reading traces never loads the tracer
        from lazyviz.session import Session

        return Session
    raise AttributeError(f"module 'lazyviz' has no attribute {name!r}")


def load_ipython_extension(shell: Any) -> None:
    """`%load_ext lazyviz`: the %lazyviz and %%lazyviz magics."""
    from lazyviz.ipython import register

    register(shell)
