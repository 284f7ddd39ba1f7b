"""Executions the backend failed to compile or run: which graph, where the error points,
and the user's line behind it. Pure functions of trace data."""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from lazyviz.analysis.ir import IRGraph, Node, parsed
from lazyviz.trace.model import Failure

_ERROR_LINE = re.compile(r"^\s*(\w+(?:Error|Exception)): (.+)$")
# Ops whose kernels insist their tensor inputs share one dtype (TorchScript: "expected m1
# and m2 to have the same dtype").
_SAME_DTYPE_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul",
                             "aten::linear", "aten::convolution", "aten::addmv", "aten::mv", "aten::dot"})


def headline(error: str) -> str:
    """The line of a backend's message that says what went wrong: TorchScript wraps it
    ("The following operation failed in the TorchScript interpreter. ... RuntimeError:
    expected m1 and m2 to have the same dtype")."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    for line in reversed(lines):
        match = _ERROR_LINE.match(line)
        if match:
            return match.group(2)
    return lines[-1] if lines else "(no message)"


def promoted_scalars(graph: IRGraph) -> list[Node]:
    """Ops on 0-dim tensors only, one of them a Double (a Python number the lazy core
    made into device data), whose result the IR calls Float: eagerly a Python number
    never changes a tensor's dtype, but here it is a real 0-dim Double and type
    promotion makes the result Double at run time. Every later op on that result is
    Double too, until one that needs one dtype for all inputs (a matmul) fails."""
    suspects = []
    for node in graph.nodes:
        if node.is_input or not node.operands or not node.outputs:
            continue
        inputs = [graph.by_id[operand].outputs[0] for operand in node.operand_ids if graph.by_id[operand].outputs]
        if len(inputs) < 2 or any(t.shape for t in inputs) or node.outputs[0].dtype == "Double":
            continue
        if any(t.dtype == "Double" for t in inputs) and any(t.dtype in ("Float", "Half", "BFloat16") for t in inputs):
            suspects.append(node)
    return suspects


def first_same_dtype_use(graph: IRGraph, start: Node) -> Node | None:
    """The first op needing one dtype for its inputs that start's value reaches."""
    reached = {start.id}
    for node in graph.nodes[graph.nodes.index(start) + 1:]:
        if reached.intersection(node.operand_ids):
            if node.op in _SAME_DTYPE_OPS:
                return node
            reached.add(node.id)
    return None


def explain(failure: Failure, ir_text: str) -> tuple[str, str, dict]:
    """(what went wrong, what to do, details) for one failed execution."""
    what = headline(failure.error)
    graph = parsed(ir_text)
    details: dict = {"error": what}
    if graph is None or ("dtype" not in what and "scalar type" not in what):
        return what, ("the backend could not run this graph: the IR tab shows what it was given; run the step "
                      "on the CPU to see whether the same code fails eagerly"), details
    for suspect in promoted_scalars(graph):
        use = first_same_dtype_use(graph, suspect)
        if use is None:
            continue
        types = " x ".join(str(graph.by_id[o].outputs[0]) for o in suspect.operand_ids)
        built = f", built at {suspect.source_line}" if suspect.location else ""
        use_built = f" at {use.source_line}" if use.location else ""
        details.update(node=suspect.id, op=suspect.op, reaches=use.id, reaches_op=use.op,
                       built_at=suspect.source_line or None)
        return (f"{what}: {suspect.op} {suspect.id} ({types}{built}) computes in Double here, though the IR "
                f"says {suspect.outputs[0]}: both its inputs are 0-dim, so the Python number (a Double on the "
                f"device) decides the result's dtype; the Double reaches {use.op} {use.id}{use_built}"), (
            "multiply the Python number into a tensor that is not 0-dim (torch.sum(-0.5 * (...)) rather than "
            "-0.5 * torch.sum(...)), or make it a tensor of the right dtype on the device "
            "(torch.tensor(-0.5, dtype=torch.float32, device=...))"), details
    return what, ("an op got inputs of different dtypes: cast where the tensor is made, so every op sees "
                  "one dtype"), details


def failure_messages(failures: Sequence[Failure], ir_text_of: Mapping[int, str]) -> list[tuple[Failure, str, str, dict]]:
    """Each failure explained; ir_text_of: the IR of each failed execution's graph."""
    return [(failure, *explain(failure, ir_text_of.get(failure.execution, ""))) for failure in failures]
