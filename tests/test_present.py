"""Unit tests of lazyviz.present: what every renderer shows the same way."""
from __future__ import annotations

import os
from pathlib import Path

from builders import IR16, IR24

from lazyviz.analysis.diff import diff_texts
from lazyviz.analysis.findings import Finding
from lazyviz.present import ADDED, CARRIED, ORIGIN, diff_marks, finding_groups, short_path, site_text
from lazyviz.trace.model import Frame


def test_short_path_rules() -> None:
    home = str(Path.home())
    assert short_path("/repo/src/train.py", "/repo") == "src/train.py"
    assert short_path(os.path.join(home, "x", "t.py"), "/elsewhere").startswith("~" + os.sep)
    assert short_path("/opt/t.py", "/repo") == "/opt/t.py"
    assert site_text(Frame("/repo/t.py", 3, "f"), "/repo") == "t.py:3" and site_text(None) == "?"


def test_diff_marks_keep_the_origin() -> None:
    diff = diff_texts(IR16, IR24)
    marks = diff_marks(diff)
    assert marks["%0"] == ORIGIN and set(marks.values()) <= {ORIGIN, CARRIED, ADDED}
    assert list(marks.values()).count(ORIGIN) == len({c.node for c in diff.origins if c.node})
    assert CARRIED in marks.values()


def test_diff_texts_is_none_for_text_that_is_not_ir() -> None:
    assert diff_texts("not ir", IR16) is None and diff_texts("", "") is None


def test_findings_of_one_kind_at_one_site_are_one_group_worst_first() -> None:
    site = Frame("/x/train.py", 191, "train")
    repeated = [Finding("missing_mark_step", "warning", f"graph {n} repeats", site, (n,), cost_ms=10.0) for n in range(13)]
    fallback = Finding("fallback", "warning", "norm falls back", site, (99,), details={"op": "aten::norm"}, cost_ms=500.0)
    crash = Finding("crash", "error", "raised", Frame("/x/train.py", 239, "main"), ())
    groups = finding_groups([*repeated, fallback, crash])
    # Errors first, then the root cause (a missing mark_step) before a costlier symptom.
    assert [len(g) for g in groups] == [1, 13, 1] and groups[0][0] is crash and groups[2][0] is fallback
