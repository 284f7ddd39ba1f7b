"""IR graphs as Graphviz DOT, and SVG through the `dot` program.

Large graphs stay readable and fast: above `max_nodes`, runs of a repeated block
collapse into one node, then inputs are folded away, then consecutive nodes are
grouped; every step is said in the drawing's title."""
from __future__ import annotations

import math
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field

from lazyviz.analysis.findings import repeated_block
from lazyviz.analysis.ir import IRGraph, Node, parsed
from lazyviz.analysis.recompiles import Recompile
from lazyviz.errors import LazyvizError
from lazyviz.export import Renderer, RenderRequest
from lazyviz.present import drawing_title
from lazyviz.trace.model import Execution

MAX_NODES = 300
KEY_ATTRS = ("dim", "size", "p", "dims", "index", "value", "dtype", "eps", "keepdim", "alpha")


class ExportError(LazyvizError):
    """One line for the user."""


@dataclass
class Drawing:
    """What will be drawn: boxes (a node or a collapsed group) and edges between them."""

    boxes: dict[str, tuple[str, str]] = field(default_factory=dict)  # box id -> (label, style)
    edges: set[tuple[str, str]] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)


def _quote(text: str) -> str:
    """A DOT string literal: the label text stays text, whatever it holds."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _label(node: Node) -> str:
    attrs = [f"{k}={v}" for k, v in node.attrs.items() if k in KEY_ATTRS]
    lines = [f"{node.id} {node.op}", node.type_text or "-"]
    if attrs:
        lines.append(", ".join(attrs)[:60])
    return "\n".join(lines)


def _style(node: Node, highlight: set[str]) -> str:
    if node.id in highlight:
        return 'shape=box, style="filled,bold", fillcolor="#ffb3b3", color="#c00000"'
    if node.is_input:
        scalar = all(not t.shape for t in node.outputs)
        if scalar:  # a Python number that became device data
            return 'shape=note, style=filled, fillcolor="#f2f2f2", color="#999999"'
        return 'shape=box, style="filled,rounded", fillcolor="#dbe9ff", color="#4a78c2"'
    if node.root is not None:
        return 'shape=box, style="filled,bold", fillcolor="#d9f2d9", color="#2e8b2e"'
    return 'shape=box, style=filled, fillcolor="#ffffff"'


def neighbourhood(graph: IRGraph, center: str, depth: int) -> set[str]:
    """Node ids within `depth` edges of `center`, both directions."""
    if center not in graph.by_id:
        raise ExportError(f"no node {center} in this graph (it has %0 to {graph.nodes[-1].id if graph.nodes else '-'})")
    users = graph.users()
    keep, frontier = {center}, {center}
    for _ in range(depth):
        nxt: set[str] = set()
        for node_id in frontier:
            nxt.update(graph.by_id[node_id].operand_node(o) for o in graph.by_id[node_id].operands)
            nxt.update(users.get(node_id, []))
        frontier = nxt - keep
        keep |= nxt
    return keep


def plan(graph: IRGraph, highlight: set[str] = frozenset(), keep: set[str] | None = None,
         max_nodes: int = MAX_NODES) -> Drawing:
    nodes = [n for n in graph.nodes if keep is None or n.id in keep]
    drawing = Drawing()
    box_of: dict[str, str] = {n.id: n.id for n in nodes}
    if keep is not None:
        drawing.notes.append(f"neighbourhood: {len(nodes)} of {len(graph)} nodes")

    if len(nodes) > max_nodes:
        body = [n for n in nodes if not n.is_input]
        found = repeated_block([n.op for n in body])
        if found is not None:
            block, repeats, start = found
            run = body[start:start + len(block) * repeats]
            group = f"repeat{start}"
            for node in run:
                box_of[node.id] = group
            drawing.boxes[group] = (
                f"{repeats} x [{', '.join(block)}]\n{run[0].id} .. {run[-1].id}",
                'shape=box3d, style=filled, fillcolor="#fff2cc", color="#b38f00"',
            )
            drawing.notes.append(f"collapsed {len(run)} nodes: [{', '.join(block)}] repeated {repeats} times")
    if len({box_of[n.id] for n in nodes}) > max_nodes:
        inputs = [n for n in nodes if n.is_input and n.id not in highlight]
        for node in inputs:
            box_of[node.id] = ""
        drawing.notes.append(f"hid {len(inputs)} inputs (device data)")
    remaining = [n for n in nodes if box_of[n.id] == n.id]
    groups_left = len({box_of[n.id] for n in nodes if box_of[n.id]})
    if groups_left > max_nodes:
        size = math.ceil(len(remaining) / max(1, max_nodes - (groups_left - len(remaining))))
        for offset in range(0, len(remaining), size):
            chunk = remaining[offset:offset + size]
            group = f"chunk{offset}"
            ops = Counter(n.op.split("::")[-1] for n in chunk).most_common(3)
            for node in chunk:
                box_of[node.id] = group
            marked = any(n.id in highlight for n in chunk)
            drawing.boxes[group] = (
                f"{chunk[0].id} .. {chunk[-1].id} ({len(chunk)} nodes)\n" + ", ".join(f"{op} x{k}" for op, k in ops),
                'shape=box, style=filled, fillcolor="#ffb3b3"' if marked else 'shape=box, style=filled, fillcolor="#eeeeee"',
            )
        drawing.notes.append(f"grouped the other nodes {size} at a time, in graph order")

    for node in nodes:
        if box_of[node.id] == node.id:
            drawing.boxes[node.id] = (_label(node), _style(node, highlight))
    for node in nodes:
        target = box_of[node.id]
        for operand in node.operands:
            source = box_of.get(node.operand_node(operand))
            if source and target and source != target:
                drawing.edges.add((source, target))
    return drawing


def to_dot(graph: IRGraph, title: str, highlight: set[str] = frozenset(), keep: set[str] | None = None,
           max_nodes: int = MAX_NODES) -> str:
    drawing = plan(graph, set(highlight), keep, max_nodes)
    heading = "\n".join([title, *drawing.notes])
    lines = [
        "digraph lazyviz {",
        f"  graph [label={_quote(heading)}, labelloc=t, fontname=Helvetica, rankdir=TB];",
        '  node [fontname="Helvetica", fontsize=10];',
        '  edge [color="#666666", arrowsize=0.6];',
    ]
    for box, (label, style) in drawing.boxes.items():
        lines.append(f"  {_quote(box)} [label={_quote(label)}, {style}];")
    for source, target in sorted(drawing.edges):
        lines.append(f"  {_quote(source)} -> {_quote(target)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def execution_dot(ir_text: str, execution: Execution, explained: Recompile | None = None,
                  diff_requested: bool = False, around: str | None = None, depth: int = 2,
                  max_nodes: int = MAX_NODES) -> str:
    """The drawing of one execution's graph, as `export`, the UI and the HTML report all
    request it: titled, marked against `explained`'s closest graph, optionally only the
    neighbourhood of one node."""
    graph = parsed(ir_text)
    if graph is None:
        raise ExportError(f"cannot read the IR of graph {execution.graph}")
    highlight = explained.diff.changed_nodes if explained is not None and explained.diff is not None else set()
    keep = neighbourhood(graph, around, depth) if around else None
    return to_dot(graph, drawing_title(execution, explained, diff_requested), highlight, keep, max_nodes)


def dot_program() -> str:
    found = shutil.which("dot")
    if found is None:
        raise ExportError(
            "Graphviz's `dot` program is not installed: apt-get install graphviz "
            "(Debian/Ubuntu), brew install graphviz (macOS) or conda install graphviz"
        )
    return found


def render_svg(dot_text: str, timeout: float = 120) -> str:
    try:
        result = subprocess.run([dot_program(), "-Tsvg"], input=dot_text, capture_output=True,
                                text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ExportError(f"dot took over {timeout:.0f} s; try --max-nodes or --around") from None
    if result.returncode != 0:
        raise ExportError(f"dot failed: {result.stderr.strip().splitlines()[0] if result.stderr.strip() else result.returncode}")
    return result.stdout


class DotRenderer(Renderer):
    name = "dot"
    needs_execution = True

    def render(self, request: RenderRequest) -> str:
        from lazyviz.analysis.recompiles import explain_execution
        from lazyviz.export.graph_text import execution_graph, require_ir

        execution, graph = execution_graph(request)
        ir_text = require_ir(request, graph)
        data = request.data
        explained = explain_execution(data.executions, data.ir_texts, execution.index) if request.diff else None
        return execution_dot(ir_text, execution, explained, request.diff, request.around, request.depth,
                             request.max_nodes)


class SvgRenderer(DotRenderer):
    name = "svg"

    def render(self, request: RenderRequest) -> str:
        return render_svg(super().render(request))
