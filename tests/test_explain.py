"""Explanations and drawings of the samples' real traces."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import SAMPLES, SCRIPTS, cli, line_of

import lazyviz
from lazyviz.analysis.ir import parse_ir
from lazyviz.export.graphviz import render_svg, to_dot

SVG = "{http://www.w3.org/2000/svg}"


def report(path: Path) -> dict:
    result = cli("report", path, "--format", "json")
    assert result.status == 0, result.stderr
    return json.loads(result.stdout)


def test_batch_size_change_is_explained_as_a_batch_shape_change(sample_trace) -> None:
    found = report(sample_trace("batch_size_change"))
    late = [r for r in found["recompiles"] if not r["warmup"]]
    assert len(late) == 1
    recompile = late[0]
    assert recompile["step"] == 4 and recompile["closest_execution"] == 1 and recompile["same_site"]
    origins = [c for c in recompile["changes"] if c["origin"]]
    assert {(c["kind"], c["before"], c["after"]) for c in origins} == {
        ("input_shape", "Float[16,32]", "Float[24,32]"), ("input_shape", "Float[16,1]", "Float[24,1]")}
    script = SAMPLES / "batch_size_change.py"
    assert origins[0]["source"]["line"] == line_of(script, "torch._lazy.mark_step()")  # where it synced
    # ... and the lines that built the changed inputs (TS, per-node source lines).
    built = {c["after"]: c["built_at"] for c in origins}
    assert built["Float[24,32]"] == {"file": "batch_size_change.py", "function": "main",
                                     "line": line_of(script, 'inputs = torch.randn(batch, 32).to("lazy")')}
    assert built["Float[24,1]"]["line"] == line_of(script, 'targets = torch.randn(batch, 1).to("lazy")')
    [finding] = found["findings"]
    assert finding["kind"] == "recompile"
    assert finding["message"].endswith(f"built at batch_size_change.py:{built['Float[24,32]']['line']}")


@pytest.mark.parametrize(("sample", "kind", "built_by", "fix"), [
    ("python_number_aliasing", "aliasing", "p.sub_(p.grad * lr + p * weight_decay)", "as tensors"),
    ("dtype_change", "dtype", 'weights = load_weights(step, args.steps // 2).to("lazy")', "cast it once"),
    ("python_branch", "op_added", "loss = loss + l2 * sum(", "another path"),
])
def test_each_kind_of_recompile_names_the_line_that_built_the_change(
        sample_trace, sample: str, kind: str, built_by: str, fix: str) -> None:
    # One recompile after warm-up, compared with the graph of the step before at the
    # same site, its first origin of the expected kind, built at the expected line.
    found = report(sample_trace(sample))
    [late] = [r for r in found["recompiles"] if not r["warmup"]]
    with lazyviz.open(sample_trace(sample)) as trace:
        step_before = trace.execution(late["execution"] - 1).graph
    assert late["same_site"] and late["closest_graph"] == step_before
    first = next(c for c in late["changes"] if c["origin"])
    assert first["kind"] == kind, late["summary"]
    line = line_of(SAMPLES / f"{sample}.py", built_by)
    assert first["built_at"]["file"] == f"{sample}.py" and first["built_at"]["line"] == line
    [finding] = [f for f in found["findings"] if f["kind"] == "recompile"]
    assert f"{sample}.py:{line}" in finding["message"] and fix in finding["fix"]


def test_clean_run_has_no_findings(sample_trace) -> None:
    found = report(sample_trace("clean_mlp"))
    assert found["findings"] == [] and all(r["warmup"] for r in found["recompiles"])


def test_item_sample_has_one_extra_sync_finding(sample_trace) -> None:
    findings = report(sample_trace("item_in_loop"))["findings"]
    assert len(findings) == 1
    finding = findings[0]
    assert finding["kind"] == "extra_sync" and finding["details"]["count"] == 5
    assert finding["site"]["line"] == line_of(SAMPLES / "item_in_loop.py", "loss.item()")
    assert "add_step_closure" in finding["fix"]


def test_fallback_sample_names_both_ops_and_lines(sample_trace) -> None:
    findings = {f["details"]["op"]: f for f in report(sample_trace("fallback_mse"))["findings"]
                if f["kind"] == "fallback"}
    script = SAMPLES / "fallback_mse.py"
    assert findings["aten::mse_loss"]["site"]["line"] == line_of(script, "F.mse_loss(")
    assert findings["aten::mse_loss_backward"]["site"]["line"] == line_of(script, "loss.backward()")
    assert findings["aten::mse_loss"]["details"]["per_step"] == 1


def test_missing_mark_step_names_the_pattern(sample_trace) -> None:
    growth = [f for f in report(sample_trace("missing_mark_step"))["findings"] if f["kind"] == "missing_mark_step"]
    assert len(growth) == 1
    assert growth[0]["details"]["pattern"] == ["aten::mm", "aten::tanh", "aten::mul", "aten::add"]
    assert growth[0]["details"]["repeats"] == 12


def test_adamw_lerp_fallback_has_its_fix(sample_trace) -> None:
    findings = {f["details"]["op"]: f for f in report(sample_trace("transformer_adamw"))["findings"]
                if f["kind"] == "fallback"}
    lerp = findings["aten::lerp.Scalar"]
    assert lerp["site"]["line"] == line_of(SAMPLES / "transformer_adamw.py", "optimizer.step()")
    assert "lerp_" in lerp["fix"] and lerp["details"]["per_step"] > 10
    assert "mark_step() between loss.backward() and optimizer.step()" in lerp["fix"]


def svg_nodes(text: str) -> list[ET.Element]:
    return [g for g in ET.fromstring(text).iter(f"{SVG}g") if g.get("class") == "node"]


def test_export_svg_draws_every_node(sample_trace, tmp_path: Path) -> None:
    path = sample_trace("batch_size_change")
    out = tmp_path / "g.svg"
    result = cli("export", path, "--execution", "4", "--diff", "-o", out)
    assert result.status == 0, result.stderr
    with lazyviz.open(path) as trace:
        nodes = trace.execution(4).nodes
    drawn = svg_nodes(out.read_text())
    assert len(drawn) == nodes
    def filled(colour: str) -> list[ET.Element]:
        return [g for g in drawn if any(shape.get("fill") == colour for shape in g.iter())]

    # The two inputs whose shapes changed are the origins, drawn as inputs (rounded);
    # what their shapes flow into is marked apart; the key says which is which.
    origins, carried = filled("#ff8a8a"), filled("#ffe0e0")
    assert len(origins) == 2 and len(carried) > 2
    assert all(g.find(f"{SVG}title").text.startswith("%") for g in origins)
    text = out.read_text()
    assert "origin of the change" in text and "changed through its inputs" in text
    assert "built at batch_size_change.py:" in text  # tooltips name each node's line


def test_export_formats(sample_trace, tmp_path: Path) -> None:
    path = sample_trace("clean_mlp")
    ir = cli("export", path, "--execution", "1", "--format", "ir")
    assert ir.status == 0 and ir.stdout.startswith("IR {")
    backend = cli("export", path, "--execution", "1", "--format", "backend")
    assert backend.status == 0 and "graph(" in backend.stdout
    dot = cli("export", path, "--execution", "1", "-o", tmp_path / "g.dot")
    assert dot.status == 0 and (tmp_path / "g.dot").read_text().startswith("digraph")
    around = cli("export", path, "--execution", "1", "--around", "%5", "--depth", "1")
    assert around.status == 0 and "neighbourhood" in around.stdout
    assert len(svg_nodes(around.stdout)) < 10
    missing = cli("export", path, "--execution", "1", "--around", "%9999")
    assert missing.status == 2 and missing.stderr.count("\n") == 1


def test_large_graph_is_collapsed_and_says_so(sample_trace) -> None:
    path = sample_trace("missing_mark_step")
    result = cli("export", path, "--execution", "0", "--max-nodes", "20")
    assert result.status == 0
    assert "repeated 12 times" in result.stdout
    assert len(svg_nodes(result.stdout)) < 30


def test_labels_are_escaped() -> None:
    graph = parse_ir("%0 = [Float[2]] lazy_tensors::device_data()\n%1 = [Float[2]] aten::relu(%0), ROOT=0")
    hostile = 'execution at /tmp/<script>alert("x")</script> & \'q\'.py:3'
    svg = render_svg(to_dot(graph, hostile))
    root = ET.fromstring(svg)  # still well-formed XML
    texts = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert '<script>alert("x")</script> & \'q\'' in texts
    assert "<script>" not in svg  # escaped in the markup


@pytest.mark.torch
def test_training_loop_without_mark_step_gets_one_finding(tmp_path: Path) -> None:
    trace = tmp_path / "t.trace"
    script = SCRIPTS / "no_mark_step_loop.py"
    assert cli("run", "--no-tui", "-o", trace, script, "6").status == 0
    findings = report(trace)["findings"]
    assert [f["kind"] for f in findings] == ["missing_mark_step"]
    assert findings[0]["site"]["line"] == line_of(script, "{loss.item():.4f}")
    assert findings[0]["details"]["syncs"] == 6 and findings[0]["details"]["growth_per_sync"] > 0
    assert cli("check", trace, "--any-fallbacks").status == 1
