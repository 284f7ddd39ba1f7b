"""IR graphs as Graphviz DOT, and SVG through the `dot` program.

Large graphs stay readable and fast: above `max_nodes`, runs of a repeated block
collapse into one node, then inputs are folded away, then nodes are grouped by the
line that built them (or, without source lines, consecutive nodes together); every step
is said in the drawing's title. With a diff, origins of a change and the nodes it was
carried to are coloured apart, with a key."""
from __future__ import annotations

import html
import math
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field

from lazyviz.analysis.blocks import repeated_block
from lazyviz.analysis.ir import IRGraph, Node
from lazyviz.analysis.recompiles import Recompile, explain_execution
from lazyviz.analysis.run import Run
from lazyviz.errors import LazyvizError
from lazyviz.export import Renderer, RenderOptions
from lazyviz.export.graph_text import execution_graph, require_ir
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


@dataclass(frozen=True)
class Marks:
    """What a diff marks: where a change came in, and the nodes it was carried to."""

    origins: frozenset[str] = frozenset()
    propagated: frozenset[str] = frozenset()
    consumed: frozenset[str] = frozenset()  # the values a fallback op took to the CPU
    fallback: str = ""  # that op

    def __bool__(self) -> bool:
        return bool(self.origins or self.propagated)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.origins or node_id in self.propagated


ORIGIN_FILL, PROPAGATED_FILL, INPUT_FILL = "#ff8a8a", "#ffe0e0", "#dbe9ff"
OUTPUT_FILL, CONSUMED_FILL = "#d9f2d9", "#ead7ff"
LABELS = ("op", "source")  # what a box shows besides op and type: nothing more, or the line that built it


def _label(node: Node, label: str = "op") -> str:
    attrs = [f"{k}={v}" for k, v in node.attrs.items() if k in KEY_ATTRS]
    lines = [f"{node.id} {node.op}", node.type_text or "-"]
    if attrs:
        lines.append(", ".join(attrs)[:60])
    if label == "source" and node.location:
        lines.append(node.source_line)
    return "\n".join(lines)


def _style(node: Node, marks: Marks) -> str:
    # Inputs keep their shape when marked: a changed input still reads as an input.
    if node.is_input:
        scalar = all(not t.shape for t in node.outputs)
        shape = 'shape=note, style=filled' if scalar else 'shape=box, style="filled,rounded"'  # scalar: a Python number
        fill, line = ("#f2f2f2", "#999999") if scalar else (INPUT_FILL, "#4a78c2")
    else:
        shape, fill, line = "shape=box, style=filled", "#ffffff", "#000000"
        if node.root is not None:
            shape, fill, line = 'shape=box, style="filled,bold"', OUTPUT_FILL, "#2e8b2e"
    if node.id in marks.consumed:
        fill, line = CONSUMED_FILL, "#8250df"
        shape += ", penwidth=2.5"
    if node.id in marks.origins:
        fill, line = ORIGIN_FILL, "#c00000"
        shape += ", penwidth=2.5"
    elif node.id in marks.propagated:
        fill, line = PROPAGATED_FILL, "#e06666"
    tooltip = f"built at {node.source_line}" if node.location else node.op
    return f'{shape}, fillcolor="{fill}", color="{line}", tooltip={_quote(tooltip)}'


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
        if not frontier:
            break  # nothing new within reach: a larger depth adds nothing
    return keep


def plan(graph: IRGraph, highlight: Marks = Marks(), keep: set[str] | None = None,
         max_nodes: int = MAX_NODES, label: str = "op") -> Drawing:
    """What to draw of a graph (or of the nodes in `keep`): a box per node while they fit
    in max_nodes; past that, in turn, a repeated block collapsed into one box, the inputs
    hidden, and the rest grouped by the line that built them (or in runs of nodes). Each
    step taken is noted for the drawing's title."""
    nodes = [n for n in graph.nodes if keep is None or n.id in keep]
    drawing = Drawing()
    box_of: dict[str, str] = {n.id: n.id for n in nodes}  # node -> its box ("": hidden)
    if keep is not None:
        drawing.notes.append(f"neighbourhood: {len(nodes)} of {len(graph)} nodes")
    if len(nodes) > max_nodes:
        _collapse_repeats(nodes, box_of, drawing)
    if len({box_of[n.id] for n in nodes}) > max_nodes:
        _hide_inputs(nodes, box_of, drawing, highlight)
    remaining = [n for n in nodes if box_of[n.id] == n.id]
    others = len({box_of[n.id] for n in nodes if box_of[n.id]}) - len(remaining)  # boxes made above
    if len(remaining) + others > max_nodes:
        _group(remaining, others, max_nodes, box_of, drawing, highlight)
    for node in nodes:
        if box_of[node.id] == node.id:
            drawing.boxes[node.id] = (_label(node, label), _style(node, highlight))
    for node in nodes:
        target = box_of[node.id]
        for operand in node.operands:
            source = box_of.get(node.operand_node(operand))
            if source and target and source != target:
                drawing.edges.add((source, target))
    return drawing


def _collapse_repeats(nodes: list[Node], box_of: dict[str, str], drawing: Drawing) -> None:
    """A block of ops repeated back to back (a model's layers) as one box."""
    body = [n for n in nodes if not n.is_input]
    found = repeated_block([n.op for n in body])
    if found is None:
        return
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


def _hide_inputs(nodes: list[Node], box_of: dict[str, str], drawing: Drawing, highlight: Marks) -> None:
    """Device data feeding the graph, unless a change marks it."""
    inputs = [n for n in nodes if n.is_input and n.id not in highlight]
    for node in inputs:
        box_of[node.id] = ""
    drawing.notes.append(f"hid {len(inputs)} inputs (device data)")


