"""Executions the backend failed to compile or run: which graph, where the error points,
and the user's line behind it. Pure functions of trace data."""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, replace

from lazyviz.analysis.details import Details
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.ir import IRGraph, Node
from lazyviz.analysis.memory import when
from lazyviz.analysis.units import size_text
from lazyviz.trace.model import Failure, Frame, RunInfo, first_sentence
from lazyviz.trace.table import ExecutionTable

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


@dataclass(frozen=True, kw_only=True)
class FailureDetails(Details):
    """What went wrong, a failed execution's (failed_execution) or the script's raise
    (crash): the error's line, and what lazyviz traced it to, where it could."""

    error: str  # the error's first line (a backend's: the line that says what went wrong)
    graph: str | None = None  # the failed execution's graph
    raised_at: str | None = None  # the line that raised (file:line)
    op: str | None = None  # the op it traced the error to
    node: str | None = None  # that op's IR node ("%12")
    call: str | None = None  # the call the op ran in (LSTMCell.forward)
    execution: int | None = None  # the execution the op's fallback forced
    op_line: str | None = None  # where the op was called, when not where it raised
    bytes: int | None = None  # the allocation the device could not make
    tensor: str | None = None  # that tensor's type (Float[4096, 4096])
    built_at: str | None = None  # the user's line that built the node
    reaches: str | None = None  # a hidden Double: the node it reaches, and its op
    reaches_op: str | None = None
    used_at: str | None = None  # the line of the named op's first use (XLA names a wrapper's line)
    module: str | None = None  # "recurrent": torch's LSTM/GRU/RNN took the sequence apart
    no_storage: bool = False  # a lazy tensor read for its host storage (torch.save, numpy())
    sparse: bool = False  # a sparse tensor made on, or moved to, a device that has no sparse layout
    # A slice bound past the dimension's start (`x[:, -8:]` of 6 columns): eager PyTorch
    # clamps it, PyTorch/XLA raises; the bound it got and the range it allows.
    slice_bound: tuple[int, int, int] | None = None
    unsafe_global: str | None = None  # the class torch.load's weights_only refused
    on_cpu: tuple[str, ...] = ()  # the CPU tensors the frame that raised held beside lazy ones

    @property
    def subject(self) -> str:
        return self.op or ""


def explain(failure: Failure, graph: IRGraph | None) -> tuple[str, str, FailureDetails]:
    """(what went wrong, what to do, details) for one failed execution: the device's
    memory, a dtype the IR hides, or the op the message names, in that order."""
    # An error with no words ("."): said as the backend gave it, never an empty sentence.
    what = headline(failure.error).rstrip(".") or f"the backend failed with {failure.error.strip()!r}"
    details = FailureDetails(error=what)
    if _UNEXPECTED in failure.error:
        return (f"{what}: this sync ran inside a function compiled with torch_xla.compile(full_graph=True), "
                "which must trace the whole step into one graph without running it"), (
            "keep the function free of reads (.item(), print, bool(tensor), if on a tensor): return the tensor "
            "and read it after the call, use torch.where for a data-dependent choice, or compile with "
            "full_graph=False"), details
    if graph is not None:
        for explainer in (_out_of_memory, _hidden_double, _named_op):
            found = explainer(graph, failure.error, what, details)
            if found is not None:
                return found
    if "dtype" in what or "scalar type" in what:
        return what, ("an op got inputs of different dtypes: cast where the tensor is made, so every op sees "
                      "one dtype"), details
    return what, ("the backend could not run this graph: the IR tab shows what it was given; run the step "
                  "on the CPU to see whether the same code fails eagerly"), details


Explained = tuple[str, str, FailureDetails]
# PyTorch/XLA's refusal of a sync inside torch_xla.compile(full_graph=True).
_UNEXPECTED = "Unexpected execution happens inside the compiled function"


def _out_of_memory(graph: IRGraph, error: str, what: str, details: FailureDetails) -> Explained | None:
    memory = _OUT_OF_MEMORY.search(error)
    wanted = int(memory.group(1) or memory.group(2) or 0) or None if memory else None
    found = too_big(graph, wanted) if memory else None
    if found is None:
        return None
    node, size = found
    if wanted is None and size * 4 < sum(_bytes(each) for each in graph.nodes):
        return None  # no size given and no one tensor that dominates: the error says it as it is
    details = replace(details, bytes=size, tensor=node.type_text, node=node.id, built_at=node.source_line or None)
    return (f"{what}: the graph holds a tensor of {_size(size)} ({node.type_text}, {node.op} {node.id}"
            f"{_built(node)}), more memory than the device has"), OUT_OF_MEMORY_FIX, details


