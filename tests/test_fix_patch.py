"""`lazyviz fix --try --patch`: the user's own edit, proved the way lazyviz proves its
own. The diff reader on source text (git's and diff -u's forms, hunks moved by edits
above them, CRLF, a missing last newline, files outside the script's folder), then real
runs on torch's lazy backend: the patched copy's counts, findings and output beside the
original's, the user's files untouched."""
from __future__ import annotations

import difflib
import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import SAMPLES, cli

from lazyviz.fix.patch import PatchError, edited_copy, is_diff, patched_texts

TRAIN = "".join(f"line {n}\n" for n in range(1, 21))


def diff(old: str, new: str, name: str = "train.py", git: bool = True) -> str:
    a, b = (f"a/{name}", f"b/{name}") if git else (name, name)
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), a, b))


def folder_with(tmp_path: Path, text: str = TRAIN, name: str = "train.py") -> Path:
    folder = tmp_path / "project"
    folder.mkdir(exist_ok=True)
    (folder / name).write_bytes(text.encode())
    return folder


def apply(patch: str, folder: Path, cwd: Path | None = None) -> dict[str, str]:
    return patched_texts(patch, cwd or folder, folder, lambda path: path.read_bytes().decode())


def test_a_diff_in_gits_form_and_in_diff_us_applies(tmp_path: Path) -> None:
    new = TRAIN.replace("line 3\n", "line three\n").replace("line 15\n", "line 15\nadded\n")
    for git in (True, False):
        patch = diff(TRAIN, new, git=git)
        assert is_diff(patch)
        folder = folder_with(tmp_path)
        assert apply(patch, folder) == {str(folder / "train.py"): new}


def test_a_hunk_applies_where_lines_added_above_it_moved_it(tmp_path: Path) -> None:
    # The user's diff was made before they added two lines at the top (not in the diff).
    folder = folder_with(tmp_path, "import os\nimport sys\n" + TRAIN)
    patch = diff(TRAIN, TRAIN.replace("line 12\n", "line twelve\n"))
    assert apply(patch, folder)[str(folder / "train.py")] == "import os\nimport sys\n" + TRAIN.replace(
        "line 12\n", "line twelve\n")


def test_a_hunk_whose_lines_are_not_there_is_one_clear_error(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, TRAIN.replace("line 12\n", "line 12 changed since\n"))
    with pytest.raises(PatchError, match=r"train.py: hunk 1 \(at line 9\) does not apply"):
        apply(diff(TRAIN, TRAIN.replace("line 12\n", "line twelve\n")), folder)


def test_crlf_files_keep_their_endings_and_a_missing_last_newline_stays_missing(tmp_path: Path) -> None:
    crlf = TRAIN.replace("\n", "\r\n")
    folder = folder_with(tmp_path, crlf)
    patch = diff(TRAIN, TRAIN.replace("line 2\n", "line two\n"))
    assert apply(patch, folder)[str(folder / "train.py")] == crlf.replace("line 2\r\n", "line two\r\n")
    # diff marks a last line without a newline; the patched file ends as the diff says.
    (folder / "train.py").write_text("a\nb\nc")
    marked = subprocess.run(["diff", "-u", "train.py", "-"], input="a\nB\nc", text=True, capture_output=True,
                            cwd=folder).stdout
    assert "\\ No newline at end of file" in marked
    assert apply(marked, folder)[str(folder / "train.py")] == "a\nB\nc"


def test_a_file_outside_the_scripts_folder_or_a_deletion_is_refused(tmp_path: Path) -> None:
    folder = folder_with(tmp_path)
    (tmp_path / "elsewhere.py").write_text(TRAIN)
    with pytest.raises(PatchError, match="outside the script's folder"):
        apply(diff(TRAIN, TRAIN + "x\n", "../elsewhere.py", git=False), folder)
    deletion = "--- a/train.py\n+++ /dev/null\n@@ -1,1 +0,0 @@\n-line 1\n"
    with pytest.raises(PatchError, match="deletes it"):
        apply(deletion, folder)
    with pytest.raises(PatchError, match="no file in it"):
        apply("just words\n", folder)
    with pytest.raises(PatchError, match="line 2 starts a hunk before any '--- file' line"):
        apply("just words\n@@ -1 +1 @@\n", folder)


def test_a_new_file_in_the_folder_and_an_edited_copy_by_name(tmp_path: Path) -> None:
    folder = folder_with(tmp_path)
    added = "--- /dev/null\n+++ b/helpers.py\n@@ -0,0 +1,2 @@\n+def norm(x):\n+    return x\n"
    assert apply(added, folder) == {str(folder / "helpers.py"): "def norm(x):\n    return x\n"}
    copy = tmp_path / "mine" / "train.py"
    copy.parent.mkdir()
    copy.write_text(TRAIN + "edited\n")
    assert not is_diff(copy.read_text())
    assert edited_copy(copy, folder) == str(folder / "train.py")
    with pytest.raises(PatchError, match="neither a unified diff nor a copy"):
        edited_copy(tmp_path / "other.py", folder)