def _group(remaining: list[Node], others: int, max_nodes: int, box_of: dict[str, str], drawing: Drawing,
           highlight: Marks) -> None:
    """The nodes still in boxes of their own, grouped. Where the IR names the line that
    built each node, one box per line is one per layer of the user's model (a backward
    pass is the line that called backward()); otherwise consecutive nodes share a box."""
    by_line: dict[str, list[Node]] = {}
    for node in remaining:
        by_line.setdefault(node.source_line or "no source line", []).append(node)
    if len(by_line) > 1 and len(by_line) + others <= max_nodes:
        groups = [(f"line {line}", f"{line} ({len(members)} nodes)", members) for line, members in by_line.items()]
        drawing.notes.append(f"grouped the other nodes by the line that built them ({len(by_line)} lines)")
    else:
        size = math.ceil(len(remaining) / max(1, max_nodes - others))
        groups = [(f"chunk{offset}", f"{chunk[0].id} .. {chunk[-1].id} ({len(chunk)} nodes)", chunk)
                  for offset in range(0, len(remaining), size)
                  for chunk in [remaining[offset:offset + size]]]
        drawing.notes.append(f"grouped the other nodes {size} at a time, in graph order")
    for group, title, members in groups:
        ops = Counter(n.op.split("::")[-1] for n in members).most_common(3)
        for node in members:
            box_of[node.id] = group
        fill = (CONSUMED_FILL if any(n.id in highlight.consumed for n in members) else
                ORIGIN_FILL if any(n.id in highlight.origins for n in members) else
                PROPAGATED_FILL if any(n.id in highlight for n in members) else "#eeeeee")
        drawing.boxes[group] = (title + "\n" + ", ".join(f"{op} x{k}" for op, k in ops),
                                f'shape=box, style=filled, fillcolor="{fill}"')


def _heading(lines: list[str], marks: Marks) -> str:
    """The drawing's title as a Graphviz HTML label: its first line large, the rest (and
    what collapsing did) as a note in small print, then the key to the colours shown."""
    title = html.escape(lines[0]) if lines else ""
    note = "<br/>".join(html.escape(line) for line in lines[1:])
    keys = [(INPUT_FILL, "input (device data)"), (OUTPUT_FILL, "graph output")]
    if marks:
        keys = [(ORIGIN_FILL, "origin of the change"), (PROPAGATED_FILL, "changed through its inputs"), *keys]
    if marks.consumed:
        keys.insert(0, (CONSUMED_FILL, f"taken to the CPU by the fallback {marks.fallback}"))
    key = "".join(f'<td bgcolor="{fill}" border="1">{html.escape(text)}</td>' for fill, text in keys)
    rows = f'<tr><td><font point-size="16">{title}</font></td></tr>'
    if note:
        rows += f'<tr><td><font point-size="10" color="#555555">{note}</font></td></tr>'
    rows += f'<tr><td><table border="0" cellspacing="4"><tr>{key}</tr></table></td></tr>'
    return f'<<table border="0">{rows}</table>>'


def to_dot(graph: IRGraph, title: str, highlight: Marks | set[str] = Marks(), keep: set[str] | None = None,
           max_nodes: int = MAX_NODES, label: str = "op") -> str:
    marks = highlight if isinstance(highlight, Marks) else Marks(frozenset(highlight))
    drawing = plan(graph, marks, keep, max_nodes, label)
    lines = [
        "digraph lazyviz {",
        f"  graph [label={_heading([*title.splitlines(), *drawing.notes], marks)}, labelloc=t, "
        "fontname=Helvetica, rankdir=TB];",
        '  node [fontname="Helvetica", fontsize=10];',
        '  edge [color="#666666", arrowsize=0.6];',
    ]
    for box, (label, style) in drawing.boxes.items():
        lines.append(f"  {_quote(box)} [label={_quote(label)}, {style}];")
    for source, target in sorted(drawing.edges):
        lines.append(f"  {_quote(source)} -> {_quote(target)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def execution_dot(graph: IRGraph | None, execution: Execution, explained: Recompile | None = None,
                  diff_requested: bool = False, around: str | None = None, depth: int = 2,
                  max_nodes: int = MAX_NODES, label: str = "op") -> str:
    """The drawing of one execution's graph, as `export`, the UI and the HTML report all
    request it: titled, marked against `explained`'s closest graph, optionally only the
    neighbourhood of one node. graph: the execution's graph, parsed (IRGraphs.parsed)."""
    if graph is None:
        raise ExportError(f"cannot read the IR of graph {execution.graph}")
    origins = propagated = frozenset()
    if explained is not None and explained.diff is not None:
        origins = frozenset(c.node for c in explained.diff.origins if c.node)
        propagated = frozenset(explained.diff.changed_nodes - origins)
    # A fallback syncs the values its op needs on the CPU: this graph's outputs.
    consumed = frozenset(n.id for n in graph.nodes if n.root is not None and execution.cause == "fallback")
    marks = Marks(origins, propagated, consumed, (execution.detail or "op") if consumed else "")
    keep = neighbourhood(graph, around, depth) if around else None
    return to_dot(graph, drawing_title(execution, explained, diff_requested), marks, keep, max_nodes, label)


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

    def render(self, run: Run, options: RenderOptions) -> str:
        execution, graph = execution_graph(run, options)
        require_ir(run, graph)
        explained = explain_execution(run.executions, run.ir_texts, execution.index) if options.diff else None
        return execution_dot(run.ir_texts.parsed(execution.graph), execution, explained, options.diff, options.around,
                             options.depth, options.max_nodes, options.label)


class SvgRenderer(DotRenderer):
    name = "svg"

    def render(self, run: Run, options: RenderOptions) -> str:
        return render_svg(super().render(run, options))
