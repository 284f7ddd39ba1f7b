"""Every diff lazyviz prints applies, with `git apply` and with `patch -p1`, to the files
it was made from, whatever shape they have: no final newline, CRLF line ends, tabs, a
form feed, a hunk at the first and at the last line, several files, a subfolder, a
name with a space or a non-ASCII letter. Pure: the diff function and the two tools."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import assert_diff_applies
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from lazyviz.fix.patch import patched_texts
from lazyviz.fix.source import Change, Source, apply_changes, diff_texts, split_lines, unified_diff

pytestmark = pytest.mark.skipif(shutil.which("patch") is None or shutil.which("git") is None,
                                reason="needs git and GNU patch")


def applied_by_both(folder: Path, texts: dict[str, bytes], diff: str) -> dict[str, dict[str, bytes]]:
    """Each tool's result: the files written, then the diff applied for real."""
    results = {}
    for tool, command in (("git", ["git", "apply", "-"]), ("patch", ["patch", "--batch", "-p1"])):
        where = folder / tool
        for name, text in texts.items():
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            (where / name).write_bytes(text)
        done = subprocess.run(command, input=diff.encode(), cwd=where, capture_output=True)
        assert done.returncode == 0, f"{tool}: {done.stdout.decode()}{done.stderr.decode()}\n{diff}"
        results[tool] = {name: (where / name).read_bytes() for name in texts}
    return results


def check(tmp_path: Path, texts: dict[str, str], changes: list[Change]) -> str:
    """The diff of `changes` to `texts` (names relative to tmp_path/"run"), applied by
    both tools to the same bytes, and read back by `fix --try --patch`, gives exactly
    what lazyviz's own copy holds."""
    run = tmp_path / "run"
    absolute = {str(run / name): text for name, text in texts.items()}
    diff = unified_diff(absolute, changes, str(run))
    patched = apply_changes(absolute, changes)
    if not diff:  # the edit wrote back what was there
        assert patched == absolute
        return diff
    for tool, files in applied_by_both(tmp_path, {n: t.encode() for n, t in texts.items()}, diff).items():
        for name in texts:
            expected = patched.get(str(run / name), texts[name])
            assert files[name].decode() == expected, f"{tool} made {name} differ from lazyviz's copy:\n{diff}"
    for name, text in texts.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(text.encode())
    assert patched_texts(diff, run, run, lambda path: path.read_bytes().decode()) == patched
    return diff


def insert(path: Path, at: int, *lines: str) -> Change:
    return Change(str(path), at, at, lines)


def replace(path: Path, line: int, *lines: str) -> Change:
    return Change(str(path), line, line + 1, lines)


def test_a_file_without_a_final_newline(tmp_path: Path) -> None:
    """gat's main.py: the last line changed, and a line added after it."""
    text = "import torch\n\nfor epoch in range(3):\n    loss = step()\n    print(loss)"
    main = tmp_path / "run" / "main.py"
    diff = check(tmp_path, {"main.py": text}, [replace(main, 5, "    print(loss.item())\n")])
    assert diff.endswith("-    print(loss)\n\\ No newline at end of file\n+    print(loss.item())\n"
                         "\\ No newline at end of file\n")
    diff = check(tmp_path, {"main.py": text}, [insert(main, 6, "    torch._lazy.mark_step()\n")])
    assert "+    torch._lazy.mark_step()\n\\ No newline at end of file\n" in diff
    # A change above the end leaves the last line, and its missing newline, alone.
    diff = check(tmp_path, {"main.py": text}, [insert(main, 1, "import torch._lazy\n")])
    assert "No newline" not in diff


def test_crlf_line_ends_and_tabs_are_kept(tmp_path: Path) -> None:
    text = "import torch\r\nfor step in range(3):\r\n\tloss = step()\r\n\tprint(loss)\r\n"
    main = tmp_path / "run" / "main.py"
    diff = check(tmp_path, {"main.py": text}, [insert(main, 5, "\ttorch._lazy.mark_step()\r\n")])
    assert "+\ttorch._lazy.mark_step()\r\n" in diff and " \tprint(loss)\r\n" in diff
    # CRLF without a final line end.
    check(tmp_path, {"main.py": text.removesuffix("\r\n")}, [insert(main, 5, "\ttorch._lazy.mark_step()\r\n")])


