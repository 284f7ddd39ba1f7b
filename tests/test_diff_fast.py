"""The quick paths of the analysis give what the plain ones give: a diff of two graphs of
one structure (bits, origin by origin) against the node-by-node walk, the lower bound
on origins that spares a diff against the diff itself, and a line read as its output
types only against the line read whole."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lazyviz.analysis import ir
from lazyviz.analysis.diff import _changes, align, diff_graphs
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.recompiles import _fewest_origins

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