# -- real runs ------------------------------------------------------------------------
def hashes(folder: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def item_in_loop_project(tmp_path: Path) -> tuple[Path, Path, str]:
    """The item-per-step sample in a project of its own, traced: (folder, trace, its text)."""
    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(SAMPLES / "item_in_loop.py", folder)
    trace = tmp_path / "item.trace"
    result = cli("run", "--no-tui", "-o", trace, "item_in_loop.py", cwd=folder)
    assert result.status == 0, result.stderr
    return folder, trace, (folder / "item_in_loop.py").read_text()


# The user's own edit: keep each step's loss on the device, print them all after the loop.
HAND_EDIT = [("    for step in range(args.steps):\n",
              "    losses = []\n    for step in range(args.steps):\n"),
             ("        print(f\"step {step} loss {loss.item():.4f}\")\n",
              "        losses.append(loss.detach())\n"),
             ("        torch._lazy.mark_step()\n",
              "        torch._lazy.mark_step()\n    for step, loss in enumerate(losses):\n"
              "        print(f\"step {step} loss {loss.item():.4f}\")\n")]


def hand_edited(text: str) -> str:
    for old, new in HAND_EDIT:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


@pytest.mark.torch
def test_a_hand_written_diff_is_proved_like_lazyviz_own_edit(tmp_path: Path) -> None:
    folder, trace, text = item_in_loop_project(tmp_path)
    patch = tmp_path / "mine.diff"
    patch.write_text(diff(text, hand_edited(text), "item_in_loop.py"))
    before = hashes(folder)
    result = cli("fix", trace, "--try", "--patch", patch, cwd=folder)
    assert result.status == 0, result.stderr
    # The edit as it was applied, in the form lazyviz prints its own.
    assert result.stdout.startswith("--- a/item_in_loop.py\n+++ b/item_in_loop.py\n@@ ")
    assert "\n+        losses.append(loss.detach())\n" in result.stdout
    err = result.stderr
    assert "lazyviz: 1 finding in the trace" in err and "trying your patch on a copy" in err
    rows = {line.split("  ")[1].strip(): line.split()[-2:] for line in err.splitlines()
            if line.startswith("  ") and len(line.split()) >= 3}
    assert rows["executions per step"] == ["2.0", "1.0"]
    assert "findings gone:" in err and "item()" in err.split("findings gone:")[1]
    assert "findings left:" not in err and "output: the same" in err
    assert hashes(folder) == before  # proved on a copy: the user's files are as they were


@pytest.mark.torch
def test_an_edited_copy_is_proved_and_a_patch_that_does_not_apply_is_one_line(tmp_path: Path) -> None:
    folder, trace, text = item_in_loop_project(tmp_path)
    copy = tmp_path / "edited" / "item_in_loop.py"
    copy.parent.mkdir()
    copy.write_text(hand_edited(text))
    result = cli("fix", trace, "--try", "--patch", copy, cwd=folder)
    assert result.status == 0, result.stderr
    assert "output: the same" in result.stderr and "findings gone:" in result.stderr
    stale = tmp_path / "stale.diff"
    stale.write_text(diff(text.replace("loss.backward()", "loss.backward()  # was"), hand_edited(text),
                          "item_in_loop.py"))
    for args, said in (((stale,), "does not apply"), ((stale, "--write"), "--write applies lazyviz's edits"),
                       ((stale, "--until-clean"), "one at a time"),
                       ((tmp_path / "missing.diff",), "no such file")):
        refused = cli("fix", trace, "--try", "--patch", *args, cwd=folder)
        assert refused.status != 0 and "Traceback" not in refused.stderr
        assert said in refused.stderr and len(refused.stderr.strip().splitlines()) == 1, refused.stderr


@pytest.mark.torch
def test_a_hand_written_clipping_in_the_adamw_fine_tune_is_proved(tmp_path: Path) -> None:
    # The Hugging Face classifier with the examples' AdamW and clip_grad_norm_: the user
    # writes the clipping themselves from ops that lower, as a diff; --patch measures it.
    folder = tmp_path / "project"
    folder.mkdir()
    program = (Path(__file__).parent / "programs" / "bert_classifier.py").read_text()
    (folder / "bert_classifier.py").write_text(program)
    trace = tmp_path / "bert.trace"
    assert cli("run", "--no-tui", "-o", trace, "bert_classifier.py", "--adamw", "--steps", "4", cwd=folder).status == 0
    clipped = "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
    mine = ("        grads = [p.grad for p in model.parameters() if p.grad is not None]\n"
            "        norm = torch.stack([(g * g).sum() for g in grads]).sum().sqrt()\n"
            "        for g in grads:\n"
            "            g.mul_(torch.clamp(1.0 / (norm + 1e-6), max=1.0))\n")
    assert program.count(clipped) == 1
    patch = tmp_path / "clip.diff"
    patch.write_text(diff(program, program.replace(clipped, mine), "bert_classifier.py"))
    result = cli("fix", trace, "--try", "--patch", patch, cwd=folder)
    assert result.status == 0, result.stderr
    before, after = (float(cell) for cell in result.stderr.split("executions per step")[1].split()[:2])
    # The tiny BERT has 41 parameters: torch's clipping synced once for each, every step.
    assert before - after >= 41
    gone = result.stderr.split("findings gone:")[1]
    assert "clip_grad_norm_" in gone and "linalg_vector_norm" in gone
