"""Unit tests of lazyviz.export: every renderer, on traces made by the trace factory."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from builders import IR16, IR24, ex, run_info

import lazyviz
from lazyviz.analysis import analyze
from lazyviz.analysis.recompiles import explain_recompiles
from lazyviz.analysis.run import Run
from lazyviz.errors import LazyvizError
from lazyviz.export import EXPORT_FORMATS, REPORT_FORMATS, RenderOptions, renderer_for
from lazyviz.trace.schema import GraphRecord
from lazyviz.trace.synthetic import chain_ir, execution, write_trace


@pytest.fixture
def small_trace(tmp_path: Path) -> Path:
    path = tmp_path / "t.trace"
    records = [execution(i, step=i, graph="b16" if i < 4 else "b24", cache="miss" if i in (0, 4) else "hit")
               for i in range(6)]
    write_trace(path, records, [GraphRecord("b16", 6, IR16, "graph()", 0), GraphRecord("b24", 6, IR24, "graph()", 4)])
    return path


@pytest.fixture
def empty_trace(tmp_path: Path) -> Path:
    path = tmp_path / "e.trace"
    write_trace(path, [])
    return path


@pytest.mark.parametrize("fmt", list(REPORT_FORMATS))
def test_report_renderers_on_an_empty_and_a_small_trace(fmt: str, small_trace: Path, empty_trace: Path) -> None:
    renderer = renderer_for(REPORT_FORMATS, fmt, None, "text")
    for path in (empty_trace, small_trace):
        with lazyviz.open(path) as trace:
            text = renderer.render(Run(trace), RenderOptions())
        assert text.endswith("\n") and "train.py" in text
    assert "recompiled" in text and "Float[16,64]" in text


@pytest.mark.parametrize("fmt", [f for f in EXPORT_FORMATS if f not in ("svg", "hlo")])
def test_export_renderers(fmt: str, small_trace: Path, empty_trace: Path) -> None:
    renderer = renderer_for(EXPORT_FORMATS, fmt, None, "svg")
    with lazyviz.open(small_trace) as trace:
        text = renderer.render(Run(trace), RenderOptions(execution=4, diff=True))
    assert text
    with lazyviz.open(empty_trace) as trace:
        if renderer.needs_execution:
            with pytest.raises(lazyviz.TraceError, match="no execution 0"):
                renderer.render(Run(trace), RenderOptions(execution=0))
        else:
            assert json.loads(renderer.render(Run(trace), RenderOptions()))["traceEvents"]


def test_hlo_export_says_why_a_trace_has_none(small_trace: Path) -> None:
    """HLO is PyTorch/XLA's (tests/xla export it from a real run): on another backend's
    trace the export says so, in one line."""
    renderer = renderer_for(EXPORT_FORMATS, None, "graph.hlo", "svg")
    assert renderer.name == "hlo"
    with lazyviz.open(small_trace) as trace, pytest.raises(LazyvizError, match="whose graphs have no HLO"):
        renderer.render(Run(trace), RenderOptions(execution=4))


def test_renderer_from_suffix() -> None:
    assert renderer_for(REPORT_FORMATS, None, "r.md", "text").name == "markdown"
    assert renderer_for(REPORT_FORMATS, None, "r.html", "text").name == "html"
    assert renderer_for(REPORT_FORMATS, None, "r.json", "text").name == "json"
    assert renderer_for(EXPORT_FORMATS, None, "t.json", "svg").name == "chrome"
    assert renderer_for(EXPORT_FORMATS, None, None, "svg").name == "svg"


def test_markdown_table_survives_pipes(tmp_path: Path) -> None:
    path = tmp_path / "p.trace"
    write_trace(path, [execution(0, file="/repo/a|b.py")], argv=["a|b.py"])
    with lazyviz.open(path) as trace:
        text = renderer_for(REPORT_FORMATS, "markdown", None, "text").render(Run(trace), RenderOptions())
    assert "a\\|b.py" in text


def test_a_site_recompiling_every_step_is_counted_whole_but_compared_a_few_times() -> None:
    """Structure changes past the first EXPLAINED_PER_SITE at a site wait (a diff of large
    graphs costs seconds); value-only changes are always compared: they are the headline."""
    from lazyviz.analysis.recompiles import EXPLAINED_PER_SITE, is_compared
    from lazyviz.export.report import recompile_json

    grows = {f"n{n}": chain_ir(n) for n in range(10, 40)}  # a new op each step: another path
    executions = [ex(i, step=i, graph=f"n{10 + i}", cache="miss") for i in range(30)]
    recompiles = explain_recompiles(executions, grows)
    waiting = [r for r in recompiles if not is_compared(r)]
    assert len(recompiles) == 29 and len(waiting) == 29 - 1 - EXPLAINED_PER_SITE  # step 1 is warm-up
    assert not waiting[0].is_explained and recompile_json(waiting[0])["explained"] is False
    assert waiting[0].brief() == "+1 ops" and waiting[0].is_explained  # compared when asked
    found = [f for f in analyze(run_info(steps=30), executions, grows).findings if f.kind == "recompile"]
    assert sum(f.details.recompiles for f in found) == sum(len(f.executions) for f in found) == 28
    assert sum(f.details.compared for f in found) == EXPLAINED_PER_SITE
    [counted] = [f for f in found if f.details.recompiles > f.details.compared]  # the site's largest group
    assert f"the first {counted.details.compared} compared each the same kind of change" in counted.message

    shapes = {f"r{r}": chain_ir(12, rows=r) for r in range(16, 46)}  # the same ops, a new batch size
    executions = [ex(i, step=i, graph=f"r{16 + i}", cache="miss") for i in range(30)]
    assert all(is_compared(r) for r in explain_recompiles(executions, shapes))
    [finding] = analyze(run_info(steps=30), executions, shapes).findings
    assert finding.kind == "dynamic_shape" and len(finding.details.history) == 28


def test_a_small_runs_warm_up_recompile_is_compared_when_read_and_listed_as_compared() -> None:
    """No finding reads a warm-up recompile: the analysis leaves its diff until asked,
    and the JSON lists it as compared all the same, with its changes."""
    from lazyviz.analysis.recompiles import PendingRecompile, is_compared
    from lazyviz.export.report import recompile_json

    shapes = {f"r{r}": chain_ir(12, rows=r) for r in range(16, 22)}
    executions = [ex(i, step=i, graph=f"r{16 + i}", cache="miss") for i in range(6)]
    analysis = analyze(run_info(steps=6), executions, shapes)
    [warmup] = [r for r in analysis.recompiles if r.warmup]  # step 1's: step 0 is the site's first
    assert isinstance(warmup, PendingRecompile) and is_compared(warmup)
    assert "explained" not in warmup.__dict__  # the analysis did not diff it
    listed = recompile_json(warmup)
    assert listed["explained"] is True and listed["changes"] and "explained" in warmup.__dict__
    assert listed["summary"].startswith("input shape")


def test_json_report_lists_a_graph_pairs_changes_once(tmp_path: Path) -> None:
    # A cache thrashing between two known graphs: every execution a miss. 100,000 such
    # misses made a 988 MB report when each repeated its changes.
    graphs = [GraphRecord("g0", 40, chain_ir(40, 16), "", 0), GraphRecord("g1", 40, chain_ir(40, 24), "", 1)]
    path = tmp_path / "thrash.trace"
    misses = 2000
    write_trace(path, (execution(i, step=i, graph=f"g{i % 2}", cache="miss", nodes=40) for i in range(misses)), graphs)
    result = subprocess.run([sys.executable, "-m", "lazyviz", "report", str(path), "--format", "json"],
                            capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout) / misses < 1200  # bytes per miss
    report = json.loads(result.stdout)
    assert report["version"] == 2
    listed = [r for r in report["recompiles"] if r["changes"]]
    assert {(r["closest_graph"], r["graph"]) for r in listed} == {("g0", "g1"), ("g1", "g0")} and len(listed) == 2
    first = {(r["closest_graph"], r["graph"]): r["execution"] for r in listed}
    assert all(r["changes_same_as"] == first[(r["closest_graph"], r["graph"])]
               for r in report["recompiles"] if not r["changes"] and r["explained"] and not r["warmup"])