def _hidden_double(graph: IRGraph, error: str, what: str, details: FailureDetails) -> Explained | None:
    if "dtype" not in what and "scalar type" not in what:
        return None
    for suspect in promoted_scalars(graph):
        use = first_same_dtype_use(graph, suspect)
        if use is None:
            continue
        types = " x ".join(str(graph.by_id[o].outputs[0]) for o in suspect.operand_ids)
        use_built = f" at {use.source_line}" if use.location else ""
        details = replace(details, node=suspect.id, op=suspect.op, reaches=use.id, reaches_op=use.op,
                       built_at=suspect.source_line or None)
        return (f"{what}: {suspect.op} {suspect.id} ({types}{_built(suspect)}) computes in Double here, though the "
                f"IR says {suspect.outputs[0]}: both its inputs are 0-dim, so the Python number (a Double on the "
                f"device) decides the result's dtype; the Double reaches {use.op} {use.id}{use_built}"), (
            "multiply the Python number into a tensor that is not 0-dim (torch.sum(-0.5 * (...)) rather than "
            "-0.5 * torch.sum(...)), or make it a tensor of the right dtype on the device "
            "(torch.tensor(-0.5, dtype=torch.float32, device=...))"), details
    return None


def _named_op(graph: IRGraph, error: str, what: str, details: FailureDetails) -> Explained | None:
    node = named_node(graph, error)
    if node is None:
        return None
    # XLA records the innermost frame: a library wrapper's line; the first use says where the user is.
    use = next((graph.by_id[user] for user in graph.users().get(node.id, ())), None)
    used = f", used by {use.op} {use.id} at {use.source_line}" if use is not None and use.location and \
        use.source_line != node.source_line else ""
    details = replace(details, node=node.id, op=node.op, built_at=node.source_line or None,
                      used_at=use.source_line if used and use is not None else None)
    return f"{what}: the op it names is {node.op} {node.id} ({node.type_text}{_built(node)}{used})", (
        f"the backend cannot compile or run {node.op} as it was given: change or remove the call that "
        "built it, or run that part on the CPU"), details


def _built(node: Node) -> str:
    return f", built at {node.source_line}" if node.location else ""


# The lazy core's words when a CPU tensor reaches a lazy op (TorchScript backend, XLA); in
# a list of tensors (torch.cat) an internal assert says it.
_NOT_LAZY = re.compile(r"is not a lazy tensor|is not an XLA tensor|Expected XLA tensor|[Ee]xpected .* to be on the same device"
                       r"|GetTensorList only supports lists of valid tensors"
                       # autograd, where the forward ran on CPU pieces: "expected device lazy:0 but got cpu"
                       r"|expected device (?:lazy|xla)\S* but got cpu")
