"""A run's graphs parsed once and handed on (lazyviz.analysis.graphs): every analysis, the
report and the renderers ask the store, and what they say does not depend on how many
parsed graphs it keeps."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from builders import ex, run_info

import lazyviz.analysis.graphs as graphs_module
from lazyviz.analysis import analyze
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.run import Run
from lazyviz.export.report import json_report

ROOT = Path(__file__).resolve().parent.parent


def shape_ir(length: int, nodes: int = 12) -> str:
    """A step's IR at one sequence length: the length reaches every node."""
    lines = ["IR {", f"  %0 = [Float[4,{length},8]] lazy_tensors::device_data(), device=CPU0, NodeType=D",
             "  %1 = [Float[8,8]] lazy_tensors::device_data(), device=CPU0, NodeType=D"]
    ops = ("aten::matmul", "aten::add", "aten::relu")
    for index in range(2, nodes):
        lines.append(f"  %{index} = [Float[4,{length},8]] {ops[index % 3]}(%{index - 1}, %1), NodeType=N")
    lines[-1] += ", ROOT=0"
    return "\n".join(lines + ["}"]) + "\n"


def padded_run(steps: int = 30) -> tuple[list, dict[str, str]]:
    """Per-batch padding: each step's batch has its own length, a recompile each; the
    lengths come back now and then (a cache hit)."""
    lengths = [8 + (step * 7) % 13 for step in range(steps)]
    seen: set[int] = set()
    executions = []
    for step, length in enumerate(lengths):
        executions.append(ex(step, step=step, graph=f"g{length}", nodes=12, cache="hit" if length in seen else "miss"))
        seen.add(length)
    return executions, {f"g{length}": shape_ir(length) for length in set(lengths)}


def test_each_graph_is_parsed_once_for_the_whole_report(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []
    real = graphs_module.parse_ir
    monkeypatch.setattr(graphs_module, "parse_ir", lambda text: parsed.append(text) or real(text))
    executions, texts = padded_run()
    run = Run.of(run_info(steps=30), executions, texts)
    report = json_report(run)  # the analysis, then every recompile's changes listed
    assert any(f["kind"] == "dynamic_shape" for f in report["findings"])
    assert len(parsed) == len(texts) and set(parsed) == set(texts.values())


def test_what_the_analysis_says_does_not_depend_on_how_many_graphs_stay_parsed(monkeypatch) -> None:
    executions, texts = padded_run()
    kept = json_report(Run.of(run_info(steps=30), executions, texts))
    monkeypatch.setattr(graphs_module, "KEPT_NODES", 30)  # two graphs at a time
    store = IRGraphs(texts)
    again = json_report(Run.of(run_info(steps=30), executions, store))
    assert store._parsed_nodes <= 30 + 12
    drop = {"cost_ms"}
    strip = lambda report: [{k: v for k, v in f.items() if k not in drop} for f in report["findings"]]
    assert strip(again) == strip(kept) and again["recompiles"] == kept["recompiles"]


def test_a_graph_parsed_for_one_analysis_is_handed_to_the_next() -> None:
    executions, texts = padded_run()
    store = IRGraphs(texts)
    first = analyze(run_info(steps=30), executions, store)
    graph = store.parsed("g8")
    second = analyze(run_info(steps=30), executions, store)
    assert store.parsed("g8") is graph
    assert [f.message for f in first.findings] == [f.message for f in second.findings]


def test_only_the_store_parses_ir() -> None:
    # Every analysis, renderer and tab asks IRGraphs for a graph: nothing else parses text.
    callers = []
    for path in [*ROOT.joinpath("lazyviz").rglob("*.py"), *ROOT.joinpath("tui").rglob("*.py")]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "parse_ir":
                callers.append(path.relative_to(ROOT).as_posix())
    assert callers == ["lazyviz/analysis/graphs.py"]
