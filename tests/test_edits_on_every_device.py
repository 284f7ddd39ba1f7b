"""Every edit keeps the program whole on each device it ran on. A program that takes its
device as a flag (tests/programs/char_lm_device.py, `--device cpu|lazy`, the backend set
up only for lazy) is traced on the lazy device with the shape one edit answers; the
edit is applied as a user applies it (`git apply`), and the patched program, run on the
CPU, prints what the original prints there; an edit under the device test still runs on the
lazy device."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import assert_diff_applies, cli, python

PROGRAM = Path(__file__).parent / "programs" / "char_lm_device.py"

# (the edit, the program's flags that give it its finding, what the diff must hold)
CASES = [
    ("mark_step", [], "torch._lazy.mark_step()"),
    ("step_closure", ["--mark-step", "--log-every", "1"], "torch._lazy.add_step_closure("),
    ("lowered_adam", ["--adam", "--mark-step"], "with_lowered_step("),
    ("lowered_clip", ["--clip", "--mark-step"], "clip_grad_norm_lowered("),
    ("lowered_argmax", ["--argmax", "--mark-step"], ".max(dim=0).indices"),
    ("lowered_rnn", ["--lstm", "--mark-step"], "LSTMLowered("),
    ("cpu_state", ["--save", "model.pt", "--mark-step"], "state_on_cpu("),
    ("device_branch", ["--best", "--mark-step"], ".masked_fill((loss < best_loss) == 0, 0)"),
    ("split_pieces", ["--split", "--mark-step"], "split_lowered("),
    ("lowered_attention", ["--attention", "--mark-step"], "scaled_dot_product_attention_lowered("),
    ("baked_values", ["--schedule", "--mark-step"], "index_select("),
]

# The edits that put a call under the program's device test: run on the lazy device too.
GUARDED = frozenset({"mark_step", "step_closure", "cpu_state"})


@pytest.mark.torch
@pytest.mark.parametrize(("edit", "flags", "made"), CASES, ids=[case[0] for case in CASES])
def test_an_edit_leaves_the_program_running_on_the_cpu(tmp_path: Path, edit: str, flags: list[str],
                                                       made: str) -> None:
    folder = tmp_path / "program"
    folder.mkdir()
    shutil.copy(PROGRAM, folder / PROGRAM.name)
    on_cpu = python(PROGRAM.name, "--device", "cpu", *flags, cwd=folder)
    assert on_cpu.status == 0, on_cpu.stderr
    traced = cli("run", "--no-tui", "-o", "t.trace", PROGRAM.name, "--device", "lazy", *flags, cwd=folder)
    assert (folder / "t.trace").exists(), traced.stderr
    fixed = cli("fix", "t.trace", cwd=folder)
    assert fixed.status == 0, fixed.stderr
    diff = fixed.stdout[fixed.stdout.index("--- a/"):]
    assert made in diff, fixed.stdout
    assert_diff_applies(diff, folder)
    subprocess.run(["git", "apply", "-"], input=diff.encode(), cwd=folder, check=True)
    (folder / "model.pt").unlink(missing_ok=True)
    patched = python(PROGRAM.name, "--device", "cpu", *flags, cwd=folder)
    assert patched.status == 0, f"{patched.stderr}\n{diff}"
    assert patched.stdout == on_cpu.stdout
    # A device-specific call sits under a test of the device: the program's own, or the
    # state's (state_on_cpu syncs only where a tensor is on the lazy device).
    lines = diff.splitlines()
    for number, line in enumerate(lines):
        if line.startswith("+") and ("torch._lazy.mark_step()" in line or "add_step_closure(" in line):
            assert any('.type == "lazy"' in above for above in lines[number - 2:number]), diff
    if edit in GUARDED:  # the others' edits run on the lazy device in their own tests (--try)
        on_lazy = python(PROGRAM.name, "--device", "lazy", *flags, cwd=folder)
        assert on_lazy.status == 0, f"{on_lazy.stderr}\n{diff}"


@pytest.mark.torch
def test_a_stand_in_for_a_library_class_sits_in_a_file_of_its_own(tmp_path: Path) -> None:
    """The lowered LSTM goes in lazy_lowered.py beside the script, imported there in one
    line: a reviewer takes it or leaves it. --write makes that file; a file of that name
    that is the user's own is never written over (the stand-in then goes in the script)."""
    folder = tmp_path / "program"
    folder.mkdir()
    shutil.copy(PROGRAM, folder / PROGRAM.name)
    flags = ["--lstm", "--mark-step", "--steps", "2", "--tokens", "2"]
    cli("run", "--no-tui", "-o", "t.trace", PROGRAM.name, "--device", "lazy", *flags, cwd=folder)
    fixed = cli("fix", "t.trace", cwd=folder)
    assert "--- /dev/null\n+++ b/lazy_lowered.py\n" in fixed.stdout
    assert "+from lazy_lowered import LSTMLowered\n" in fixed.stdout
    assert "+class LSTMLowered(" not in fixed.stdout.split("+++ b/lazy_lowered.py")[0]  # not in the script
    assert_diff_applies(fixed.stdout[fixed.stdout.index("--- a/"):], folder)
    written = cli("fix", "--write", "t.trace", cwd=folder)
    assert written.status == 0, written.stderr
    assert "class LSTMLowered(torch.nn.LSTM)" in (folder / "lazy_lowered.py").read_text()
    assert python(PROGRAM.name, "--device", "lazy", *flags, cwd=folder).status == 0
    # The user's own lazy_lowered.py: left as it is.
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(PROGRAM, other / PROGRAM.name)
    (other / "lazy_lowered.py").write_text("VALUE = 1\n")
    cli("run", "--no-tui", "-o", "t.trace", PROGRAM.name, "--device", "lazy", *flags, cwd=other)
    fixed = cli("fix", "t.trace", cwd=other)
    assert "+++ b/lazy_lowered.py" not in fixed.stdout and "+class LSTMLowered(" in fixed.stdout