# A view op without a lowering: torch cannot fall back for it (a view shares its input's
# storage, which is on the device), so the op fails outright.
_VIEW_CANNOT_FALL_BACK = re.compile(r"operator (aten::[\w.]+) appears to be a view operator")
# What runs instead, from ops that lower, by the module whose kernel takes the view; each
# checked for real (tests/test_fallback_fixes.py): no fallback, the same values.
VIEW_WORKAROUNDS = {
    "LSTMCell.forward": (
        "write the cell from ops that lower, with the module's own weights: gates = x @ cell.weight_ih.t() + "
        "cell.bias_ih + h @ cell.weight_hh.t() + cell.bias_hh; i, f, g, o = (gates.narrow(1, k * cell.hidden_size, "
        "cell.hidden_size) for k in range(4)); c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g); "
        "h = torch.sigmoid(o) * torch.tanh(c) (checked on torch 2.13's TorchScript backend: no fallback, the same "
        "values)"),
    "GRUCell.forward": (
        "write the cell from ops that lower, with the module's own weights: gi = x @ cell.weight_ih.t() + cell.bias_ih; "
        "gh = h @ cell.weight_hh.t() + cell.bias_hh; with n = cell.hidden_size, r = torch.sigmoid(gi.narrow(1, 0, n) "
        "+ gh.narrow(1, 0, n)), z = torch.sigmoid(gi.narrow(1, n, n) + gh.narrow(1, n, n)), new = torch.tanh("
        "gi.narrow(1, 2 * n, n) + r * gh.narrow(1, 2 * n, n)); h = (1 - z) * new + z * h (checked on torch 2.13's "
        "TorchScript backend: no fallback, the same values)"),
}
# torch.save (or .numpy()) of a lazy tensor: it has no host storage to read.
_NO_STORAGE = re.compile(r"data pointer on an invalid python storage")
# torch.load with weights_only (torch's default since 2.6) meeting a class it was not
# allowed: a whole module saved with a class of the script's (or an edit's) own.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_UNSAFE_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")
# Ops that return several tensors: falling back, they hand back CPU tensors marked lazy.
_SEVERAL_OUTPUTS = ("split", "chunk", "unbind", "tensor_split", "topk", "sort", "max.dim", "min.dim", "unique")
_LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ")
_RECURRENT = "torch/nn/modules/rnn.py"  # nn.LSTM, nn.GRU, nn.RNN: their forward unbinds the sequence


def _is_library(file: str) -> bool:
    return any(part in file for part in _LIBRARY)


# How a run that ran out of memory ends without an exception: the kernel's OOM killer
# (SIGKILL), or the backend's compiler dying after a failed allocation (SIGSEGV, SIGABRT).
_DIED_OF_MEMORY = {f"killed by {name}" for name in ("SIGKILL", "SIGSEGV", "SIGABRT")}
# A run whose peak memory rose to this many times its first figure, and was still rising
# at the last execution stored, grew until it died (PyTorch/XLA's start is 0.8 GB: a few
# hundred MB more kill it).
_GREW = 1.25


def killed(run: RunInfo, table: ExecutionTable,
           graphs: IRGraphs | None = None) -> tuple[str, str, FailureDetails, Frame | None] | None:
    """A run killed by a signal while its memory grew: what it had reached, and the last
    graph it ran (its size, the lines that built it), where the recorded peak rose to
    _GREW times its first figure and rose at the last execution stored; None where it did
    not (a kill of another cause, said by its signal alone)."""
    peaks = run.peak_rss
    if len(peaks) < 2 or peaks[-1].kb < _GREW * peaks[0].kb or not len(table) \
            or peaks[-1].execution < table.index[-1]:
        return None
    first, last, stepped = peaks[0], peaks[-1], bool(run.steps or any(table.step))
    script = run.script.rpartition("/")[2]
    cause = ("most likely the kernel's out-of-memory killer (dmesg names it)" if "SIGKILL" in (run.ended_by or "")
             else "in the backend, most likely where an allocation failed")
    what = (f"{script} was {run.ended_by}, {cause}: its peak resident memory rose from {size_text(first.kb * 1024)} "
            f"at {when(first, stepped)} to {size_text(last.kb * 1024)} by {when(last, stepped)}")
    position = len(table) - 1
    kind = table.kind_at(position)
    execution = table.index[position]
    graph = graphs.parsed(kind.graph) if graphs is not None else None
    details = FailureDetails(error=run.ended_by or "", execution=execution)
    if graph is not None:
        lines = ", ".join(f"{where} ({count:,} nodes)" for where, count in graph.built_at.most_common(2))
        memory = _graph_memory(graph, graphs.compiled_memory(kind.graph) if run.capabilities.compiled_memory else {})
        what += (f"; the last graph it ran, execution {execution}, held {len(graph):,} nodes"
                 + (f" ({memory})" if memory else "") + (f", built at {lines}" if lines else ""))
        details = replace(details, built_at=graph.built_at.most_common(1)[0][0] if graph.built_at else None)
    else:
        what += f"; the last graph it ran, execution {execution}, held {kind.nodes:,} nodes"
    return what, GRAPH_OUT_OF_MEMORY_FIX, details, kind.frame