def test_hunks_at_the_first_and_last_lines_of_several_files_in_subfolders(tmp_path: Path) -> None:
    texts = {"train.py": "a = 1\nb = 2\nc = 3\n", "models/net.py": "x = 1\n" * 20,
             "données/café.py": "y = 1\ny = 2\n", "my data/load it.py": "z = 1\n"}
    run = tmp_path / "run"
    diff = check(tmp_path, texts, [
        insert(run / "train.py", 1, "import torch._lazy\n"), replace(run / "train.py", 3, "c = 4\n"),
        replace(run / "models/net.py", 1, "x = 0\n"), replace(run / "models/net.py", 20, "x = 2\n"),
        replace(run / "données/café.py", 2, "y = 3\n"), replace(run / "my data/load it.py", 1, "z = 2\n")])
    assert "--- a/models/net.py\n" in diff and "--- a/données/café.py\n" in diff
    assert "--- a/my data/load it.py\t\n" in diff  # patch reads a name up to a tab
    assert diff.count("@@ ") == 5  # one a file, and net.py's two ends are two hunks


def test_a_form_feed_does_not_move_the_lines(tmp_path: Path) -> None:
    """str.splitlines cuts at a form feed; Python's parser (and ast's line numbers) does not."""
    text = "import torch\n\x0c\ndef main():\n    x = 1\x0c  # ^L\n    return x\n"
    source = Source("main.py", text)
    assert source.line(5) == "    return x\n" and len(source.lines) == len(split_lines(text)) == 5
    main = tmp_path / "run" / "main.py"
    check(tmp_path, {"main.py": text}, [replace(main, 5, "    return x + 1\n")])


def test_a_name_with_a_quote_is_quoted_as_git_quotes_it(tmp_path: Path) -> None:
    texts = {'say "hi".py': "print(1)\n"}
    diff = check(tmp_path, texts, [replace(tmp_path / "run" / 'say "hi".py', 1, "print(2)\n")])
    assert '--- "a/say \\"hi\\".py"\n' in diff


def test_the_diff_of_two_texts_lists_only_files_that_changed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    same, changed = str(run / "same.py"), str(run / "changed.py")
    diff = diff_texts({same: "a\n", changed: "a"}, {same: "a\n", changed: "b"}, str(run))
    assert diff == "--- a/changed.py\n+++ b/changed.py\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n" \
                   "\\ No newline at end of file\n"
    assert_diff_applies(diff, _written(run, {"changed.py": "a"}))


def _written(folder: Path, texts: dict[str, str]) -> Path:
    for name, text in texts.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


# Lines of a real file's kinds: code, tabs, non-ASCII, blank, a trailing space.
LINES = st.sampled_from(["x = 1", "\tif x:", "    print('é')", "", "y = x  ", "# ünïcode", "\x0c", "return"])


@st.composite
def edited_files(draw: st.DrawFn) -> tuple[str, list[tuple[int, int, tuple[str, ...]]]]:
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    lines = draw(st.lists(LINES, min_size=2, max_size=30))  # two: a file's line end is seen
    text = ending.join(lines) + (ending if draw(st.booleans()) else "")
    edits, at = [], 1
    for _ in range(draw(st.integers(1, 4))):
        at += draw(st.integers(0, 8))
        if at > len(lines) + 1:
            break
        end = min(at + draw(st.integers(0, 2)), len(lines) + 1)
        new = tuple(line + ending for line in draw(st.lists(LINES, min_size=at == end, max_size=3)))
        edits.append((at, end, new))
        at = end + 1
    return text, edits


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edited_files())
def test_any_edit_of_any_file_applies_with_both_tools(tmp_path: Path, case: tuple) -> None:
    text, edits = case
    assume(edits)
    for tool in ("git", "patch", "run"):
        shutil.rmtree(tmp_path / tool, ignore_errors=True)
    main = tmp_path / "run" / "main.py"
    check(tmp_path, {"main.py": text}, [Change(str(main), start, end, lines) for start, end, lines in edits])
