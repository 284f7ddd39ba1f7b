"""The quick paths of the analysis give what the plain ones give: a diff of two graphs of
one structure (bits, origin by origin) against the node-by-node walk, the lower bounds
that spare a diff against the diff itself, a line read as its output types only against
the line read whole, and graphs read from a trace by their line ids against the same
graphs read from their texts."""
from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import lazyviz
from lazyviz.analysis import ir
from lazyviz.analysis.diff import _changes, align, diff_graphs, least_score
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.recompiles import _fewest_origins
from lazyviz.trace.schema import GraphRecord
from lazyviz.trace.synthetic import execution
from lazyviz.trace.writer import TraceWriter

OPS = ["aten::mm", "aten::add", "aten::relu", "aten::view_copy", "aten::expand_copy"]


@st.composite
def skeletons(draw, size: int = 12):
    """One computation: each node's op, operands, attribute names and whether it is an input."""
    nodes = []
    for index in range(draw(st.integers(2, size))):
        if index < 2 or (draw(st.booleans()) and index < 4):
            # An input after the first may share a buffer with an earlier one (alias=%j).
            nodes.append(("lazy_tensors::device_data", [], ["device", "alias"] if index and draw(st.booleans())
                          else ["device"]))
            continue
        operands = sorted(set(draw(st.lists(st.integers(0, index - 1), min_size=1, max_size=2))))
        nodes.append((draw(st.sampled_from(OPS)), operands, draw(st.sampled_from([[], ["size"], ["size", "alpha"]]))))
    return nodes


@st.composite
def values(draw, skeleton):
    """The IR text of a skeleton with drawn shapes, attribute values and buffer sharing."""
    lines = ["IR {"]
    inputs = [i for i, (op, _, _) in enumerate(skeleton) if op.endswith("device_data")]
    for index, (op, operands, names) in enumerate(skeleton):
        shape = draw(st.sampled_from(["Float[4,8]", "Float[6,8]", "Float[4,16]", "Long[4,8]", "Float[]"]))
        attrs = [f"alias=%{draw(st.sampled_from([i for i in inputs if i < index]))}" if name == "alias"
                 else f"{name}={draw(st.sampled_from(['1', '2', '4 8']))}" for name in names]
        if draw(st.booleans()):  # where it was built: compared by no diff
            attrs.append(f"location=step@train.py:{draw(st.sampled_from([3, 4]))}")
        operand_text = ", ".join(f"%{o}" for o in operands)
        lines.append(f"  %{index} = [{shape}] {op}({operand_text})" + "".join(f", {a}" for a in attrs)
                     + (", ROOT=0" if index == len(skeleton) - 1 else ""))
    return "\n".join(lines + ["}"])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_diff_of_one_structure_finds_what_the_walk_finds(data) -> None:
    skeleton = data.draw(skeletons())
    old, new = ir.parse_ir(data.draw(values(skeleton))), ir.parse_ir(data.draw(values(skeleton)))
    assert old.structure == new.structure
    quick = diff_graphs(old, new)
    origins, changed = _changes(old, new, align(old, new), carried=False)
    assert quick.origins == origins
    assert quick.changed_nodes == changed and quick.changed_count == len(changed)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_origins_a_diff_needs_are_never_fewer_than_its_ops_say(data) -> None:
    texts = {"old": data.draw(values(data.draw(skeletons()))), "new": data.draw(values(data.draw(skeletons())))}
    graphs = IRGraphs(texts)
    assert len(graphs.diff("old", "new").origins) >= _fewest_origins("old", "new", graphs)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_line_read_as_its_types_only_is_the_line_read_whole(data) -> None:
    skeleton = data.draw(skeletons())
    first, second = data.draw(values(skeleton)), data.draw(values(skeleton))
    ir.parse_ir(first)  # its lines' fields after the output types are kept
    quick = ir.parse_ir(second)
    ir._KNOWN_LINES.clear()
    ir._SKELETONS.clear()
    whole = ir.parse_ir(second)
    assert [node._replace(serial=0) for node in quick.nodes] == [node._replace(serial=0) for node in whole.nodes]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_diff_of_one_structure_is_never_below_its_floor(data) -> None:
    skeleton = data.draw(skeletons())
    old, new = ir.parse_ir(data.draw(values(skeleton))), ir.parse_ir(data.draw(values(skeleton)))
    diff = diff_graphs(old, new)
    least_origins, least_changed = least_score(old, new)
    assert len(diff.origins) >= least_origins and diff.changed_count >= least_changed
    # The floor is the count itself where no input shares a buffer differently.
    if old.alias_marks == new.alias_marks:
        assert diff.changed_count == least_changed


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_graphs_read_by_their_line_ids_are_the_graphs_their_texts_give(data) -> None:
    skeleton = data.draw(skeletons())
    texts = {f"g{i}": data.draw(values(skeleton if i % 2 else data.draw(skeletons()))) + "\n" * (i % 3)
             for i in range(data.draw(st.integers(1, 5)))}
    with tempfile.TemporaryDirectory() as folder:
        writer = TraceWriter(Path(folder) / "t.trace")
        for index, (graph, text) in enumerate(texts.items()):
            writer.add_execution(execution(index, cache="miss", graph=graph),
                                 graph=GraphRecord(graph, len(text.splitlines()), text, "", index))
        writer.close()
        with lazyviz.open(Path(folder) / "t.trace") as trace:
            stored = trace.ir_texts()
    assert dict(stored) == texts
    assert all((stored.line_ids(g) is not None) == (len(t) >= 256) for g, t in texts.items())  # long ones by lines
    by_lines, by_text = IRGraphs(stored), IRGraphs(dict(texts))
    for graph in texts:
        assert [n._replace(serial=0) for n in by_lines.parsed(graph).nodes] == \
            [n._replace(serial=0) for n in by_text.parsed(graph).nodes]