def _graph_memory(graph: IRGraph, compiled: dict[str, int]) -> str:
    """What a graph needs in memory: as the backend's compiler said (XLA: inputs, outputs,
    intermediates, program), else its inputs and outputs by their shapes (TorchScript)."""
    if any(compiled.values()):
        return "compiled to need " + ", ".join(f"{name.replace('_', ' ')} {size_text(size)}"
                                               for name, size in compiled.items() if size)
    inputs = sum(_bytes(node) for node in graph.inputs)
    outputs = sum(_bytes(node) for node in graph.nodes if node.root is not None)
    return f"inputs {size_text(inputs)}, outputs {size_text(outputs)} by their shapes" if inputs or outputs else ""


def raising_line(frames: list[Frame]) -> Frame | None:
    """Of the frames where the script raised (outermost first), the user's own line
    nearest the raise, else the line that raised."""
    return next((f for f in reversed(frames) if not _is_library(f.file)), frames[-1] if frames else None)


def crash(run: RunInfo, table: ExecutionTable,
          graphs: IRGraphs | None = None) -> tuple[str, str, FailureDetails, Frame | None] | None:
    """(what happened, what to do, details, the user's line) when the script raised or was
    killed for memory; None when it did not, or the user stopped it (Ctrl-C)."""
    if not run.error and run.ended_by in _DIED_OF_MEMORY:
        return killed(run, table, graphs)
    if not run.error or run.error.startswith("KeyboardInterrupt"):
        return None
    frames = run.error_frames
    raised_at = frames[-1] if frames else None
    user = next((f for f in reversed(frames) if not _is_library(f.file)), None)
    where = f" at {_short(raised_at)} in {raised_at.function}()" if raised_at else ""
    called = f", called from {_short(user)}" if user is not None and user != raised_at else ""
    script = run.script.rpartition("/")[2]
    first = first_sentence(_ANSI.sub("", run.error.splitlines()[0])).rstrip(". ")  # torch's bold: not the report's
    what = f"{script} raised {first}{where}{called}"
    details = FailureDetails(error=first_sentence(run.error.splitlines()[0]), raised_at=raised_at.site if raised_at else None)
    if _NO_STORAGE.search(run.error):  # torch.save or numpy() on a lazy tensor
        details = replace(details, no_storage=True)
        return (f"{what}: a lazy tensor has no storage on the host to read"), (
            "move it to the CPU first: torch.save({name: value.cpu() for name, value in model.state_dict().items()}, "
            "path), tensor.cpu().numpy()"), details, user or raised_at
    unsafe = _UNSAFE_GLOBAL.search(run.error)
    if unsafe is not None:
        name = unsafe.group(1)
        details = replace(details, unsafe_global=name)
        return (f"{what}: torch.load loads only the classes it is allowed (weights_only, torch's default) and the "
                f"file holds {name}, which is not among them"), (
            f"allow it where the script loads, if you trust the file: add {name} to the classes given to "
            f"torch.serialization.safe_globals([...]) (or torch.serialization.add_safe_globals([{name}])); a "
            "class an edit of lazyviz's made (an LSTMLowered) is that edit's, the same parameters"), \
            details, user or raised_at
    memory = _OUT_OF_MEMORY.search(run.error)
    if memory is not None and len(table):
        # The last execution's graph is the one the device could not hold.
        position = len(table) - 1
        graph = graphs.parsed(table.kind_at(position).graph) if graphs is not None else None
        wanted = int(memory.group(1) or memory.group(2) or 0) or None
        found = too_big(graph, wanted) if graph else None
        if found is not None:
            node, size = found
            execution = table.index[position]
            built = f", built at {node.source_line}" if node.location else ""
            details = replace(details, execution=execution, bytes=size, tensor=node.type_text,
                              built_at=node.source_line or None)
            total = sum(_bytes(each) for each in graph.nodes) if graph is not None else 0
            if graph is not None and size * 4 < total:
                # No one tensor: the graph itself, grown past what the process can hold
                # (a loop without mark_step(): thousands of small intermediates).
                lines = ", ".join(f"{where} ({count:,} nodes)" for where, count in graph.built_at.most_common(2))
                failed = (f": the allocation that failed was one tensor of {_size(size)}" if wanted is not None
                          else f": its largest tensor is {_size(size)}")
                return (f"{what}: the graph of execution {execution} ({len(graph):,} nodes, its tensors "
                        f"{_size(total)} in all{f', built at {lines}' if lines else ''}) is more than the process "
                        f"could hold{failed}"), GRAPH_OUT_OF_MEMORY_FIX, details, user or raised_at
            return (f"{what}: the graph of execution {execution} holds a tensor of {_size(size)} ({node.type_text}, "
                    f"{node.op}{built}), more memory than the device has"), OUT_OF_MEMORY_FIX, details, user or raised_at
    view = _VIEW_CANNOT_FALL_BACK.search(run.error)
    if view is not None:
        return _view_op(run, table, what, view.group(1), details, user or raised_at)
    bound = _SLICE_BOUND.search(run.error)
    if bound is not None:
        low, high, got = (int(bound.group(n)) for n in (1, 2, 3))
        return (f"{what}: a slice bound of {got} on a dimension of {-low}: eager PyTorch clamps a bound "
                f"past the dimension's start to it (`x[-8:]` of 6 is all 6), PyTorch/XLA raises instead"), \
            SLICE_BOUND_FIX, replace(details, slice_bound=(low, high, got)), user or raised_at
    if _SPARSE.search(run.error):
        return (f"{what}: lazy tensors have no sparse layout (neither has PyTorch/XLA), so a sparse tensor cannot be "
                f"made on the {run.device or 'lazy'} device or moved there"), SPARSE_FIX, \
            replace(details, sparse=True), user or raised_at
    if not _NOT_LAZY.search(run.error):
        return what, UNKNOWN_CRASH_FIX, details, user or raised_at
    return _not_lazy(run, table, what, details, user or raised_at)


