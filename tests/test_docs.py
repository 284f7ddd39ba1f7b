"""The docs: README is the five-minute front page with pictures from real runs, docs/ the
rest, and the site builds with --strict (a broken link or a page left out fails here)."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import ROOT


def test_readme_is_a_front_page_with_pictures() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    pictures = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", readme)
    assert len(pictures) >= 2
    for picture in pictures:
        text = (ROOT / picture).read_text()
        assert text.lstrip().startswith(("<svg", "<?xml")) and "</svg>" in text, picture


def test_the_docs_home_is_the_readme() -> None:
    """One front page: docs/index.md is README with its docs/ links made relative."""
    readme = (ROOT / "README.md").read_text()
    assert (ROOT / "docs" / "index.md").read_text() == readme.replace("](docs/images/", "](images/").replace("](docs/", "](")


def test_the_site_builds_strictly(tmp_path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1",
                                                                                  "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    pages = sorted(p.relative_to(tmp_path / "site").parts[0] for p in (tmp_path / "site").glob("*/index.html"))
    assert len(pages) >= 6, pages


def test_the_layout_names_every_module() -> None:
    """docs/how-it-works.md's Layout is how a contributor finds their way: every module of
    lazyviz/ and tui/ is named there (a new one without a line fails here)."""
    doc = (ROOT / "docs" / "how-it-works.md").read_text()
    layout = doc.split("## Layout")[1].split("\n## ")[0]
    missing = [str(path.relative_to(ROOT)) for folder in ("lazyviz", "tui") for path in sorted((ROOT / folder).rglob("*.py"))
               if path.name != "__init__.py" and not re.search(rf"[`/]{re.escape(path.name)}`", layout)]
    assert missing == []
