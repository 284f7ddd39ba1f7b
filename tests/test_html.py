"""The HTML report, opened for real in headless Chromium."""
from __future__ import annotations

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
