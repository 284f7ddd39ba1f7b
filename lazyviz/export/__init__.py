"""Renderers from trace data to text and files, and their registry.

Every renderer takes one analysed Run (lazyviz.analysis.run: the trace's parts, read
once on first use, and their analysis, computed once) and the RenderOptions (for the
graph formats, which execution and how to draw it), and returns text. A new format is
one module with a Renderer subclass plus one line in REPORT_FORMATS or EXPORT_FORMATS
below; `--format` names it and `-o`'s suffix picks it.
"""
from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from lazyviz.analysis.run import Run
from lazyviz.errors import LazyvizError


@dataclass
class RenderOptions:
    execution: int | None = None  # the graph formats draw one execution
    diff: bool = False  # mark what changed since the closest earlier graph
    around: str | None = None  # only this node's neighbourhood
    depth: int = 2
    max_nodes: int = 300
    label: str = "op"  # "source": each box also names the line that built it
    all_findings: bool = False  # reports: every finding, not the top groups


class Renderer:
    name: ClassVar[str]
    for_people: ClassVar[bool] = False  # text for a terminal: control characters are escaped
    needs_execution: ClassVar[bool] = False

    def render(self, run: Run, options: RenderOptions) -> str:
        raise NotImplementedError

    def stream(self, run: Run, options: RenderOptions) -> Iterator[str]:
        """The text in pieces, for output that need not be held whole (a long run's JSON)."""
        yield self.render(run, options)


@dataclass(frozen=True)
class Entry:
    suffixes: tuple[str, ...]
    target: str  # "module:Class", imported when used


# `lazyviz report --format NAME`: the whole run.
REPORT_FORMATS = {
    "text": Entry((".txt",), "lazyviz.export.report:TextRenderer"),
    "json": Entry((".json",), "lazyviz.export.report:JsonRenderer"),
    "markdown": Entry((".md", ".markdown"), "lazyviz.export.markdown:MarkdownRenderer"),
    "html": Entry((".html", ".htm"), "lazyviz.export.html:HtmlRenderer"),
}
# `lazyviz export --format NAME`: one execution's graph, or the run's timeline.
EXPORT_FORMATS = {
    "svg": Entry((".svg",), "lazyviz.export.graphviz:SvgRenderer"),
    "dot": Entry((".dot", ".gv"), "lazyviz.export.graphviz:DotRenderer"),
    "ir": Entry((".ir",), "lazyviz.export.graph_text:IrRenderer"),
    "backend": Entry((".ts",), "lazyviz.export.graph_text:BackendRenderer"),
    "hlo": Entry((".hlo",), "lazyviz.export.graph_text:HloRenderer"),
    "chrome": Entry((".json",), "lazyviz.export.chrome:ChromeRenderer"),
}


def renderer_for(formats: dict[str, Entry], name: str | None, output: str | None, default: str) -> Renderer:
    """The renderer --format names, else the one -o's suffix picks, else the default."""
    if name is None:
        suffix = Path(output or "").suffix.lower()
        name = next((n for n, entry in formats.items() if suffix and suffix in entry.suffixes), default)
    entry = formats.get(name)
    if entry is None:
        raise LazyvizError(f"unknown format {name!r} (known: {', '.join(formats)})")
    module, _, cls = entry.target.partition(":")
    return getattr(importlib.import_module(module), cls)()
