"""The detail tabs, in one registry: what each shows and where its key comes from.

An execution panel turns the selected execution into text (off the UI thread) for a
CodeView; a run panel is a widget fed by the app as the trace grows. A new tab is one
class here (or one widget in tui/widgets/) plus one line in TABS; its number key and
its line in the help follow from its place in TABS.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from textual.containers import VerticalScroll
from textual.widget import Widget

from lazyviz.analysis.collectives import graph_rows
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.recompiles import Recompile, explain_execution
from lazyviz.analysis.summary import graph_memory, split_hlo
from lazyviz.present import collective_line, memory_text, readable_backend, readable_ir
from lazyviz.trace import Execution, Trace
from lazyviz.trace.table import ExecutionTable
from lazyviz.tui.details import counters_text, diff_text, stack_text
from lazyviz.tui.widgets.code_view import CodeView
from lazyviz.tui.widgets.findings import FindingsView
from lazyviz.tui.widgets.output import OutputView
from lazyviz.tui.widgets.step_chart import StepChart


@dataclass(frozen=True)
class DetailContext:
    """What panels may read for one selection: the open trace and snapshots of what the
    UI has read so far (the UI thread only appends to its own lists)."""

    trace: Trace
    executions: ExecutionTable
    graphs: IRGraphs  # the app's: each graph parsed once, however often it is selected
    raw: bool = False  # IR and backend text as recorded (the r key), not tidied


class ExecutionPanel:
    id: ClassVar[str]
    title: ClassVar[str]
    language: ClassVar[str] = "plain"
    placeholder: ClassVar[str] = ""
    about: ClassVar[str]  # one line for the help

    def text(self, execution: Execution, context: DetailContext) -> str:
        raise NotImplementedError


class IrPanel(ExecutionPanel):
    id, title, language, placeholder = "ir", "IR", "ir", "select an execution"
    about = "the graph's IR: one node per line, its shape, op and the line that built it (r: as recorded)"

    def text(self, execution: Execution, context: DetailContext) -> str:
        graph = context.trace.graph(execution.graph)
        ir = graph.ir_text if graph and graph.ir_text else ""
        if not ir:
            ir = "no IR recorded for this graph (capture light)"
        elif not context.raw:
            ir = readable_ir(ir)
        return f"# execution {execution.index}: graph {execution.graph}, {execution.nodes} nodes, {execution.cache}\n{ir}"


class BackendPanel(ExecutionPanel):
    id, title, language = "backend", "Backend", "torchscript"
    about = "the backend's code for the graph (TorchScript; on XLA, the HLO it compiled and what XLA reported)"

    def text(self, execution: Execution, context: DetailContext) -> str:
        graph = context.trace.graph(execution.graph)
        if not graph or not graph.backend_text:
            return "no backend text"
        if context.raw:
            return graph.backend_text
        memory = graph_memory(graph.backend_text)
        # One size a line: the pane may be 80 columns wide, and code lines do not wrap.
        figures = memory_text(memory)  # "" where XLA measured nothing
        head = "".join(f"#   {part}\n" for part in figures.split(", ")) if figures else ""
        report, hlo = split_hlo(graph.backend_text)
        if hlo:  # the code first; what XLA said when it compiled it after
            said = "".join(f"# {line}".rstrip() + "\n" for line in report.splitlines())
            body = f"{readable_backend(hlo).rstrip()}\n\n# what XLA said when it compiled it:\n{said}"
        else:
            body = readable_backend(report)
        rows = graph_rows(hlo, context.trace.run.annotations) if hlo else []
        moved = "".join(f"# {collective_line(row)}\n" for row in rows)
        # SPMD's collectives first: in a short pane they are what the graph is read for.
        return ((f"# collectives XLA put in (bytes each device sends per run of the graph):\n{moved}\n" if moved
                 else "") + (f"# memory after compiling:\n{head}\n" if head else "") + body)


class DiffPanel(ExecutionPanel):
    id, title, language = "diff", "Diff", "diff"
    about = "what changed since the closest earlier graph: ! origin, ~ carried, + added, - removed"

    def text(self, execution: Execution, context: DetailContext) -> str:
        recompile = explain_execution(context.executions, context.graphs, execution.index)
        return diff_text(execution, recompile, context.graphs, context.raw)


class StackPanel(ExecutionPanel):
    id, title, language = "stack", "Stack", "stack"
    about = "the Python stack that synced, your line marked, with its source"

    def text(self, execution: Execution, context: DetailContext) -> str:
        stack = context.trace.stack(execution.stack_id)
        return f"# {execution.detail or execution.cause} at {execution.site}\n" + stack_text(stack, execution.frame)


class CountersPanel(ExecutionPanel):
    id, title = "counters", "Counters"
    about = "the lazy core's counters that moved with this execution, and its timings"

    def text(self, execution: Execution, context: DetailContext) -> str:
        return counters_text(execution, context.executions)


class OpsPanel(ExecutionPanel):
    id, title = "ops", "Ops"
    about = "what the graph is made of: each op and how many times it appears"

    def text(self, execution: Execution, context: DetailContext) -> str:
        graph = context.graphs.parsed(execution.graph)
        if graph is None:
            return "no IR recorded for this graph (capture light)"
        counts = Counter(node.op for node in graph.nodes)
        lines = [f"# graph {execution.graph}: {len(graph)} nodes, {len(counts)} distinct ops"]
        lines += [f"{count:7d}  {op}" for op, count in counts.most_common()]
        return "\n".join(lines)


@dataclass(frozen=True)
class Tab:
    id: str
    title: str
    about: str
    make: Callable[[], Widget]
    panel: ExecutionPanel | None = None  # None: a run panel the app feeds itself


def _execution_tab(panel: ExecutionPanel) -> Tab:
    return Tab(panel.id, panel.title, panel.about,
               lambda: CodeView(panel.language, panel.placeholder, id=f"{panel.id}-view"), panel)


TABS: list[Tab] = [
    _execution_tab(IrPanel()),
    _execution_tab(BackendPanel()),
    _execution_tab(DiffPanel()),
    _execution_tab(StackPanel()),
    _execution_tab(CountersPanel()),
    Tab("findings", "Findings", "what the run so far says to fix, worst first",
        lambda: VerticalScroll(FindingsView(id="findings-view"))),
    Tab("timing", "Timing", "time per step, compiles marked", lambda: StepChart(id="timing-view")),
    Tab("output", "Output", "the script's own stdout and stderr", lambda: OutputView(id="output-view")),
    Tab("ranks", "Ranks", "a torchrun folder: which graphs each rank ran per step",
        lambda: CodeView("diff", "one process: no other ranks", id="ranks-view")),
    _execution_tab(OpsPanel()),
]
EXECUTION_PANELS = [tab.panel for tab in TABS if tab.panel is not None]


# The tabs that follow the selected row (explaining_tab); another tab the user chose stays.
AUTO_TABS = ("ir", "diff", "stack")


def explaining_tab(execution: Execution, recompile: Recompile | None) -> str:
    """The tab that says why this execution ran: Diff for a recompile, Stack for a
    fallback or a sync outside mark_step, IR otherwise."""
    if execution.is_miss and recompile is not None and recompile.closest is not None:
        return "diff"
    if execution.cause != "mark_step":
        return "stack"
    return "ir"


def tab_key(position: int) -> str:
    """1..9, then 0, then letters: every tab gets a key."""
    return str(position + 1) if position < 9 else "0" if position == 9 else "abcdeghijk"[position - 10]