# An op of the sparse layout dispatched to a lazy backend: torch names the backend
# 'SparseLazy' (TS), 'SparseXLA' (PyTorch/XLA), 'SparsePrivateUse1' (a fork's device).
_SPARSE = re.compile(r"'Sparse(?:Lazy|XLA|PrivateUse1)' backend")
SPARSE_FIX = ("keep the tensor dense on the device: drop .to_sparse() before .to(device) (torch.mm, torch.spmm and "
              "torch.sparse.mm give the same values on dense tensors), or call .to_dense() before moving it")
# PyTorch/XLA's check of a slice's bounds (torch_xla 2.9), where eager clamps: a negative
# bound past the start (`idx[:, -block_size:]` of a shorter sequence). Checked: a positive
# bound past the end clamps on both; LTC clamps as eager does.
_SLICE_BOUND = re.compile(r"Value out of range \(expected to be in range of \[(-?\d+), (-?\d+)\], but got (-?\d+)\)")
SLICE_BOUND_FIX = ("clamp the bound as eager PyTorch does: `x[:, -min(n, x.size(1)):]` for `x[:, -n:]`, the same "
                   "elements on every device")
# A crash lazyviz has no reading of: what a user can still do to tell the backend's part.
UNKNOWN_CRASH_FIX = ("lazyviz has no explanation for this error: run the script on the CPU; if it passes there, the "
                     "lazy device is what differs at this line: call it on the CPU (its inputs moved with .cpu()) to "
                     "see the eager error, or keep that call off the device")


