"""One execution's graph as text: the IR, the backend's code for it, or the HLO XLA
compiled it to."""
from __future__ import annotations

from lazyviz.analysis.run import Run
from lazyviz.analysis.summary import split_hlo
from lazyviz.errors import LazyvizError
from lazyviz.export import Renderer, RenderOptions
from lazyviz.trace.model import Execution, Graph


def execution_graph(run: Run, options: RenderOptions) -> tuple[Execution, Graph]:
    if options.execution is None:
        raise LazyvizError("this format draws one execution: give --execution N")
    execution = run.execution(options.execution)
    graph = run.graph(execution.graph)
    if graph is None:
        raise LazyvizError(f"graph {execution.graph} of execution {execution.index} is not in the trace")
    return execution, graph


def require_ir(run: Run, graph: Graph) -> str:
    if not graph.ir_text:
        raise LazyvizError(f"{run.path} has no IR text (recorded with --capture light)")
    return graph.ir_text


class IrRenderer(Renderer):
    name = "ir"
    needs_execution = True

    def render(self, run: Run, options: RenderOptions) -> str:
        return require_ir(run, execution_graph(run, options)[1])


class BackendRenderer(Renderer):
    name = "backend"
    needs_execution = True

    def render(self, run: Run, options: RenderOptions) -> str:
        return execution_graph(run, options)[1].backend_text


class HloRenderer(Renderer):
    name = "hlo"
    needs_execution = True

    def render(self, run: Run, options: RenderOptions) -> str:
        execution, graph = execution_graph(run, options)
        hlo = split_hlo(graph.backend_text)[1]
        if hlo:
            # The module alone, as XLA's own tools read it: not lazyviz's line naming it.
            return hlo[hlo.index("HloModule "):]
        if not run.info.capabilities.hlo:
            raise LazyvizError(f"{run.path} was recorded on the {run.info.backend} backend, whose graphs have "
                               "no HLO (PyTorch/XLA's have)")
        raise LazyvizError(f"XLA dumped no HLO for graph {graph.id} of execution {execution.index} (compiled "
                           "without a Python frame, in a launched process, or your XLA_FLAGS had --xla_dump_to)")
