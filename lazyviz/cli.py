"""The `lazyviz` console script (see lazyviz.commands)."""
from __future__ import annotations

from lazyviz.commands import build_parser, main

__all__ = ["build_parser", "main"]