def _not_lazy(run: RunInfo, table: ExecutionTable, what: str, details: FailureDetails,
              user: Frame | None) -> tuple[str, str, FailureDetails, Frame | None]:
    """"Input tensor is not a lazy tensor": the fallback that left a CPU tensor behind
    (a split's pieces), at its own line where lazyviz can tell."""
    op, call, execution = _last_fallback(run, table)
    if op is None and run.cpu_at_raise:
        return _held_on_cpu(run, what, details, user)
    if op is None:
        return (f"{what}: a tensor on the CPU met lazy tensors (one made without device=, or brought back with "
                ".cpu() or .to('cpu'))"), ("make every tensor of the step on the lazy device: create it with "
                                          "device='lazy' or move it with .to('lazy')"), details, user
    in_call = f" in {call}()" if call else ""
    when = f"execution {execution}" if execution is not None else "after the last execution"
    # Where the op ran: the line to change, where the raise is only where a piece was first
    # used. An execution names it when the op synced its input; else the tracer noted the
    # call that handed its pieces back on the host (a split of data already on the device).
    at = table.kind_at(table.position_of(execution)).frame if execution is not None else None
    if at is None and run.lost_pieces and any(name in op for name in _SEVERAL_OUTPUTS):
        at = run.lost_pieces[-1][1]
    op_line = f" at {_short(at)}" if at is not None else ""
    details = replace(details, op=op, call=call, execution=execution, op_line=at.site if at is not None else None)
    several = any(name in op for name in _SEVERAL_OUTPUTS)
    raised_in = run.error_frames[-1].file if run.error_frames else ""
    own_pieces = at is None or user is None or (at.file, at.line) == (user.file, user.line)
    if several and _RECURRENT in raised_in and own_pieces:
        # Not the user's unbind: the module's own forward took the sequence apart on the
        # line that called it. The module is what to change. (A split of the user's whose
        # pieces reach an LSTMCell raises in rnn.py too, but the pieces came from their line.)
        details = replace(details, module="recurrent")
        return (f"{what}: torch's recurrent module (nn.LSTM, nn.GRU or nn.RNN, in {_RECURRENT}) cannot run on this "
                f"backend as it is: its forward takes the sequence apart with {op}, which falls back{in_call} and "
                "hands the time steps back as CPU tensors, and its next op raises"), (
            "make the module from ops that lower: the same module, its own weights, written as its cell over the "
            "time steps with narrow (lazyviz's edit makes each nn.LSTM, nn.GRU and nn.RNN of the file so)"), \
            details, user
    if several:
        return (f"{what}: a tensor that is not lazy reached a lazy op. It came from {op}{op_line}, which falls back "
                f"to the CPU{in_call} ({when}): an op without a lowering that returns several tensors hands them back "
                "as CPU tensors that still say device lazy:0, and the first lazy op to use one raises"), (
            f"{op.removeprefix('aten::').split('.')[0]} has no lowering here: take the pieces by slicing or narrow "
            "(x[..., :n], x.narrow(dim, start, n)), which lower; torch.chunk goes through split too"), \
            details, at or user
    return (f"{what}: a tensor that is not lazy reached a lazy op; the last op to fall back before it was {op}"
            f"{in_call} ({when}), whose result may have stayed on the CPU"), (
        "keep that op's result on the lazy device (.to('lazy')) or replace it with ops that lower"), details, user


def _held_on_cpu(run: RunInfo, what: str, details: FailureDetails,
                 user: Frame | None) -> tuple[str, str, FailureDetails, Frame | None]:
    """The frame that raised named its CPU tensors: a module's own parameters (a model
    never moved to the device: imagenet's CPU path), or tensors made on the CPU."""
    held = run.cpu_at_raise
    names = " and ".join(", ".join(name for name, _, _ in held).rsplit(", ", 1))
    details = replace(details, on_cpu=tuple(name for name, _, _ in held))
    owners = {owner for _, kind, owner in held if kind in ("parameter", "buffer")}
    device = run.device or "lazy"
    if owners:
        owner = " and ".join(sorted(owners))
        return (f"{what}: the {owner} it ran in holds its {names} on the CPU while its input is on the {device} "
                "device: the model was not moved there"), (
            f"move the model to the device its inputs are on, once, after it is made: model.to(device) (its "
            f"parameters and buffers; torch's CPU default needs no move, the {device} device does)"), details, user
    return (f"{what}: {names} {'is' if len(held) == 1 else 'are'} on the CPU beside tensors on the {device} "
            "device"), (f"make {names} on the {device} device: create it with device=... or move it with "
                        ".to(device) before the op"), details, user


# XLA: "Out of memory allocating 549755813888 bytes"; CPU: "you tried to allocate N bytes";
# CUDA says it in GiB; C++'s operator new, with no size, "std::bad_alloc" (which allocation
# fails first under a limit depends on the process's layout: traced, one more thread's).
_OUT_OF_MEMORY = re.compile(r"[Oo]ut of memory allocating (\d+) bytes|tried to allocate (\d+) bytes|"
                            r"RESOURCE_EXHAUSTED|out of memory|std::bad_alloc")
# Bytes per element, by the names TorchScript's IR and XLA's give a dtype.
_ELEMENT_BYTES = {"Double": 8, "Float": 4, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2, "Char": 1,
                  "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "f64": 8, "f32": 4, "f16": 2,
                  "bf16": 2, "s64": 8, "s32": 4, "s16": 2, "s8": 1, "u64": 8, "u32": 4, "u16": 2, "u8": 1,
                  "pred": 1, "c64": 8, "c128": 16}


