"""The HTML report, opened for real in headless Chromium."""
from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import cli

pytestmark = pytest.mark.torch  # each test runs real scripts on torch's lazy backend

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")

HOSTILE_SCRIPT = """
import torch, torch._lazy, torch._lazy.ts_backend
torch._lazy.ts_backend.init()
x = torch.ones(3, device="lazy")
for _ in range(3):
    x = x * 2
    print(x.sum().item())
    torch._lazy.mark_step()
"""


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0", *args],
        capture_output=True, text=True, timeout=120,
    )


class Cells(HTMLParser):
    """The executions table's cells, row by row, and every script element."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.scripts = 0
        self._in_table = self._in_cell = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "script":
            self.scripts += 1
        if tag == "table" and ("id", "executions") in attrs:
            self._in_table = True
        if self._in_table and tag == "tr":
            self.rows.append([])
        if self._in_table and tag == "td":
            self._in_cell = True
            self.rows[-1].append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._in_cell = False
        if tag == "table":
            self._in_table = False

    def handle_data(self, data: str) -> None:
        if self._in_cell:
            self.rows[-1][-1] += data


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hostile")
    script = folder / "evil<script>alert('x')<&>.py"
    script.write_text(HOSTILE_SCRIPT)
    trace = folder / "h.trace"
    assert cli("run", "--no-tui", "-o", trace, script).status == 0
    report = folder / "report.html"
    result = cli("report", trace, "-o", report)
    assert result.status == 0, result.stderr
    return report


def test_report_escapes_everything_from_the_trace(hostile_report: Path) -> None:
    text = hostile_report.read_text()
    assert "<script>alert(" not in text
    assert "evil&lt;script&gt;alert(&#x27;x&#x27;)&lt;&amp;&gt;.py" in text
    parsed = Cells()
    parsed.feed(text)
    assert parsed.scripts == 1  # ours, inline; nothing from the trace
    assert "<link" not in text and "src=\"http" not in text  # self-contained


@needs_chromium
def test_report_loads_in_chromium_and_sorts(hostile_report: Path, tmp_path: Path) -> None:
    loaded = chromium(tmp_path, "--dump-dom", f"{hostile_report.as_uri()}#sort=-sync_ms")
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    console = [line for line in loaded.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == []
    dom = Cells()
    dom.feed(loaded.stdout)
    rows = [row for row in dom.rows if row]
    assert len(rows) == 6
    sync_ms = [float(row[7]) for row in rows]
    assert sync_ms == sorted(sync_ms, reverse=True)  # sorted by the page's own script
    assert 'data-sorted="-sync_ms"' in loaded.stdout
    assert any(row[2] == "item" for row in rows)


@needs_chromium
def test_report_screenshot(hostile_report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    result = chromium(tmp_path, "--window-size=1200,900", f"--screenshot={shot}", hostile_report.as_uri())
    assert result.returncode == 0 and shot.stat().st_size > 20_000  # a rendered page, not a blank one


def test_report_leads_with_problems_and_stays_small(sample_trace, tmp_path: Path) -> None:
    """transformer_adamw: the fallback op is on the page (not only in a tooltip), linked to
    its executions; only the graphs the problems point at are drawn; well under 2 MB."""
    report = tmp_path / "t.html"
    assert cli("report", sample_trace("transformer_adamw"), "-o", report).status == 0
    text = report.read_text()
    assert report.stat().st_size < 2_000_000
    assert text.index("<h2>Problems") < text.index("<h2>Time per step") < text.index("<h2>Executions")
    assert "op: <code>aten::lerp.Scalar</code>" in text
    first = text.split('href="#e-', 1)[1].split('"', 1)[0]
    assert f'<tr id="e-{first}"' in text  # the link lands on its row
    assert text.count('<div class="drawing"') <= 8 and "Other graphs" in text
    # A fallback's drawing is the work pending when the op fell back, not a 1-node input
    # graph coloured as a recompile's change.
    drawn = re.findall(r"<summary>graph <code>\w+</code>: (\d+) nodes, at execution \d+ \((\w+)", text)
    assert drawn and all(int(nodes) > 3 for nodes, cause in drawn if cause == "fallback")
    assert "origin of the change" not in text


@needs_chromium
def test_drawings_fit_the_page_and_the_fallback_is_marked(sample_trace, tmp_path: Path) -> None:
    report = tmp_path / "f.html"
    assert cli("report", sample_trace("fallback_mse"), "-o", report).status == 0
    text = report.read_text()
    assert "taken to the CPU by the fallback aten::mse_loss" in text  # the drawing's legend
    # Measure the laid-out page in Chromium: every drawing within the window's width.
    probe = ("<script>addEventListener('load',()=>{const w=innerWidth;const s=[...document.querySelectorAll("
             "'.drawing svg')].map(e=>e.getBoundingClientRect().width);document.title='fits:'+s.length+':'+"
             "s.every(x=>x<=w)+':'+(document.documentElement.scrollWidth<=w);});</script>")
    measured = tmp_path / "measured.html"
    measured.write_text(text.replace("</body>", probe + "</body>"))
    loaded = chromium(tmp_path, "--window-size=900,800", "--virtual-time-budget=3000", "--dump-dom", measured.as_uri())
    assert "<title>fits:" in loaded.stdout, loaded.stderr[-2000:]
    drawn, each_fits, page_fits = loaded.stdout.split("<title>fits:")[1].split("</title>")[0].split(":")
    assert int(drawn) >= 1 and each_fits == "true" and page_fits == "true"


@needs_chromium
def test_svg_diff_has_a_legend_and_renders(sample_trace, tmp_path: Path) -> None:
    import xml.etree.ElementTree as ElementTree

    svg = tmp_path / "diff.svg"
    assert cli("export", sample_trace("batch_size_change"), "--execution", "4", "--diff", "-o", svg).status == 0
    text = svg.read_text()
    assert "origin of the change" in text and "input (device data)" in text and "graph output" in text
    ElementTree.fromstring(svg.read_bytes())  # well-formed
    shot = tmp_path / "diff.png"
    result = chromium(tmp_path, "--window-size=1000,800", f"--screenshot={shot}", svg.as_uri())
    assert result.returncode == 0 and shot.stat().st_size > 20_000  # drawn, not blank
    fallback = tmp_path / "fallback.svg"
    assert cli("export", sample_trace("fallback_mse"), "--execution", "0", "-o", fallback).status == 0
    nodes = ElementTree.fromstring(fallback.read_bytes())
    ns = {"svg": "http://www.w3.org/2000/svg"}
    marked = [g.find("svg:title", ns).text for g in nodes.iter("{http://www.w3.org/2000/svg}g")
              if g.get("class") == "node" and any(p.get("fill") == "#ead7ff" for p in g.iter()
                                                  if p.tag.endswith(("polygon", "path")))]
    assert marked  # the values the fallback took to the CPU: the graph's outputs


@needs_chromium
def test_charts_fill_the_page_and_a_run_without_steps_charts_its_syncs(sample_trace, tmp_path: Path) -> None:
    probe = ("<script>addEventListener('load',()=>{const c=[...document.querySelectorAll('svg.chart')].map("
             "e=>Math.round(e.getBoundingClientRect().width));document.title='charts:'+innerWidth+':'+c.join(',');"
             "});</script>")
    widths = {}
    for sample in ("clean_mlp", "missing_mark_step"):
        report = tmp_path / f"{sample}.html"
        assert cli("report", sample_trace(sample), "-o", report).status == 0
        page = tmp_path / f"{sample}-measured.html"
        page.write_text(report.read_text().replace("</body>", probe + "</body>"))
        loaded = chromium(tmp_path, "--window-size=1280,900", "--virtual-time-budget=3000", "--dump-dom", page.as_uri())
        window, charts = loaded.stdout.split("<title>charts:")[1].split("</title>")[0].split(":")
        widths[sample] = (int(window), [int(w) for w in charts.split(",")])
    # Time per step, then the process's peak memory by step.
    window, [steps, memory] = widths["clean_mlp"]
    assert steps > 0.9 * (window - 60) and memory > 0.9 * (window - 60)  # the page's margins aside
    assert 'aria-label="peak resident memory by step"' in (tmp_path / "clean_mlp.html").read_text()
    # No mark_step(): graph size and sync time per sync, the growth visible at a glance, and
    # the memory by execution.
    window, stepless = widths["missing_mark_step"]
    assert len(stepless) == 3 and all(w > 0.9 * (window - 60) for w in stepless)
    html = (tmp_path / "missing_mark_step.html").read_text()
    assert "graph size per sync" in html and 'aria-label="peak resident memory by execution"' in html
