"""The aligner and the classified diff, on small hand-written graphs."""
from __future__ import annotations

from lazyviz.analysis.diff import diff_graphs
from lazyviz.analysis.ir import parse_ir


def graph(*lines: str):
    return parse_ir("\n".join(lines))


BASE = (
    "%0 = [Float[16,32]] lazy_tensors::device_data(), device=CPU0",
    "%1 = [Float[32,8]] lazy_tensors::device_data(), device=CPU0",
    "%2 = [Float[16,8]] aten::mm(%0, %1)",
    "%3 = [Float[16,8]] aten::dropout(%2), p=0.1, train=1",
    "%4 = [Float[16,8]] aten::relu(%3), ROOT=0",
)


def test_identical_graphs_have_no_changes() -> None:
    diff = diff_graphs(graph(*BASE), graph(*BASE))
    assert diff.changes == () and diff.matched == 5


def test_batch_shape_change_names_the_input_as_origin() -> None:
    new = [line.replace("16,", "24,") for line in BASE]
    diff = diff_graphs(graph(*BASE), graph(*new))
    assert [(c.kind, c.node, c.before, c.after) for c in diff.origins] == [
        ("input_shape", "%0", "Float[16,32]", "Float[24,32]")]
    assert {c.node for c in diff.changes if not c.origin} == {"%2", "%3", "%4"}


def test_attribute_change_is_its_own_origin() -> None:
    new = [line.replace("p=0.1", "p=0.05") for line in BASE]
    diff = diff_graphs(graph(*BASE), graph(*new))
    assert [(c.kind, c.op, c.before, c.after) for c in diff.origins] == [
        ("attribute", "aten::dropout.p", "0.1", "0.05")]
    assert diff.first.describe() == "attribute: aten::dropout.p %3: 0.1 -> 0.05"


def test_dtype_change() -> None:
    new = [BASE[0].replace("Float", "Double"), *BASE[1:]]
    assert [c.kind for c in diff_graphs(graph(*BASE), graph(*new)).origins] == ["dtype"]


def test_added_op_is_found_and_the_rest_still_aligns() -> None:
    new = (*BASE[:3], "%3 = [Float[16,8]] aten::tanh(%2)",
           "%4 = [Float[16,8]] aten::dropout(%3), p=0.1, train=1", "%5 = [Float[16,8]] aten::relu(%4), ROOT=0")
    diff = diff_graphs(graph(*BASE), graph(*new))
    assert [(c.kind, c.op, c.node) for c in diff.origins] == [("op_added", "aten::tanh", "%3")]
    assert diff.matched == 5


def test_removed_op() -> None:
    new = (*BASE[:3], "%3 = [Float[16,8]] aten::relu(%2), ROOT=0")
    diff = diff_graphs(graph(*BASE), graph(*new))
    assert ("op_removed", "aten::dropout") in [(c.kind, c.op) for c in diff.origins]
