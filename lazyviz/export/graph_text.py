"""One execution's graph as text: the IR, or the backend's code for it."""
from __future__ import annotations

from lazyviz.errors import LazyvizError
from lazyviz.export import Renderer, RenderRequest
from lazyviz.trace.model import Execution, Graph


def execution_graph(request: RenderRequest) -> tuple[Execution, Graph]:
    if request.execution is None:
        raise LazyvizError("this format draws one execution: give --execution N")
    execution = request.data.trace.execution(request.execution)
    graph = request.data.trace.graph(execution.graph)
    if graph is None:
        raise LazyvizError(f"graph {execution.graph} of execution {execution.index} is not in the trace")
    return execution, graph


def require_ir(request: RenderRequest, graph: Graph) -> str:
    if not graph.ir_text:
        raise LazyvizError(f"{request.data.path} has no IR text (recorded with --capture light)")
    return graph.ir_text


class IrRenderer(Renderer):
    name = "ir"
    needs_execution = True

    def render(self, request: RenderRequest) -> str:
        return require_ir(request, execution_graph(request)[1])


class BackendRenderer(Renderer):
    name = "backend"
    needs_execution = True

    def render(self, request: RenderRequest) -> str:
        return execution_graph(request)[1].backend_text
