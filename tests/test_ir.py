"""The IR parser: torch's printed forms, round trips of generated graphs, broken text."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazyviz.analysis.ir import IRParseError, parse_ir

SAMPLE = """IR {
  %0 = [Float[16,32]] lazy_tensors::device_data(), device=CPU0, NodeType=N5torch4lazy10DeviceDataE
  %1 = [Float[128,64]] aten::view_copy(%0), size=128 64, NodeType=N5torch4lazy8ViewCopyE
  %2 = [Float[8,16,64], Float[8,16,1], Float[8,16,1]] aten::native_layer_norm(%1, %0), num_outputs=3, normalized_shape=64, eps=1e-05, NodeType=X
  %3 = [Float[8,16,1]] aten::add(%2.1, %2.2), ROOT=0, NodeType=N5torch4lazy9AddTensorE
}
"""


def test_parses_torch_forms() -> None:
    graph = parse_ir(SAMPLE)
    assert [n.id for n in graph.nodes] == ["%0", "%1", "%2", "%3"]
    view, norm, add = graph.nodes[1:]
    assert view.attrs == {"size": "128 64"} and str(view.outputs[0]) == "Float[128,64]"
    assert len(norm.outputs) == 3 and norm.attrs["eps"] == "1e-05" and "NodeType" not in norm.attrs
    assert add.operands == ("%2.1", "%2.2") and add.root == 0 and graph.nodes[0].is_input
    assert graph.users()["%2"] == ["%3", "%3"]


@pytest.mark.parametrize("text, message", [
    ("%0 = Float aten::x()", "line 1: not an IR node"),
    ("%0 = [Float[2]] aten::x(%7)", "used before it is defined"),
    ("%0 = [Float[2]] aten::x()\n%0 = [Float[2]] aten::y()", "defined twice"),
    ("%0 = [Float[2]] aten::x(), novalue", "bad attribute"),
    ("%0 = [Float[2]] aten::x(x1)", "bad operand"),
])
def test_clear_errors(text: str, message: str) -> None:
    with pytest.raises(IRParseError, match=message):
        parse_ir(text)


ops = st.sampled_from(["aten::add", "aten::mm", "aten::view_copy", "aten::relu", "prim::Constant"])
dtypes = st.sampled_from(["Float", "Double", "Long", "Bool"])
shapes = st.lists(st.integers(1, 512), max_size=4)
attr_values = st.one_of(st.integers(-5, 5).map(str), st.lists(st.integers(0, 64), min_size=1, max_size=4)
                        .map(lambda xs: " ".join(map(str, xs))), st.just("null"), st.just("1e-05"))


@st.composite
def graphs(draw):
    lines, nodes = ["IR {"], []
    for index in range(draw(st.integers(1, 12))):
        outputs = draw(st.lists(st.tuples(dtypes, shapes), min_size=1, max_size=3))
        operands = [f"%{draw(st.integers(0, index - 1))}" for _ in range(draw(st.integers(0, 3)))] if index else []
        attrs = draw(st.dictionaries(st.sampled_from(["dim", "size", "p", "alpha"]), attr_values, max_size=3))
        op = draw(ops)
        types = ", ".join(f"{d}[{','.join(map(str, s))}]" for d, s in outputs)
        tail = "".join(f", {k}={v}" for k, v in attrs.items())
        lines.append(f"  %{index} = [{types}] {op}({', '.join(operands)}){tail}, NodeType=T")
        nodes.append((op, outputs, operands, attrs))
    lines.append("}")
    return "\n".join(lines), nodes


@settings(max_examples=200, deadline=None)
@given(graphs())
def test_round_trip(generated) -> None:
    text, expected = generated
    graph = parse_ir(text)
    assert len(graph) == len(expected)
    for node, (op, outputs, operands, attrs) in zip(graph.nodes, expected):
        assert node.op == op and list(node.operands) == operands and node.attrs == attrs
        assert [(t.dtype, list(map(int, t.shape))) for t in node.outputs] == [(d, s) for d, s in outputs]


@settings(max_examples=300, deadline=None)
@given(graphs(), st.data())
def test_broken_text_never_crashes(generated, data) -> None:
    text = generated[0]
    cut = data.draw(st.integers(0, len(text)))
    junk = data.draw(st.text(max_size=8))
    broken = text[:cut] + junk + text[cut + data.draw(st.integers(0, 5)):]
    try:
        parse_ir(broken)
    except IRParseError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_text_parses_or_says_why(text: str) -> None:
    try:
        parse_ir(text)
    except IRParseError as error:
        assert str(error).startswith("line ")
