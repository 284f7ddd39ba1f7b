"""A block of ops repeated in one graph: a loop unrolled into it (no mark_step() in the
loop), or a stack of identical layers, told apart. The findings and the SVG export read it."""
from __future__ import annotations

import itertools
import operator
from collections import Counter, defaultdict

from lazyviz.analysis.ir import IRGraph

MIN_REPEATS = 4  # a block seen this many times in a row in one graph is a loop, unrolled


def repeated_block(ops: list[str], max_period: int = 64, min_covered: int = 0) -> tuple[list[str], int, int] | None:
    """The block of ops repeated most times in a row, as (block, repeats, start), covering
    the most ops; None when nothing repeats MIN_REPEATS times. With min_covered, only a
    block covering at least that many ops is looked for, which is found quickly at any
    period up to max_period (a training step is hundreds of ops: pytorch/examples'
    mnist ~150, its word language model ~520); without, every period is scanned."""
    best: tuple[int, int, int, int] | None = None  # covered, period, repeats, start
    limit = min(max_period, len(ops) // MIN_REPEATS)
    periods = _periods_covering(ops, min_covered, limit) if min_covered else range(1, limit + 1)
    for period in periods:
        matches = list(map(operator.eq, ops, ops[period:]))  # ops[i] == ops[i + period]
        if sum(matches) < (MIN_REPEATS - 1) * period:
            continue
        at = 0
        for same, group in itertools.groupby(matches):
            run = sum(1 for _ in group)
            repeats = run // period + 1
            if same and repeats >= MIN_REPEATS and (best is None or repeats * period > best[0]):
                best = (repeats * period, period, repeats, at)
            at += run
    if best is None:
        return None
    _, period, repeats, start = best
    return ops[start:start + period], repeats, start


def _periods_covering(ops: list[str], covered: int, limit: int) -> list[int]:
    """The periods a block covering `covered` of the ops can have: such a stretch holds
    one of the positions a quarter, half and three quarters in (when it covers half the
    ops or more), and a few ops there recur one period later, so the distances to their
    next occurrences are the candidates. A few string searches instead of a scan per period."""
    codes: dict[str, str] = {}
    text = "".join(codes.setdefault(op, chr(0x100 + len(codes))) for op in ops)
    n, window = len(text), 4
    anchors = {n // 4, n // 2, 3 * n // 4} if covered >= n // 2 else set(range(0, n, max(1, covered // 2)))
    periods: set[int] = set()
    for anchor in anchors:
        probe = text[anchor:anchor + window]
        if len(probe) < window:
            continue
        at = text.find(probe, anchor + 1, anchor + limit + window)
        while at != -1:
            periods.add(at - anchor)
            at = text.find(probe, at + 1, anchor + limit + window)
    return sorted(periods)


def iterations_chain(graph: IRGraph, start: int, period: int, repeats: int) -> bool:
    """Whether the iterations of a repeated block feed each other, as an unrolled loop's
    do (each consumes what the one before it made), rather than run side by side, as
    torch's optimizers update parameters one at a time on a lazy device. start counts
    the graph's ops without its inputs (as repeated_block does). Found by joining the
    ops of the repeated stretch along their operands: a loop carries some value through
    most iterations; side-by-side updates make one group each, which reaches into its
    neighbours' iterations where the block starts mid-update (pytorch/examples' mnist
    with Adadelta: groups over 2-3 of 8 iterations)."""
    ops = [node for node in graph.nodes if not node.is_input][start:start + period * repeats]
    iteration = {node.id: i // period for i, node in enumerate(ops)}
    parent = {node_id: node_id for node_id in iteration}

    def root(node_id: str) -> str:
        while parent[node_id] != node_id:
            parent[node_id] = parent[parent[node_id]]
            node_id = parent[node_id]
        return node_id

    for node in ops:
        for operand in node.operand_ids:
            if operand in iteration:
                parent[root(operand)] = root(node.id)
    spans: dict[str, set[int]] = defaultdict(set)
    for node_id, index in iteration.items():
        spans[root(node_id)].add(index)
    return max(map(len, spans.values()), default=0) >= max(MIN_REPEATS, repeats // 2 + 1)


def layer_stack(graph: IRGraph, start: int, period: int, repeats: int) -> bool:
    """Whether a chained repeated block is a model's stack of layers, each with its own
    weights (a transformer's blocks: makemore's 4 layers, 13 weight tensors each, hand 4
    values on), not a loop's iterations: every repeat reads at least 4 tensors from the
    graph's inputs that no other repeat reads, and twice what it takes from the repeat
    before. An unrolled training loop carries every parameter and optimizer state on and
    reads only its batch (mnist: 41 values on, 1-2 tensors of its own); a loop over shared
    weights reads none of its own, or what it uploads each time (a sampler's noise). A
    stack of bare Linear layers (2 weights each) stays unknown: said as a loop, as before.
    Scalars are not counted: the lazy device makes a constant per use."""
    nodes = graph.nodes
    ops = [node for node in nodes if not node.is_input][start:start + period * repeats]
    repeat = {node.id: i // period for i, node in enumerate(ops)}
    tensors = {node.id for node in nodes if node.is_input and any(t.shape for t in node.outputs)}
    readers: dict[str, set[int]] = defaultdict(set)  # an input tensor -> the repeats reading it
    carried: dict[int, set[str]] = defaultdict(set)  # a repeat -> what it reads of the one before
    for node in ops:
        here = repeat[node.id]
        for operand in node.operand_ids:
            if operand in tensors:
                readers[operand].add(here)
            elif repeat.get(operand) == here - 1:
                carried[here].add(operand)
    own = Counter(next(iter(seen)) for seen in readers.values() if len(seen) == 1)
    return all(own[k] >= max(4, 2 * len(carried[k])) for k in range(repeats))


def forward_loop(graph: IRGraph, start: int, period: int, repeats: int) -> bool:
    """Whether the repeated stretch is a loop inside a module's forward: every op whose
    location the IR records was built in a function named `forward`. An RNN written as
    its cell over the time steps (mnist_rnn's LSTM, lowered: 28 rows, one cell each), or
    layers sharing their weights, unroll into the graph of one forward as they must; the
    iterations of a loop without mark_step() also build a loss, a backward or an update
    outside it. Unknown (no location recorded) is not a forward's loop."""
    ops = [node for node in graph.nodes if not node.is_input][start:start + period * repeats]
    functions = {node.location.rpartition("@")[0] for node in ops if node.location and not _made_where_used(node.op)}
    # A generator expression or lambda in forward (`(gates.narrow(...) for k in range(4))`)
    # is forward's own code.
    return functions - _INNER_SCOPES == {"forward"}


_INNER_SCOPES = frozenset({"<genexpr>", "<listcomp>", "<setcomp>", "<dictcomp>", "<lambda>"})
# Nodes whose location is where a value was made, not where the loop used it: the lazy core
# builds a view's node (and its scalar arguments) when the view is used, so a time step's
# piece that a helper sliced before the loop (split_lowered) appears in each iteration.
_VIEWS_XLA = frozenset({"xla::generic_slice", "xla::select", "aten::view", "aten::permute", "aten::expand"})


def _made_where_used(op: str) -> bool:
    return op == "prim::Constant" or op.endswith("_copy") or op in _VIEWS_XLA

