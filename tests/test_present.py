"""Unit tests of lazyviz.present: what every renderer shows the same way."""
from __future__ import annotations

import os
from pathlib import Path

from builders import IR16, IR24, ex

from lazyviz.analysis.findings import FallbackDetails, Finding
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.summary import graph_memory, summarize
from lazyviz.present import (
    ADDED,
    CARRIED,
    ORIGIN,
    diff_marks,
    finding_groups,
    memory_text,
    short_path,
    site_text,
    size_text,
    transfers_text,
)
from lazyviz.trace.model import Frame


def diff_of(old: str, new: str):
    """What differs from one IR text to another, as the analysis asks it (IRGraphs.diff)."""
    return IRGraphs({"old": old, "new": new}).diff("old", "new")


def test_short_path_rules() -> None:
    home = str(Path.home())
    assert short_path("/repo/src/train.py", "/repo") == "src/train.py"
    assert short_path(os.path.join(home, "x", "t.py"), "/elsewhere").startswith("~" + os.sep)
    assert short_path("/opt/t.py", "/repo") == "/opt/t.py"
    assert site_text(Frame("/repo/t.py", 3, "f"), "/repo") == "t.py:3" and site_text(None) == "?"


def test_diff_marks_keep_the_origin() -> None:
    diff = diff_of(IR16, IR24)
    marks = diff_marks(diff)
    assert marks["%0"] == ORIGIN and set(marks.values()) <= {ORIGIN, CARRIED, ADDED}
    assert list(marks.values()).count(ORIGIN) == len({c.node for c in diff.origins if c.node})
    assert CARRIED in marks.values()


def test_diff_texts_is_none_for_text_that_is_not_ir() -> None:
    assert diff_of("not ir", IR16) is None and diff_of("", "") is None


def test_findings_of_one_kind_at_one_site_are_one_group_worst_first() -> None:
    site = Frame("/x/train.py", 191, "train")
    repeated = [Finding("missing_mark_step", "warning", f"graph {n} repeats", site, (n,), cost_ms=10.0) for n in range(13)]
    fallback = Finding("fallback", "warning", "norm falls back", site, (99,), cost_ms=500.0,
                       details=FallbackDetails(op="aten::norm", calls=1, executions_forced=1, per_step=1.0, call=None,
                                               library_line=None, library_fix=False))
    crash = Finding("crash", "error", "raised", Frame("/x/train.py", 239, "main"), ())
    groups = finding_groups([*repeated, fallback, crash])
    # Errors first, then the root cause (a missing mark_step) before a costlier symptom.
    assert [len(g) for g in groups] == [1, 13, 1] and groups[0][0] is crash and groups[2][0] is fallback


def test_xla_memory_and_copies_in_words() -> None:
    # XLA's Post Compilation Analysis, as the XLA backend keeps it in the backend text.
    text = ("Graph Hash: abc\n\nGraph input size: 0.000305 GB\nGraph output size: 0.000000 GB\n"
            "Aliased Input size: 0.000000 GB\nIntermediate tensor size: 1.500000 GB\nCompiled program size: x GB\n")
    memory = graph_memory(text)
    assert memory == {"inputs": 327491, "outputs": 0, "aliased_inputs": 0, "intermediates": 3 << 29}
    # A figure of 0 is one the client did not measure (PJRT CPU's outputs): left out, not said.
    assert memory_text(memory) == "inputs 319.8 KB, intermediates 1.5 GB"
    assert graph_memory("graph(%x : Tensor):\n  return (%x)") == {}  # TorchScript says nothing of it
    assert [size_text(n) for n in (4, 1023, 1024, 5 << 20)] == ["4 B", "1023 B", "1.0 KB", "5.0 MB"]


def test_copies_per_step_only_where_counted() -> None:
    copies = {"TransferToDevice": 1, "TransferToDeviceBytes": 65536}
    summary = summarize([ex(0, step=1, counters=copies), ex(1, step=2, counters=copies)], steps=2)
    assert summary.transfers == {"TransferToDevice": 2, "TransferToDeviceBytes": 131072}
    assert transfers_text(summary) == "to the device 1.0 (64.0 KB), from it 0.0 (0 B) per step"
    assert transfers_text(summarize([ex(0)])) == ""  # TorchScript counts none
