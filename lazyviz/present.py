"""How lazyviz shows things, computed once for every renderer (text, JSON, HTML, SVG
and the terminal UI): short paths and sites, the mark of each node in a diff, time per
step, divergence wording, and the request for a graph drawing. Pure functions."""
from __future__ import annotations

import os
from pathlib import Path

from lazyviz.analysis.diff import GraphDiff
from lazyviz.analysis.ranks import Divergence
from lazyviz.analysis.recompiles import Recompile
from lazyviz.trace.model import Execution, Frame


def short_path(file: str, cwd: str | None = None) -> str:
    """Relative to the run's folder (cwd) or else to the viewer's working directory when
    under one, `~/...` under the home directory, else as it is: one rule for every
    place a path is shown."""
    for folder in (cwd, os.getcwd()):
        if folder and file.startswith(folder.rstrip(os.sep) + os.sep):
            return file[len(folder.rstrip(os.sep)) + 1:]
    home = str(Path.home())
    if home not in ("", "/") and file.startswith(home + os.sep):
        return "~" + file[len(home):]
    return file


def plural(count: int, word: str) -> str:
    if count == 1:
        return f"{count} {word}"
    return f"{count} {word}es" if word.endswith("s") else f"{count} {word}s"


def site_text(frame: Frame | None, cwd: str | None = None) -> str:
    if frame is None:
        return "?"
    return frame.site if frame.file.startswith("In [") else f"{short_path(frame.file, cwd)}:{frame.line}"


# The mark of a node in a diff against the closest earlier graph. The origin of a
# change wins over what it carried to, whatever order the changes come in.
ORIGIN, CARRIED, ADDED = "origin", "carried", "added"


def diff_marks(diff: GraphDiff) -> dict[str, str]:
    marks: dict[str, str] = {}
    for change in diff.changes:
        if not change.node:
            continue
        mark = ADDED if change.kind == "op_added" else (ORIGIN if change.origin else CARRIED)
        if marks.get(change.node) != ORIGIN:
            marks[change.node] = mark
    return marks


def divergence_text(divergence: Divergence, cwd: str | None = None) -> str:
    where = f" at {site_text(divergence.frame, cwd)}" if divergence.frame else ""
    return divergence.message() + where


def drawing_title(execution: Execution, explained: Recompile | None = None, diff_requested: bool = False) -> str:
    """The title of a graph drawing: which execution, where, and against what it is marked."""
    title = (f"execution {execution.index}, step {execution.step}: {execution.detail or execution.cause} "
             f"at {site_text(execution.frame)}\ngraph {execution.graph}, {execution.nodes} nodes, "
             f"cache {execution.cache}")
    if execution.fallback_ops:
        title += "\nfallbacks: " + ", ".join(execution.fallback_ops)
    if explained is not None and explained.diff is not None:
        title += (f"\nred: {len(explained.diff.changed_nodes)} nodes changed since execution "
                  f"{explained.closest_execution} ({explained.headline()})")
    elif explained is not None and explained.new_graph:
        title += f"\n{explained.note}"
    elif diff_requested:
        title += "\n(no earlier graph to compare with)"
    return title
