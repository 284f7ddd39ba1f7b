"""%%lazyviz in a real notebook: samples/notebook.ipynb executed by nbclient on an
ipykernel kernel, its outputs read as a user would see them, and the summary rendered
in headless Chromium."""
from __future__ import annotations

import re
from html import unescape
from pathlib import Path

import nbclient
import nbformat
import pytest

from lazyviz.trace import open as open_trace
from tests.test_html import chromium, needs_chromium

pytestmark = pytest.mark.torch

NOTEBOOK = Path(__file__).parent.parent / "samples" / "notebook.ipynb"


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> tuple[nbformat.NotebookNode, Path]:
    folder = tmp_path_factory.mktemp("notebook")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}}).execute()
    return notebook, folder


def outputs(notebook: nbformat.NotebookNode, starts: str) -> list[dict]:
    cell = next(c for c in notebook.cells if c.cell_type == "code" and c.source.startswith(starts))
    return cell.outputs


def html_of(cell_outputs: list[dict]) -> str:
    return next(o["data"]["text/html"] for o in cell_outputs if "text/html" in o.get("data", {}))


def text_of(html: str) -> str:
    return unescape(re.sub(r"<svg.*?</svg>", "", re.sub(r"\s+", " ", html), flags=re.S).replace("<", " <"))


def test_the_traced_cell_runs_as_usual_and_shows_its_findings_first(executed) -> None:
    notebook, folder = executed
    cell = outputs(notebook, "%%lazyviz")
    assert any(o.get("text") == "trained\n" for o in cell)  # the cell's own output is untouched
    html = html_of(cell)
    text = text_of(html)
    definitions = next(c for c in notebook.cells if "def train_step" in c.source)
    number = definitions.execution_count
    loss_line = definitions.source.splitlines().index(
        next(line for line in definitions.source.splitlines() if "mse_loss" in line)) + 1
    # Findings come first, each named by its cell and line.
    assert text.index("Findings") < text.index("executions in")
    assert "aten::mse_loss falls back to the CPU in mse_loss(): 7 calls" in text
    assert f"In [{number}], line {loss_line}" in text
    assert "recompiled: input shape Float[16,32] -> Float[4,32]" in text  # the last, short batch
    assert "<svg" in html  # the graph the first finding points at
    with open_trace(folder / "notebook.trace") as trace:
        assert trace.run.source == "notebook" and trace.run.complete
        assert trace.count() == 7 * 4  # per batch: mse_loss 2, its backward 1, mark_step 1


def test_a_saved_trace_and_the_python_api_show_the_same_way(executed) -> None:
    notebook, _ = executed
    assert "aten::mse_loss falls back" in text_of(html_of(outputs(notebook, "%lazyviz report")))
    result = next(o for o in outputs(notebook, "import lazyviz") if o["output_type"] == "execute_result")
    assert "aten::mse_loss falls back to the CPU in mse_loss(): 1 call" in result["data"]["text/plain"]


@needs_chromium
def test_the_summary_renders_in_chromium(executed, tmp_path: Path) -> None:
    notebook, _ = executed
    page = tmp_path / "summary.html"
    page.write_text(f"<!doctype html><meta charset=utf-8><body>{html_of(outputs(notebook, '%%lazyviz'))}</body>")
    loaded = chromium(tmp_path, "--window-size=1000,800", "--dump-dom", page.as_uri())
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert "<svg" in loaded.stdout and "Findings" in loaded.stdout
    shot = tmp_path / "summary.png"
    result = chromium(tmp_path, "--window-size=1000,800", f"--screenshot={shot}", page.as_uri())
    assert result.returncode == 0 and shot.stat().st_size > 20_000  # drawn, not a blank page


def test_the_traced_cell_is_named_by_the_number_ipython_shows(executed) -> None:
    # execution_count is already N+1 while cell N runs on IPython 9: the trace must say
    # In [N] for the %%lazyviz cell's own lines, on IPython 8 and 9 alike.
    notebook, folder = executed
    cell = next(c for c in notebook.cells if c.cell_type == "code" and c.source.startswith("%%lazyviz"))
    with open_trace(folder / "notebook.trace") as trace:
        first = trace.executions()[0]
        files = {frame.file for frame in trace.stack(first.stack_id)}
    assert f"In [{cell.execution_count}]" in files, files
    assert f"In [{cell.execution_count + 1}]" not in files
