"""The UI's semantic colours, in one place. Hex colours, not ANSI names: under Textual's
default theme ANSI red and magenta both render as rgb(244,0,95), so a miss and a
fallback looked the same. Each is also an exact xterm-256 colour (203, 177, 221, 78,
245), so tmux without truecolor keeps them apart."""
from __future__ import annotations

from rich.style import Style

MISS_COLOR = "#ff5f5f"
FALLBACK_COLOR = "#d787ff"
SYNC_COLOR = "#ffd75f"  # a cause other than mark_step: item, print, cpu...
HIT_COLOR = "#5fd787"
MUTED_COLOR = "#8a8a8a"

MISS = Style(color=MISS_COLOR, bold=True)
FALLBACK = Style(color=FALLBACK_COLOR, bold=True)
OTHER_CAUSE = Style(color=SYNC_COLOR, bold=True)
HIT = Style(color=HIT_COLOR)
MUTED = Style(color=MUTED_COLOR)

SEVERITY = {"error": f"bold {MISS_COLOR}", "warning": f"bold {SYNC_COLOR}", "info": "#5fafd7"}
KIND = {"fallback": FALLBACK_COLOR, "recompile": MISS_COLOR, "dynamic_shape": MISS_COLOR,
        "extra_sync": SYNC_COLOR, "missing_mark_step": SYNC_COLOR, "failed_execution": MISS_COLOR, "crash": MISS_COLOR}