def _bytes(node: Node) -> int:
    total = 0
    for tensor in node.outputs:
        count = _ELEMENT_BYTES.get(tensor.dtype, 0)
        for size in tensor.shape:
            count = count * int(size) if size.isdigit() else 0
        total += count
    return total


OUT_OF_MEMORY_FIX = ("make that tensor smaller (a smaller batch, sequence or layer), or build and use it in parts "
                     "with a mark_step() between them")
GRAPH_OUT_OF_MEMORY_FIX = ("cut the graph: a loop whose iterations pile up into it needs a mark_step() at the end of "
                           "each (its own finding says where); otherwise run less work between syncs")


def too_big(graph: IRGraph, wanted: int | None) -> tuple[Node, int] | None:
    """In a graph the device could not hold, the node whose output is the allocation
    that failed (`wanted` bytes), else the largest, with its size."""
    sized = [(node, _bytes(node)) for node in graph.nodes]
    if not sized:
        return None
    exact = [pair for pair in sized if wanted is not None and pair[1] == wanted]
    node, size = exact[0] if exact else max(sized, key=lambda pair: pair[1])
    return (node, size) if size else None


# Names in a backend's message that can be an op's or an attribute's: "my_kernel", "aten::foo".
_NAME = re.compile(r"[A-Za-z_][\w]*(?:(?:::|\.)[A-Za-z_]\w*)*")


def named_node(graph: IRGraph, error: str) -> Node | None:
    """The first node that a name in the backend's message names: its op (XLA: "custom
    call to my_kernel" names the xla::custom_call whose target is my_kernel) or one
    of its attribute values. Only names a person would not write as a word (with an
    underscore or ::), so "the", "graph" and "Host" never match; two words in a row
    name an op too ("custom call": xla::custom_call)."""
    words = _NAME.findall(headline(error))
    names = {name for name in words if "_" in name or "::" in name}
    names.update(f"{first}_{second}".lower() for first, second in itertools.pairwise(words))
    if not names:
        return None
    for node in graph.nodes:
        if node.is_input:
            continue
        if node.op in names or node.op.rpartition("::")[2] in names or names.intersection(node.attrs.values()):
            return node
    return None


def _size(count: int) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


def _view_op(run: RunInfo, table: ExecutionTable, what: str, op: str, details: FailureDetails,
             frame: Frame | None) -> tuple[str, str, FailureDetails, Frame | None]:
    """A view op with no lowering: not a sync to accept but code that cannot run on this
    device at all. The module that reached it is the call of the last execution, which
    synced the op's inputs before torch found it cannot fall back."""
    last = table.kind_at(len(table) - 1) if len(table) else None
    call = last.call if last is not None and last.cause == "fallback" and last.detail == op else None
    details = replace(details, op=op, call=call)
    reached = f"{call}()" if call else "the call that raised"
    where = f" (your line {_short(frame)})" if frame is not None else ""
    message = (f"{what}: {op} is a view op with no lowering on this backend, and a view cannot fall back to the "
               f"CPU (it would share storage across devices), so {reached}{where} cannot run on the lazy device at "
               "all: it is not a sync to accept")
    fix = VIEW_WORKAROUNDS.get(call or "") or (
        f"replace {reached} with ops that lower (one that makes no view of its input), or run it on the CPU: "
        "move its inputs there and its result back")
    return message, fix, details, frame


def _last_fallback(run: RunInfo, table: ExecutionTable) -> tuple[str | None, str | None, int | None]:
    """The most recent fallback op before the script raised: (op, its call, execution)."""
    if run.fallbacks_after_last_execution:
        return next(reversed(run.fallbacks_after_last_execution)), None, None
    for position in reversed(range(len(table))):
        kind = table.kind_at(position)
        ops = [op for op in kind.fallback_ops] or ([kind.detail] if kind.cause == "fallback" and kind.detail else [])
        if ops:
            return ops[-1], kind.call, table.index[position]
    return None, None, None


def _short(frame: Frame) -> str:
    return f"{frame.file.rpartition('/')[2]}:{frame.line}"
