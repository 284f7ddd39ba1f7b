"""A run's graphs as the analysis reads them: each graph's IR parsed once, when first
asked, and handed by graph id to every analysis, renderer and tab that needs it.

A graph id names one IR text for good (it is the text's hash), so what is parsed stays
right while a live run adds graphs: a watcher keeps one IRGraphs over its growing texts.
"""
from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import NamedTuple

from lazyviz.analysis.diff import GraphDiff, diff_graphs
from lazyviz.analysis.ir import IRGraph, IRParseError, Node, parse_ir, parse_ir_lines
from lazyviz.analysis.summary import graph_memory, split_hlo
from lazyviz.trace.model import GraphTexts

# Parsed nodes kept in memory (~250 bytes each): a heavy real run (a BERT fine-tune's
# 1,100 graphs, 300,000 nodes) stays parsed whole; past that the graphs asked longest
# ago are parsed again if asked again (10,000 graphs of 300 nodes would hold 2 GB).
KEPT_NODES = 400_000
# Diffs kept for asking again (a recompile's ranking diffs a pair its explanation then
# reads; the UI's Diff tab asks again per selection). Each holds its origins only.
KEPT_DIFFS = 1024


class GraphSummary(NamedTuple):
    """What every graph of a run is asked, kept for all of them however many there are."""

    size: int  # nodes
    structure: int  # a hash of IRGraph.structure: equal, node for node the same computation
    op_counts: Counter[str]  # every node's op, inputs too (one object for graphs with the same ops)


