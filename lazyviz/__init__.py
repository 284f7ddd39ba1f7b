"""lazyviz: a debugger for lazy-tensor PyTorch programs."""
from __future__ import annotations

__version__ = "0.1.0"