class IRGraphs(Mapping[str, str]):
    """graph id -> IR text ("" where none was captured), and each graph parsed (with what
    it is asked: its ops, structure, lines), its summary, and diffs between two graphs.
    backend_text: a graph's backend text, where it may hold the HLO XLA compiled
    (PyTorch/XLA), read only when hlo() asks."""

    def __init__(self, texts: Mapping[str, str], backend_text: Callable[[str], str] | None = None) -> None:
        self._texts = texts
        # A trace's texts as line ids (GraphTexts): each line's node, read once for all graphs.
        self._lines = texts if isinstance(texts, GraphTexts) else None
        self._line_nodes: dict[int, Node | object] = {}
        self._backend_text = backend_text
        self._parsed: OrderedDict[str, IRGraph | None] = OrderedDict()  # least recently asked first
        self._parsed_nodes = 0
        # The UI's tabs ask from worker threads at once: the kept graphs change under one
        # lock (the parse itself runs outside it; two threads may parse one graph twice).
        self._keeping = threading.Lock()
        self._summaries: dict[str, GraphSummary | None] = {}
        self._op_counts: dict[tuple, Counter[str]] = {}  # shared by graphs with the same ops
        self._op_counts_of: dict[int, tuple[Counter[str], Counter[str]]] = {}  # a structure's -> the shared one
        self._hlo: dict[str, str] = {}
        self._diffs: dict[tuple[str, str], GraphDiff | None] = {}

    @classmethod
    def of(cls, texts: Mapping[str, str]) -> IRGraphs:
        """texts as IRGraphs: itself when it is one (what it parsed is kept)."""
        return texts if isinstance(texts, IRGraphs) else cls(texts)

    def __getitem__(self, graph_id: str) -> str:
        return self._texts[graph_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._texts)

    def __len__(self) -> int:
        return len(self._texts)

    def text(self, graph_id: str | None) -> str:
        return (self._texts.get(graph_id) or "") if graph_id is not None else ""

    def parsed(self, graph_id: str | None) -> IRGraph | None:
        """The graph's IR parsed; None where there is none, or it is not IR."""
        if graph_id is None:
            return None
        parsed = self._parsed
        with self._keeping:
            if graph_id in parsed:
                parsed.move_to_end(graph_id)
                return parsed[graph_id]
        ids = self._lines.line_ids(graph_id) if self._lines is not None else None
        graph = None
        try:
            if ids is not None:
                graph = parse_ir_lines(ids, self._lines.lines, self._line_nodes)  # type: ignore[union-attr]
            elif text := self.text(graph_id):
                graph = parse_ir(text)
        except IRParseError:
            graph = None
        if graph_id not in self._texts:
            return graph  # not kept: a live run may add its text later
        with self._keeping:
            if graph_id not in parsed:
                parsed[graph_id] = graph
                self._parsed_nodes += len(graph) if graph is not None else 0
            while self._parsed_nodes > KEPT_NODES and len(parsed) > 1:
                _, evicted = parsed.popitem(last=False)
                self._parsed_nodes -= len(evicted) if evicted is not None else 0
        if graph_id not in self._summaries:
            self._summaries[graph_id] = self._summary_of(graph)
        return graph

    def summary(self, graph_id: str | None) -> GraphSummary | None:
        """The graph's size, structure and ops; None where it has no IR to read."""
        if graph_id is None:
            return None
        if graph_id not in self._summaries:
            graph = self.parsed(graph_id)
            if graph_id not in self._summaries:  # not among the texts
                return self._summary_of(graph)
        return self._summaries[graph_id]

    def _summary_of(self, graph: IRGraph | None) -> GraphSummary | None:
        if graph is None:
            return None
        counts = graph.op_counts  # one per structure; here one per distinct set of ops
        held = self._op_counts_of.get(id(counts))  # held with it: its id names no other while kept
        if held is None:
            held = self._op_counts_of[id(counts)] = (counts, self._op_counts.setdefault(
                tuple(sorted(counts.items())), counts))
        shared = held[1]
        return GraphSummary(len(graph), hash(graph.structure), shared)

    def overlap(self, a: str, b: str) -> float:
        """The ops two graphs share (as a multiset) over the larger one's size: 1.0 for the
        same ops, near 0 for unrelated graphs. Cheap enough to rank every candidate."""
        summary_a, summary_b = self.summary(a), self.summary(b)
        counts_a, size_a = (summary_a.op_counts, summary_a.size) if summary_a else ({}, 0)
        counts_b, size_b = (summary_b.op_counts, summary_b.size) if summary_b else ({}, 0)
        if counts_a is counts_b:
            return size_a / max(size_a, 1)
        if len(counts_b) < len(counts_a):
            counts_a, counts_b = counts_b, counts_a
        shared = sum(min(n, counts_b.get(op, 0)) for op, n in counts_a.items())
        return shared / max(size_a, size_b, 1)

    def diff(self, old: str, new: str) -> GraphDiff | None:
        """What differs from graph old to graph new; None when either is not IR."""
        key = (old, new)
        if key in self._diffs:
            return self._diffs[key]
        old_graph, new_graph = self.parsed(old), self.parsed(new)
        diff = diff_graphs(old_graph, new_graph, lambda: (self.parsed(old), self.parsed(new))) \
            if old_graph and new_graph else None
        if len(self._diffs) >= KEPT_DIFFS:
            del self._diffs[next(iter(self._diffs))]  # the oldest: asks come in run order
        self._diffs[key] = diff
        return diff

    @property
    def has_hlo(self) -> bool:
        """Whether hlo() may answer: the backend records the HLO it compiled (PyTorch/XLA)."""
        return self._backend_text is not None

    def compiled_memory(self, graph_id: str) -> dict[str, int]:
        """The memory the backend's compiler said the graph needs (summary.graph_memory), {}
        where it said nothing."""
        return graph_memory(self._backend_text(graph_id)) if self._backend_text is not None else {}

    def hlo(self, graph_id: str) -> str:
        """The HLO module the graph compiled to, "" where none was recorded."""
        if self._backend_text is None:
            return ""
        if graph_id not in self._hlo:
            self._hlo[graph_id] = split_hlo(self._backend_text(graph_id))[1]
        return self._hlo[graph_id]


def diff_across(old: Mapping[str, str], old_id: str, new: Mapping[str, str], new_id: str) -> GraphDiff | None:
    """What differs from a graph of one run to a graph of another (two ranks, two runs)."""
    old_graph, new_graph = IRGraphs.of(old).parsed(old_id), IRGraphs.of(new).parsed(new_id)
    return diff_graphs(old_graph, new_graph) if old_graph and new_graph else None
