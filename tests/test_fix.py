"""`lazyviz fix`: the edit for each finding with a mechanical fix, as a diff that applies,
proved by `--try` on a copy (the user's files untouched), written by `--write` only to
files unchanged since the trace; and `lazyviz run --steps N`, which bounds those runs.
Real scripts on torch's lazy backend: samples, pytorch/examples' shapes (tests/programs)."""
from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLES, assert_diff_applies, cli, line_of, row

import lazyviz
from lazyviz.analysis.findings import Finding, RecompileDetails
from lazyviz.analysis.run import Run
from lazyviz.fix.baked_values import _python_index, indices_as_data
from lazyviz.fix.device_branch import _choice, on_the_device
from lazyviz.fix.lowered_clip import LOWERED_CLIP, _clip_call
from lazyviz.fix.output_check import check_output, compare_output
from lazyviz.fix.padding import _padding_calls, padded_lengths, padding_multiple
from lazyviz.fix.source import Source
from lazyviz.fix.trial import Measures, comparison, crash_verdict, shown_again_by, steady_sync
from lazyviz.trace.model import Capabilities, Frame
from lazyviz.trace.synthetic import execution, write_trace

PROGRAMS = ROOT / "tests" / "programs"


def project(tmp_path: Path, *files: Path) -> Path:
    """The user's project: a folder of their own files."""
    folder = tmp_path / "project"
    folder.mkdir()
    for file in files:
        shutil.copy(file, folder / file.name)
    return folder


def traced(folder: Path, script: str, *args: str) -> Path:
    trace = folder.parent / f"{script}.trace"
    result = cli("run", "--no-tui", "-o", trace, script, *args, cwd=folder)
    assert trace.exists(), result.stderr
    return trace


def hashes(folder: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.torch
def test_item_per_step_moves_into_a_step_closure_proved_on_a_copy(tmp_path: Path) -> None:
    folder = project(tmp_path, SAMPLES / "item_in_loop.py")
    trace = traced(folder, "item_in_loop.py")
    before = hashes(folder)
    result = cli("fix", trace, "--try", cwd=folder)
    assert result.status == 0, result.stderr
    printed = line_of(SAMPLES / "item_in_loop.py", "print(f\"step {step}")
    assert f"@@ -{printed - 3},7 +{printed - 3},7 @@" in result.stdout
    assert ('+        torch._lazy.add_step_closure(lambda step, loss: print(f"step {step} loss {loss.item():.4f}"), '
            "args=(step, loss))") in result.stdout
    assert_diff_applies(result.stdout, folder)
    assert "edit: move the read at item_in_loop.py" in result.stderr
    # Measured: the extra execution per step is gone, and the losses print as before.
    assert row(result.stderr, "executions per step") == ["2.0", "1.0"]
    assert "findings gone:" in result.stderr and "Tensor.item() forces 1 extra execution" in result.stderr
    assert "findings that appeared" not in result.stderr
    assert "output: the same (" in result.stderr
    assert hashes(folder) == before  # --try never touches the user's files
    # The measurement stays with the trace: the HTML report shows the edit and what it did.
    page = tmp_path / "report.html"
    assert cli("report", trace, "-o", page).status == 0
    html = page.read_text()
    assert "proposed edit: move the read at item_in_loop.py" in html and "+        torch._lazy.add_step_closure" in html
    assert "executions per step 2.0 -&gt; 1.0" in html and "1 finding gone" in html
    # The text and JSON reports read the same typed record back.
    text = cli("report", trace).stdout
    assert "lazyviz fix --try measured move the read at item_in_loop.py" in text
    assert "executions per step 2.0 -> 1.0" in text and "1 finding gone" in text
    kept = json.loads(cli("report", trace, "--format", "json").stdout)["run"]["fix_trial"]
    assert kept["before"]["per_step"] == 2.0 and kept["after"]["per_step"] == 1.0 and len(kept["gone"]) == 1
    assert kept["output"].startswith("the same")


@pytest.mark.torch
def test_missing_mark_step_goes_at_the_loop_end_and_before_continue(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    script = folder / "skips.py"
    script.write_text(
        "import torch\nimport torch._lazy.ts_backend\n\n"
        "torch._lazy.ts_backend.init()\n"
        "torch.manual_seed(0)\n"
        "weight = torch.randn(8, 8).to('lazy')\n"
        "state = torch.randn(4, 8).to('lazy')\n"
        "for step in range(12):\n"
        "    state = torch.tanh(state @ weight) * 0.5 + state\n"
        "    if state.abs().max().item() > 1e9:\n"
        "        continue\n"
        "    state = state * 0.9\n"
        "print(f'norm {state.pow(2).sum().item():.4f}')\n")
    trace = traced(folder, "skips.py")
    result = cli("fix", trace, "--try", cwd=folder)
    assert result.status == 0, result.stderr
    assert_diff_applies(result.stdout, folder)
    assert "+        torch._lazy.mark_step()\n         continue" in result.stdout
    assert "     state = state * 0.9\n+    torch._lazy.mark_step()\n print(" in result.stdout
    # The read in the loop is what grew: its graph is a step's now.
    assert "and before each `continue`" in result.stderr
    # The graph no longer piles the loop up, and the result printed is the same.
    before, after = map(lambda cell: int(cell.replace(",", "")), row(result.stderr, "largest graph (nodes)"))
    assert after * 4 < before
    gone = result.stderr.split("findings gone:")[1]
    assert "grows by about" in gone and "findings left" not in gone
    assert "output: the same (1 line," in result.stderr


@pytest.mark.torch
def test_mark_step_goes_in_the_loop_that_steps_never_in_a_forwards_loop(tmp_path: Path) -> None:
    # Most of the growing graph's nodes are built in the model file's forward, in its loop
    # over time steps (an RNN cell written out, as the lowered modules are): the step is
    # the training loop of the other file (word_language_model with a GRULowered).
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "model.py").write_text(
        "import torch\n\n\n"
        "class Cell(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.w = torch.nn.Linear(8, 8)\n\n"
        "    def forward(self, x, h):\n"
        "        for t in range(x.size(0)):\n"
        "            h = torch.tanh(self.w(x[t]) + h)\n"
        "        return h\n")
    (folder / "main.py").write_text(
        "import torch\nimport torch._lazy.ts_backend\n\nimport model\n\n"
        "torch._lazy.ts_backend.init()\n"
        "torch.manual_seed(0)\n"
        "cell = model.Cell().to('lazy')\n"
        "h = torch.zeros(4, 8, device='lazy')\n"
        "total = 0.0\n"
        "with torch.no_grad():\n"
        "    for batch in range(6):\n"
        "        h = cell(torch.ones(5, 4, 8, device='lazy'), h)\n"
        "        total += h.mean().item()\n"
        "print(f'total {total:.4f}')\n")
    trace = traced(folder, "main.py")
    result = cli("fix", trace, cwd=folder)
    assert result.status == 0, result.stderr
    assert "         total += h.mean().item()\n+        torch._lazy.mark_step()\n" in result.stdout
    assert "+++ b/model.py" not in result.stdout


@pytest.mark.torch
def test_mark_step_goes_in_the_loop_that_grows_the_graph_not_the_one_whose_work_it_holds(tmp_path: Path) -> None:
    # word_language_model's shape: one training step left pending (no mark_step()), then an
    # evaluation loop whose hidden state grows the graph at each read. The training step's
    # nodes are most of every graph, the same in each: the loop to cut is the evaluation's.
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "lm.py").write_text(
        "import torch\nimport torch._lazy.ts_backend\n\n"
        "torch._lazy.ts_backend.init()\n"
        "torch.manual_seed(0)\n"
        "layers = [torch.nn.Linear(16, 16).to('lazy') for _ in range(6)]\n"
        "params = [p for layer in layers for p in layer.parameters()]\n"
        "for batch in range(1):\n"
        "    x = torch.ones(4, 16, device='lazy')\n"
        "    for layer in layers:\n"
        "        x = torch.tanh(layer(x))\n"
        "    loss = x.pow(2).mean()\n"
        "    loss.backward()\n"
        "    for p in params:\n"
        "        p.data.add_(p.grad, alpha=-0.1)\n"
        "    print(f'train loss {loss.item():.4f}')\n"
        "hidden = torch.zeros(4, 16, device='lazy')\n"
        "total = 0.0\n"
        "with torch.no_grad():\n"
        "    for batch in range(6):\n"
        "        hidden = torch.tanh(layers[0](hidden))\n"
        "        total += hidden.mean().item()\n"
        "print(f'eval {total:.4f}')\n")
    trace = traced(folder, "lm.py")
    result = cli("fix", trace, cwd=folder)
    assert result.status == 0, result.stderr
    assert "         total += hidden.mean().item()\n+        torch._lazy.mark_step()\n" in result.stdout, result.stdout


@pytest.mark.torch
def test_word_language_model_gets_mark_step_after_its_optimizer_update(tmp_path: Path) -> None:
    from test_real_programs import fake_corpus  # the corpus the real-program tests use

    folder = project(tmp_path, PROGRAMS / "word_lm.py")
    fake_corpus(folder)
    trace = traced(folder, "word_lm.py", "--data", ".")
    result = cli("fix", trace, "--try", cwd=folder)
    assert result.status == 0, result.stderr
    assert_diff_applies(result.stdout, folder)
    # In the batch loop after the update (not in the per-parameter update loop), and
    # before the logging's reads: they then read the loss the step computed, where after
    # them each logged batch would run its forward in a graph of its own, then again.
    assert '+        torch._lazy.mark_step()\n         total += loss.item()\n' in result.stdout
    # Measured: the growth is gone, the graph is a step's, the run has steps now.
    before, after = (int(c.replace(",", "")) for c in row(result.stderr, "largest graph (nodes)"))
    assert after * 2 < before
    assert row(result.stderr, "steps") == ["0", "4"]
    gone = result.stderr.split("findings gone:")[1].split("findings")[0]
    assert "grows by about" in gone
    # Its dropout draws other numbers once the graph is cut: said, not hidden.
    assert "output: differs" in result.stderr and "aten::native_dropout" in result.stderr


@pytest.mark.torch
def test_short_last_batch_gets_drop_last_on_the_loader_the_loop_reads(tmp_path: Path) -> None:
    folder = project(tmp_path, PROGRAMS / "mnist_lazy.py")
    trace = traced(folder, "mnist_lazy.py", "--epochs", "1", "--batch-size", "32")
    result = cli("fix", trace, "--try", cwd=folder)
    assert result.status == 0, result.stderr
    assert_diff_applies(result.stdout, folder)
    # The training loader (passed to train_epoch as `loader`), not the test loader.
    assert "+    train = torch.utils.data.DataLoader(random_digits(options.train_size, 1), " \
           "batch_size=options.batch_size, drop_last=True)" in result.stdout
    assert "test = torch.utils.data.DataLoader" not in result.stdout.split("+    train")[1].split("\n")[0]
    # The bound covers the short batch (step 6), and the recompile it caused is gone.
    old, new = (int(c) for c in row(result.stderr, "recompiles after warm-up"))
    assert new == old - 1
    gone = result.stderr.split("findings gone:")[1].split("findings left:")[0]
    assert "32->8" in gone
    assert "expected: drop_last=True skips" in result.stderr


@pytest.mark.torch
def test_write_edits_only_files_unchanged_since_the_trace(tmp_path: Path) -> None:
    folder = project(tmp_path, SAMPLES / "item_in_loop.py")
    trace = traced(folder, "item_in_loop.py")
    script = folder / "item_in_loop.py"
    original = script.read_text()
    script.write_text(original + "# an edit since the trace\n")
    edited = script.read_text()
    refused = cli("fix", trace, "--write", cwd=folder)
    assert refused.status == 2 and "changed since the trace was recorded" in refused.stderr
    assert script.read_text() == edited  # nothing written
    # The report shows no edit for a changed file either: its lines may have moved.
    page = tmp_path / "report.html"
    assert cli("report", trace, "-o", page).status == 0
    html = page.read_text()
    assert "proposed edit" not in html and "item_in_loop.py changed since the trace was recorded" in html
    script.write_text(original)
    diff = cli("fix", trace, cwd=folder).stdout
    written = cli("fix", trace, "--write", cwd=folder)
    assert written.status == 0 and f"wrote {script}" in written.stderr
    assert script.read_text() != original and "add_step_closure" in script.read_text()
    # What it wrote is the diff it shows: the diff no longer applies forward, it reverses.
    reverse = subprocess.run(["git", "apply", "--check", "-R", "-"], input=diff, text=True, cwd=folder,
                             capture_output=True)
    assert reverse.returncode == 0, reverse.stderr
    again = cli("fix", trace, "--write", cwd=folder)
    assert again.status == 2 and "changed since the trace was recorded" in again.stderr


@pytest.mark.torch
def test_fix_on_a_clean_run_proposes_nothing(tmp_path: Path) -> None:
    folder = project(tmp_path, SAMPLES / "clean_mlp.py")
    trace = traced(folder, "clean_mlp.py")
    result = cli("fix", trace, cwd=folder)
    assert result.status == 0 and result.stdout == ""
    assert "no findings: nothing to fix" in result.stderr


@pytest.mark.torch
def test_run_steps_ends_the_script_cleanly_after_n_steps(tmp_path: Path) -> None:
    script = tmp_path / "long_job.py"
    script.write_text(
        "import torch\nimport torch._lazy.ts_backend\n\n"
        "torch._lazy.ts_backend.init()\n"
        "x = torch.ones(4).to('lazy')\n"
        "try:\n"
        "    for step in range(1000):\n"
        "        x = x * 1.01\n"
        "        torch._lazy.mark_step()\n"
        "        print('step', step, flush=True)\n"
        "finally:\n"
        "    print('cleaned up')\n")
    trace = tmp_path / "job.trace"
    result = cli("run", "--no-tui", "--steps", "3", "-o", trace, script, cwd=tmp_path)
    assert result.status == 0, result.stderr
    # Stopped inside the third step's mark_step(): two steps printed, then its finally ran.
    assert result.stdout == "step 0\nstep 1\ncleaned up\n"
    assert "stopped after 3 steps, as asked (--steps)" in result.stderr
    with lazyviz.open(trace) as opened:
        assert opened.run.steps == 3 and opened.run.stopped_after_steps == 3
        assert str(script) in opened.run.sources  # for fix --write
    bad = cli("run", "--no-tui", "--steps", "0", script, cwd=tmp_path)
    assert bad.status == 2 and "--steps needs at least 1 step" in bad.stderr


def test_output_comparison_takes_numbers_to_a_tolerance() -> None:
    assert compare_output("loss 1.00001\n", "loss 1.00002\n").startswith("the same (1 line,")
    assert compare_output("step 1 loss 1.0 acc 30\nstep 2 loss 2.0 acc 31\n", "step 1 loss 1.0 acc 9\nstep 2 loss 2.0 acc 9\n") \
        == ("differs: the words are the same on all 2 lines, 2 of 6 result numbers are not within 0.001 (acc); "
            "first at line 1: acc 30 -> 9")
    assert compare_output("a 1\nb 2\n", "a 1\n") == "the first line matches; the original printed 1 more"
    assert compare_output("step 1\n", "epoch 1\n").startswith("differs at line 1: 'step 1' -> 'epoch 1'")


@pytest.mark.parametrize("before, after", [
    ("iter 10: loss 2.3456, time 1378.08ms, mfu 12.30%", "iter 10: loss 2.3456, time 913.84ms, mfu 18.51%"),
    ("step 10 | loss 2.3456 | iter_dt 72.35 | 3100 tok/s", "step 10 | loss 2.3456 | iter_dt 31.02 | 7210 tok/s"),
    ("| epoch 1 | 200/ 2983 batches | ms/batch 30.12 | loss 6.12", "| epoch 1 | 200/ 2983 batches | ms/batch 9.80 | loss 6.12"),
    ("{'train_runtime': 12.31, 'train_samples_per_second': 5.2, 'train_loss': 2.25}",
     "{'train_runtime': 4.02, 'train_samples_per_second': 15.9, 'train_loss': 2.25}"),
    ("2026-11-27 20:08:23,114 INFO loss 0.5 took 1.2s", "2026-11-27 20:09:01,902 INFO loss 0.5 took 0.4s"),
])
def test_numbers_that_measure_time_or_rate_are_left_out(before: str, after: str) -> None:
    """What training scripts print beside their results: a step time, a throughput, an MFU,
    a log line's clock. None of it is a result; the loss beside it still is."""
    checked = check_output(before + "\n", after + "\n")
    assert checked.same and checked.left_out >= 1, checked.verdict
    assert "time or rate" in checked.verdict and "left out" in checked.verdict
    # The loss beside them is compared as strictly as ever.
    worse = check_output(before + "\n", after.replace("2.3456", "2.9").replace("loss 0.5", "loss 0.7")
                         .replace("6.12", "6.5").replace("2.25", "2.5") + "\n")
    assert not worse.same and "loss" in worse.verdict, worse.verdict


def test_a_rate_that_is_a_setting_or_a_result_is_compared() -> None:
    # makemore prints its arguments first: learning_rate is the script's setting.
    args = "{'learning_rate': 0.0005, 'dropout_rate': 0.1, 'batch_size': 32}\n"
    assert check_output(args, args).left_out == 0
    assert not check_output(args, args.replace("0.0005", "0.001")).same
    assert not check_output("error_rate 0.12\n", "error_rate 0.31\n").same
    assert check_output("3100 samples/s\n", "7210 samples/s\n").same  # a rate per time, by its unit


@pytest.mark.parametrize("marks, reach", [
    ([1, 2, 3, 4, 5, 6, 7, 8], ()),  # bigram: AdamW's lerp_ synced in every iteration, growing
    ([0, 1, 1, 1, 1, 1, 1, 1], (9,)),  # mnist: one loss logged, the rest run after the loop
])
def test_a_loop_that_syncs_inside_shows_its_missing_step_in_its_first_iterations(
        tmp_path: Path, marks: list[int], reach: tuple[int, ...]) -> None:
    # A loop without steps, then one read after it that runs all its work (execution 9).
    trace = tmp_path / "loop.trace"
    write_trace(trace, [execution(i, step=0, cause="fallback") for i in range(10)],
                optimizer_steps=len(marks), optimizer_marks=marks)
    with lazyviz.open(trace) as opened:
        run = Run(opened)
        piled = Finding("missing_mark_step", "warning", "a loop ran 8 iterations without mark_step()", None, (9,))
        assert tuple(shown_again_by(piled, run)) == reach
        # Another kind of finding is shown by its last execution, as before.
        assert tuple(shown_again_by(Finding("recompile", "warning", "", None, (3, 9)), run)) == (9,)


def test_a_trial_with_no_edit_to_try_says_so(tmp_path: Path) -> None:
    """A run whose findings are all to change by hand (here the source is not readable):
    --try says it tried nothing rather than exiting 0 in silence."""
    trace = tmp_path / "by-hand.trace"
    write_trace(trace, [e for step in range(4) for e in (execution(2 * step, step=step, cause="item", line=12),
                                                        execution(2 * step + 1, step=step))])
    result = cli("fix", trace, "--try", cwd=tmp_path)
    assert result.status == 0 and result.stdout == ""
    assert "1 finding, 0 with an edit below, 1 to change by hand" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "lazyviz: --try: no edit to try; each finding above is to change by hand"


def test_sync_time_after_warm_up_counts_the_same_iterations_on_both_sides() -> None:
    # Between the ends of optimizer steps 3 and 5: the executions marks[2]..marks[4], over 2 iterations.
    assert steady_sync([100.0, 200.0, 40.0, 8.0, 2.0, 99.0], [1, 2, 3, 4, 5]) == (8.0 + 2.0) / 2
    assert steady_sync([5.0] * 6, [0, 0, 0]) is None  # too few iterations to have a warm-up behind


def test_a_crashed_originals_output_is_compared_up_to_its_crash() -> None:
    checked = check_output("step 0 loss 1.0\n", "step 0 loss 1.0\nstep 1 loss 0.9\nsaved\n", original_crashed=True)
    assert checked.same and "before its crash" in checked.verdict
    assert not check_output("step 0 loss 1.0\n", "step 0 loss 2.0\nstep 1 loss 0.9\n", original_crashed=True).same


def _ended(state: str, status: int, crash: str | None) -> Measures:
    return Measures(exit_status=status, state=state, steps=0, executions=3, misses=3, recompiles=0, max_nodes=10,
                    sync_ms=1.0, step_ms=None, in_steps=0, random_ops=[], crash=crash)


def test_a_crash_that_is_gone_is_the_proof() -> None:
    crashed = _ended("raised RuntimeError: Attempted to access the data pointer", 1, "model.py:56 (RuntimeError)")
    ran = _ended("exited 0", 0, None)
    assert crash_verdict(crashed, ran) == (True, "the crash at model.py:56 (RuntimeError) is gone; the copy ran to its end")
    other = _ended("raised ValueError: shapes", 1, "train.py:80 (ValueError)")
    ok, said = crash_verdict(crashed, other)
    assert not ok and "model.py:56 (RuntimeError) is gone, but the copy crashed at train.py:80 (ValueError)" in said
    # The same statement raising the same error: the edit did not fix it, said plainly.
    ok, said = crash_verdict(crashed, crashed)
    assert not ok and said.startswith("the edit did not fix the crash") and "model.py:56 (RuntimeError)" in said
    assert not crash_verdict(ran, crashed)[0]
    # time_sequence_prediction: the split's pieces fixed, the same statement (an LSTMCell's
    # call) raises for the cell's own view next: another error, not the same crash.
    pieces = replace(crashed, error="RuntimeError: Input tensor is not a lazy tensor: torch.DoubleTensor")
    view = replace(crashed, error="RuntimeError: The operator aten::as_strided appears to be a view operator",
                   executions=4)
    ok, said = crash_verdict(pieces, view)
    assert not ok and said.startswith("the error at model.py:56 (RuntimeError) is gone, but the same statement "
                                      "raised another after running further (4 executions)")
    at = [replace(view, error=f"{view.error} at {address}") for address in ("0x7f12", "0x7fa0")]
    assert crash_verdict(*at)[1].startswith("the edit did not fix")  # only an address differs
    table = comparison(crashed, ran)
    assert table.splitlines()[0] == "  the crash at model.py:56 (RuntimeError) is gone; the copy ran to its end"


@pytest.mark.torch
def test_the_api_hands_out_the_same_edits(tmp_path: Path) -> None:
    script = tmp_path / "api_loop.py"
    script.write_text(
        "import torch\nimport torch._lazy.ts_backend\nimport lazyviz\n\n"
        "torch._lazy.ts_backend.init()\n"
        "x = torch.ones(4).to('lazy')\n"
        "with lazyviz.trace('api.trace') as recording:\n"
        "    for step in range(6):\n"
        "        x = x * 1.01\n"
        "        total = x.sum()\n"
        "        print(f'step {step} sum {total.item():.3f}')\n"
        "        print(f'step {step} mean {x.mean().item():.3f}')\n"
        "        torch._lazy.mark_step()\n"
        "for proposal in recording.fixes():\n"
        "    print(proposal.summary)\n"
        "    print(proposal.diff())\n")
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "move the read at api_loop.py:11 into a step closure (torch._lazy.add_step_closure)" in result.stdout
    assert "+        torch._lazy.add_step_closure(lambda step, total: print(f'step {step} sum {total.item():.3f}'), " \
           "args=(step, total))" in result.stdout
    # A read that computes first would run that computation as a graph of its own in the
    # closure: said in words, not moved.
    assert "compute x.mean() in the step (assign it to a name before torch._lazy.mark_step())" in result.stdout
    assert not any(line.startswith("+") and "x.mean()" in line for line in result.stdout.splitlines())
    # The trace was recorded from Python: `lazyviz fix` prints the diff, --try has no script to re-run.
    shown = cli("fix", tmp_path / "api.trace", cwd=tmp_path)
    assert shown.status == 0 and "add_step_closure" in shown.stdout
    refused = cli("fix", tmp_path / "api.trace", "--try", cwd=tmp_path)
    assert refused.status == 2 and "no script to re-run" in refused.stderr


@pytest.mark.torch
def test_mnist_first_port_gets_mark_step_in_the_training_loop_not_where_it_synced(tmp_path: Path) -> None:
    # Without mark_step() the training loop's work piles up and runs at the evaluation's
    # first .item(): the sync is in evaluate(), the loop to cut is train_epoch()'s.
    folder = project(tmp_path, PROGRAMS / "mnist_lazy.py")
    trace = traced(folder, "mnist_lazy.py", "--epochs", "1", "--batch-size", "32", "--no-mark-step")
    result = cli("fix", trace, "--try", cwd=folder)
    assert result.status == 0, result.stderr
    assert_diff_applies(result.stdout, folder)
    # Right after the update, before the logging's read of the loss.
    assert "         optimizer.step()\n+        torch._lazy.mark_step()\n         if not options.no_mark_step:" \
        in result.stdout
    assert result.stdout.count("+        torch._lazy.mark_step()") == 1
    # Measured: a step per batch (7), about one execution each (batch 0 logs its loss).
    assert row(result.stderr, "steps") == ["0", "7"]
    assert float(row(result.stderr, "executions per step")[1]) <= 8 / 7 + 0.01
    assert "repeats [" in result.stderr.split("findings gone:")[1].split("findings")[0]


@pytest.mark.torch
def test_a_read_in_a_step_closure_is_its_own_sync_on_torchs_backend(tmp_path: Path) -> None:
    # What the closure edit relies on, checked on LTC: a closure that only reads costs no
    # execution; one that computes first runs a graph of its own, named as such (as on XLA).
    script = tmp_path / "closures.py"
    script.write_text(
        "import torch\nimport torch._lazy.ts_backend\n\n"
        "torch._lazy.ts_backend.init()\n"
        "x = torch.ones(4).to('lazy')\n"
        "for step in range(6):\n"
        "    x = x * 1.01\n"
        "    total = x.sum()\n"
        "    torch._lazy.add_step_closure(lambda t: print(f'read {t.item():.3f}'), args=(total,))\n"
        "    torch._lazy.add_step_closure(lambda v: print(f'computed {v.mean().item():.3f}'), args=(x,))\n"
        "    torch._lazy.mark_step()\n")
    trace = tmp_path / "closures.trace"
    assert cli("run", "--no-tui", "-o", trace, script).status == 0
    report = cli("report", trace, "--format", "json")
    findings = json.loads(report.stdout)["findings"]
    [finding] = findings
    assert finding["kind"] == "extra_sync" and finding["site"]["line"] == 10
    assert finding["message"].startswith("Tensor.item() in a step closure forces 1 extra execution per step in 6 of 6")
    with lazyviz.open(trace) as opened:
        assert opened.run.steps == 6  # the closures' graphs end no step
        assert [e.cause for e in opened.executions()[:2]] == ["mark_step", "item"]


@pytest.mark.torch
def test_a_slice_bound_baked_into_the_graph_becomes_an_index_select_proved(tmp_path: Path) -> None:
    """`data[:, step:step + 16]` on the device bakes the bounds into every step's graph
    (LTC's own counter: a miss per step); as an index_select of CPU-made indices the
    bounds are data, and --try measures the recompiles gone and the same output."""
    folder = project(tmp_path, PROGRAMS / "sliding_window.py")
    trace = traced(folder, "sliding_window.py")
    result = cli("fix", trace, "--try", cwd=folder)
    assert result.status == 0, result.stderr
    assert_diff_applies(result.stdout, folder)
    assert "-    window = data[:, step:step + 16]\n" \
           "+    window = data.index_select(1, torch.arange(step, step + 16).to(data.device))" in result.stdout
    old, new = (int(c) for c in row(result.stderr, "recompiles after warm-up"))
    assert (old, new) == (6, 0)
    assert [int(c) for c in row(result.stderr, "cache misses")] == [8, 2]
    assert "output: the same" in result.stderr


@pytest.mark.torch
def test_a_python_index_into_the_schedule_becomes_data_proved_against_ltcs_counts(tmp_path: Path) -> None:
    """k-diffusion's Euler sampler reads its sigma schedule, a device tensor, with the
    loop's Python index: each index is a constant in the graph, so every step compiles
    (LTC's own counters say how many). The edit makes each index a one-element index
    tensor on both lines the changed values were built at; --try: no recompile after
    warm-up, the same sample."""
    folder = project(tmp_path, PROGRAMS / "euler_sampler.py", PROGRAMS / "with_counters.py")
    counters = tmp_path / "ltc.json"
    trace = tmp_path / "sampler.trace"
    run = subprocess.run([sys.executable, "-m", "lazyviz", "run", "--no-tui", "-o", str(trace), "euler_sampler.py"],
                         cwd=folder, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    truth = subprocess.run([sys.executable, "with_counters.py", "euler_sampler.py"], cwd=folder, text=True,
                           capture_output=True, env={**os.environ, "COUNTERS_FILE": str(counters)})
    assert truth.returncode == 0, truth.stderr
    ltc = json.loads(counters.read_text())
    with lazyviz.open(trace) as opened:
        assert sum(e.cache == "miss" for e in opened.executions()) == ltc["UncachedCompile"] == 12
    result = cli("fix", trace, "--try", cwd=folder)
    assert result.status == 0, result.stderr
    assert_diff_applies(result.stdout, folder)
    program = PROGRAMS / "euler_sampler.py"
    assert ("-        sigma = sigmas[i]\n"
            "+        sigma = sigmas.index_select(0, torch.tensor([i]).to(sigmas.device)).squeeze(0)\n") in result.stdout
    assert "+        x = x + d * (sigmas.index_select(0, torch.tensor([i + 1]).to(sigmas.device)).squeeze(0) - sigma)" \
        in result.stdout
    assert f"2 indices at euler_sampler.py:{line_of(program, 'sigma = sigmas[i]')} and euler_sampler.py:" \
        f"{line_of(program, 'sigmas[i + 1]')}" in result.stderr
    assert row(result.stderr, "recompiles after warm-up") == ["8", "0"]
    assert "output: the same" in result.stderr


@pytest.mark.torch
def test_until_clean_takes_the_word_lm_to_edits_by_hand_only_proved_against_ltcs_counts(tmp_path: Path) -> None:
    """The word LM as first ported: no mark_step(), clip_grad_norm_ falling back per
    parameter, slice bounds baked in. --until-clean applies every edit, runs, asks the
    new run for edits, and stops when only changes by hand are left. LTC's counters on
    the program with the kept edits written agree with the last round's counts."""
    from test_real_programs import fake_corpus

    folder = project(tmp_path, PROGRAMS / "word_lm.py", PROGRAMS / "with_counters.py")
    fake_corpus(folder)
    trace = traced(folder, "word_lm.py", "--data", ".")
    result = cli("fix", trace, "--try", "--until-clean", "--write", cwd=folder)
    assert result.status == 0, result.stderr
    # Written to the user's files: the diff printed is what they now hold.
    written = subprocess.run(["git", "apply", "--check", "--reverse", "-"], input=result.stdout, text=True,
                             cwd=folder, capture_output=True)
    assert written.returncode == 0, written.stderr + result.stdout
    err = result.stderr
    assert "  round 1 (kept: " in err and "stopped: no edit left for the findings left" in err
    assert "+def clip_grad_norm_lowered(parameters, max_norm):" in result.stdout
    assert "+        clip_grad_norm_lowered(model.parameters(), 0.25)" in result.stdout
    assert "+        torch._lazy.mark_step()" in result.stdout and ".index_select(0, torch.arange(" in result.stdout
    whole = err.split("the whole way")[1]
    executions = int(row(whole, "executions ")[1])
    misses = int(row(whole, "cache misses")[1])
    before_ms, after_ms = (float(c.replace(",", "")) for c in row(whole, "sync time")[::2])
    assert after_ms * 5 < before_ms
    gone = whole.split("findings gone:")[1].split("findings that appeared:")[0]
    assert "grows by about" in gone and "clip_grad_norm_" in gone and "constant 20->40" in gone
    # Dropout draws differ once the graphs are cut: the output cannot be compared, and it says so.
    assert "the script draws random numbers on the device" in err
    counters = tmp_path / "ltc.json"
    patched = subprocess.run([sys.executable, "with_counters.py", "word_lm.py", "--data", "."], cwd=folder,
                             capture_output=True, text=True, env={**os.environ, "COUNTERS_FILE": str(counters)},
                             timeout=600)
    assert patched.returncode == 0, patched.stderr
    ltc = json.loads(counters.read_text())
    assert "aten::linalg_vector_norm" not in ltc  # the lowered clipping falls back nowhere
    assert ltc["UncachedCompile"] == misses and ltc["UncachedCompile"] + ltc["CachedCompile"] == executions


def _indexed(line: str) -> list:
    tree = ast.parse(line)
    return [(node, found) for node in ast.walk(tree) if isinstance(node, ast.Subscript)
            and (found := _python_index(node)) is not None]


def test_python_indices_are_rewritten_as_index_selects_with_the_same_shapes() -> None:
    cases = {
        "s = sigmas[i]": "s = sigmas.index_select(0, torch.tensor([i]).to(sigmas.device)).squeeze(0)",
        "y = x[:, t]": "y = x.index_select(1, torch.tensor([t]).to(x.device)).squeeze(1)",
        # GPT-2's greedy decoding: t - 1 may be -1 (the last), as Python counts it.
        "tok = logits[0, t - 1].argmax()":
            "tok = logits[0].index_select(0, (torch.tensor([t - 1]) % logits[0].size(0)).to(logits.device))"
            ".squeeze(0).argmax()",
        "v = self.table[n]": "v = self.table.index_select(0, torch.tensor([n]).to(self.table.device)).squeeze(0)",
    }
    for line, expected in cases.items():
        assert indices_as_data(line, line, _indexed(line)) == expected
    # Left alone: a store (the copy would take the write), two Python indices, a mask or
    # a list of indices, a value read twice that is a call, constants only, `:` between.
    for line in ("x[i] = 0", "y = x[i, j]", "y = x[mask > 0]", "y = x[[1, 2]]", "y = model(x)[i]", "y = x[0, 1]",
                 "y = x[:, 0, t]", "y = x[i:j]"):
        assert _indexed(line) == [], line


def test_a_shape_change_that_spans_more_steps_after_an_edit_is_left_not_gone() -> None:
    """Moving a .item() into a step closure removes one of the two sites a batch-length
    change recompiled at: the same change, now counted at the other site over two steps
    (a Hugging Face GPT-2 on PyTorch/XLA did this), is a finding left, not one gone and
    one new."""
    frame = Frame("/p/train.py", 16, "<module>")
    def measured(kind: str, message: str) -> Measures:
        details = RecompileDetails(recompiles=1, steps=1, changes=("input_shape",))
        finding = Finding(kind, "warning", message, frame, (4,), details=details)
        return Measures(0, "exited 0", 6, 6, 4, 2, 10, 1.0, 1.0, 6, [], [finding], "same")
    text = comparison(measured("recompile", "step 2 recompiled: input shape ..."),
                      measured("dynamic_shape", "input shapes change at 2 steps ..."))
    assert "findings gone" not in text and "appeared" not in text
    assert "findings left:\n    warning: input shapes change at 2 steps" in text


def test_per_batch_padding_lengths_and_the_multiple_that_covers_them() -> None:
    history = ["%1 Float[4,1,24,24] -> Float[4,1,30,30]",  # two dimensions change: a mask, not a length
               "%25 Long[4,24] -> Long[4,30]", "%0 Long[4,30] -> Long[4,23]",
               "%6 Long[24] -> Long[23]",  # the first dimension: a batch, not a length
               "%3 Long[8,23] -> Long[4,23]"]
    assert padded_lengths(history) == [23, 24, 30]
    assert padding_multiple([23, 24, 30]) == (32, 1, (3 * 32 - 77) / 77)
    assert padding_multiple([5, 7])[:2] == (8, 1) and padding_multiple([60, 100])[:2] == (128, 1)
    source = Source("/p/train.py", "collate = DataCollatorWithPadding(tokenizer)\n"
                                   "a = tokenizer(texts, padding=True)\n"
                                   "b = tokenizer(texts, padding='longest', return_tensors='pt')\n"
                                   "c = tokenizer(texts, padding='max_length', max_length=64)\n"
                                   "d = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8)\n"
                                   "e = tokenizer(texts)\n"
                                   "conv = torch.nn.Conv2d(1, 2, 3, padding=1)\n")
    assert [call.lineno for call in _padding_calls(source)] == [1, 2, 3]


@pytest.mark.torch
def test_the_lowered_clip_grad_norm_clips_as_torchs_does() -> None:
    import torch  # here: the module's other unit tests run without torch

    namespace: dict = {"torch": torch}
    exec(LOWERED_CLIP.format(torch="torch"), namespace)  # the function the edit puts in the user's file
    for max_norm in (0.25, 100.0):  # clipped, and left as they were
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
        model(torch.randn(5, 8)).pow(2).sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        expected_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        expected = [p.grad.clone() for p in model.parameters()]
        for p, g in zip(model.parameters(), grads):
            p.grad = g.clone()
        norm = namespace["clip_grad_norm_lowered"](model.parameters(), max_norm)
        assert torch.allclose(norm, expected_norm, rtol=1e-6)
        assert all(torch.allclose(p.grad, e, rtol=1e-6, atol=1e-9) for p, e in zip(model.parameters(), expected))
    calls = {"clip_grad_norm_(ps, 1.0)": True, "torch.nn.utils.clip_grad_norm_(ps, max_norm=1.0)": True,
             "nn.utils.clip_grad_norm_(ps, 1.0, norm_type=2.0)": True, "clip_grad_norm_(ps, 1.0, 'inf')": False,
             "clip_grad_norm_(ps, 1.0, norm_type=1)": False, "clip_grad_norm_(ps, 1.0, error_if_nonfinite=True)": False,
             "clip_grad_norm_(*args)": False}
    for text, lowered in calls.items():
        call = ast.parse(text).body[0].value
        assert _clip_call(call) is lowered, text


def test_a_value_chosen_by_a_tensor_condition_is_chosen_on_the_device() -> None:
    forms = {
        "if loss < best:\n    best = loss.detach()\n": ("best", "loss < best", "loss.detach()", "best"),
        "if flag.any():\n    x = a\nelse:\n    x = b * 2\n": ("x", "flag.any()", "a", "b * 2"),
        "x = a if m > 0 else b\n": ("x", "m > 0", "a", "b"),
    }
    for text, (name, cond, yes, no) in forms.items():
        tree = ast.parse(text)
        found = _choice(tree.body[0], 1)
        assert found is not None, text
        assert (found[0], ast.unparse(found[1]), ast.unparse(found[2]),
                ast.unparse(found[3]) if found[3] is not None else found[0]) == (name, cond, yes, no)
    source = Source("/p/train.py", "import torch\n")
    assert on_the_device(source, "loss < best", "loss.detach()", "best", where_lowers=False)[0] == \
        "loss.detach().masked_fill((loss < best) == 0, 0) + best.masked_fill(loss < best, 0)"
    assert on_the_device(source, "loss < best", "loss.detach()", "best", where_lowers=True)[0] == \
        "torch.where(loss < best, loss.detach(), best)"
    # Not a choice of one value: two statements, another target in the else, an elif.
    for text in ("if c:\n    x = a\n    y = b\n", "if c:\n    x = a\nelse:\n    y = b\n",
                 "if c:\n    x = a\nelif d:\n    x = b\n", "if c:\n    x += a\n"):
        assert _choice(ast.parse(text).body[0], 1) is None, text



def test_a_condition_joined_with_and_or_is_left_in_words() -> None:
    """`if args.best and loss < best:` short-circuits on the Python flag; as one device
    expression a False flag would be the mask (masked_fill(False == 0, ...) raises)."""
    from types import SimpleNamespace

    from lazyviz.analysis.findings import ExtraSyncDetails
    from lazyviz.fix import device_branch
    from lazyviz.fix.source import Context

    text = "for step in range(3):\n    if args.best and loss < best:\n        best = loss.detach()\n"
    info = SimpleNamespace(sources={}, names={}, backend="ts",
                           device="lazy", capabilities=Capabilities())
    context = Context(SimpleNamespace(info=info, trace=None), lambda path: Source(path, text))
    details = ExtraSyncDetails(cause="bool", count=3, steps=3, ms_per_step=1.0)
    finding = Finding("extra_sync", "warning", "bool", Frame("/p/train.py", 2, "<module>"), (1,), details=details)
    proposal = device_branch.propose(finding, context)
    assert not proposal.changes and "joins conditions with and/or" in proposal.summary


@pytest.mark.torch
def test_if_tensor_keeping_the_best_loss_is_chosen_on_the_device_proved_against_ltcs_counts(tmp_path: Path) -> None:
    """`if loss < best: best = loss.detach()` reads the comparison on the host every
    step; the edit chooses on the device with ops that lower on this backend (its where
    falls back), and LTC's counters on the written program say: one execution a step,
    no fallback, the same best."""
    folder = project(tmp_path, PROGRAMS / "best_loss.py", PROGRAMS / "with_counters.py")
    trace = traced(folder, "best_loss.py")
    result = cli("fix", trace, "--try", "--write", cwd=folder)
    assert result.status == 0, result.stderr
    assert ("-    if loss < best:\n-        best = loss.detach()\n"
            "+    best = loss.detach().masked_fill((loss < best) == 0, 0) + best.masked_fill(loss < best, 0)\n") \
        in result.stdout
    assert row(result.stderr, "executions per step") == ["2.0", "1.0"]
    assert "output: the same" in result.stderr
    counters = tmp_path / "ltc.json"
    patched = subprocess.run([sys.executable, "with_counters.py", "best_loss.py"], cwd=folder, capture_output=True,
                             text=True, env={**os.environ, "COUNTERS_FILE": str(counters)}, timeout=600)
    assert patched.returncode == 0, patched.stderr
    ltc = json.loads(counters.read_text())
    assert not any(name.startswith("aten::") and name != "aten::_local_scalar_dense" for name in ltc)
    # One execution a step; the print after the last step reads data already on the host side.
    assert ltc["MarkStep"] == 8 and ltc["UncachedCompile"] + ltc["CachedCompile"] == 8 \
        == int(row(result.stderr, "executions ")[1])


@pytest.mark.torch
def test_an_edit_of_a_package_the_script_imports_is_what_the_copy_runs(tmp_path: Path) -> None:
    """minGPT's adder: projects/adder/adder.py imports `mingpt`, installed with pip install
    -e . from the project's folder. The copy's run imported the user's mingpt, not the
    copy's, so the split edit in mingpt/model.py was never tried and "did not fix the
    crash". Here the package is reached through the user's PYTHONPATH: the same."""
    folder = tmp_path / "project"
    shutil.copytree(PROGRAMS / "package_project", folder)
    env = {**os.environ, "PYTHONPATH": str(folder)}
    trace = tmp_path / "t.trace"
    cli("run", "--no-tui", "-o", trace, "scripts/train.py", cwd=folder, env=env)
    before = hashes(folder)
    result = cli("fix", trace, "--try", "--until-clean", cwd=folder, env=env)
    assert result.status == 0, result.stderr
    assert "+        q, k, v = split_lowered(self.qkv(x), 8, dim=1)" in result.stdout
    # autograd's "expected device lazy:0 but got cpu" is the split's pieces left on the CPU.
    assert "is gone; the copy ran to its end" in result.stderr.split("the whole way")[0]
    assert row(result.stderr, "exit") == ["raised", "RuntimeError", "exited", "0"]
    assert hashes(folder) == before


@pytest.mark.torch
def test_an_lstm_cell_model_goes_from_its_split_to_its_cells_to_a_run(tmp_path: Path) -> None:
    """pytorch/examples' time_sequence_prediction: the split's pieces come back on the CPU
    and the first LSTMCell raises; with the split edited, the same statement raises for
    the cell's own view (another error, not the same crash: kept); the cells made
    LSTMCellLowered, it trains."""
    folder = project(tmp_path, PROGRAMS / "time_sequence_lazy.py")
    trace = traced(folder, "time_sequence_lazy.py", "--steps", "2")
    result = cli("fix", trace, "--try", "--until-clean", cwd=folder)
    assert result.status == 0, result.stderr
    assert_diff_applies(result.stdout, folder)
    assert "split_lowered(input, 1, dim=1)" in result.stdout
    assert "+        self.lstm1 = LSTMCellLowered(1, 16)" in result.stdout
    assert "+        self.lstm2 = LSTMCellLowered(16, 16)" in result.stdout
    assert result.stdout.count("+class LSTMCellLowered(torch.nn.LSTMCell):") == 1
    rounds = result.stderr.split("the whole way")[0]
    assert "is gone, but the same statement raised another" in rounds and "not kept" not in rounds
    assert "is gone; the copy ran to its end" in rounds
    assert row(result.stderr, "exit") == ["raised", "RuntimeError", "exited", "0"]


def gpt_project(tmp_path: Path) -> Path:
    """nanoGPT's shape: train.py beside model.py, whose qkv split crashes on TS."""
    return project(tmp_path, PROGRAMS / "gpt_char" / "train.py", PROGRAMS / "gpt_char" / "model.py")


@pytest.mark.torch
def test_a_gpt_goes_from_its_qkv_split_crash_to_a_clean_run_round_after_round(tmp_path: Path) -> None:
    folder = gpt_project(tmp_path)
    trace = traced(folder, "train.py", "4")
    with lazyviz.open(trace) as opened:
        assert opened.run.error and "not a lazy tensor" in opened.run.error
        assert opened.run.optimizer_steps == 0  # it crashed in the first forward
    before = hashes(folder)
    result = cli("fix", trace, "--try", "--until-clean", cwd=folder)
    assert result.status == 0, result.stderr
    assert_diff_applies(result.stdout, folder)
    assert hashes(folder) == before  # the user's files untouched
    # The split in model.py, by narrow; the checkpoint saved from the CPU; the loop's
    # missing mark_step(), under the script's own device (GPT_DEVICE may name another)
    # and before the log line's read, which then needs no step closure of its own.
    assert "+        q, k, v = split_lowered(self.c_attn(x), self.n_embd, dim=2)" in result.stdout
    assert "+torch.save(state_on_cpu(checkpoint), \"ckpt.pt\")" in result.stdout
    assert ('     optimizer.step()\n+    if torch.device(device).type == "lazy":\n+        torch._lazy.mark_step()\n'
            "     if it % log_interval == 0:\n") in result.stdout
    assert "torch._lazy.add_step_closure" not in result.stdout
    rounds = result.stderr.split("the whole way")[0]
    raised = line_of(folder / "model.py", "att = att.masked_fill(")
    save = line_of(folder / "train.py", "torch.save(")
    # The first crash fixed, the run gets to the checkpoint and raises there: kept, and said.
    assert (f"the crash at model.py:{raised} (RuntimeError) is gone, but the copy crashed further on (4 optimizer "
            f"steps) at train.py:{save} (RuntimeError)") in rounds
    assert f"the crash at train.py:{save} (RuntimeError) is gone; the copy ran to its end" in rounds
    assert "not kept" not in rounds
    # No steps in the original: both sides bounded by optimizer steps and compared per iteration.
    assert "5 iterations (optimizer steps) each run" in result.stderr
    assert "compared per iteration" in result.stderr
    # What the copy now does: exits 0, steps of one execution each, no recompiles after warm-up.
    assert row(result.stderr, "exit") == ["raised", "RuntimeError", "exited", "0"]
    assert row(result.stderr, "executions per step") == ["-", "1.0"]
    assert row(result.stderr, "recompiles after warm-up") == ["-", "0"]


@pytest.mark.torch
def test_a_hand_written_narrow_that_fixes_the_crash_is_proved(tmp_path: Path) -> None:
    folder = gpt_project(tmp_path)
    train = folder / "train.py"  # a run that saves no checkpoint: the split is its one crash
    train.write_text(train.read_text().split("\ncheckpoint = ")[0] + "\n")
    trace = traced(folder, "train.py", "4")
    model = (folder / "model.py").read_text()
    fixed = model.replace("q, k, v = self.c_attn(x).split(self.n_embd, dim=2)",
                          "qkv = self.c_attn(x)\n        q, k, v = (qkv.narrow(2, i * self.n_embd, self.n_embd) "
                          "for i in range(3))")
    edited = tmp_path / "model.py"
    edited.write_text(fixed)
    result = cli("fix", trace, "--try", "--patch", edited, cwd=folder)
    assert result.status == 0, result.stderr
    raised = line_of(folder / "model.py", "att = att.masked_fill(")
    assert f"the crash at model.py:{raised} (RuntimeError) is gone" in result.stderr
    assert "raised RuntimeError" in result.stderr.split("  exit")[1].splitlines()[0]
    # A patch that trades the crash for another says both, and fails.
    broken = tmp_path / "broken" / "model.py"
    broken.parent.mkdir()
    broken.write_text(fixed.replace("x = self.wte(idx) + self.wpe(pos)", "x = self.wte(idx) + self.wpe(pos)[None, :, :1, 0]"))
    result = cli("fix", trace, "--try", "--patch", broken, cwd=folder)
    assert result.status == 1
    assert f"the crash at model.py:{raised} (RuntimeError) is gone, but the copy crashed at model.py:" in result.stderr


@pytest.mark.torch
def test_iterations_bound_a_loop_without_steps(tmp_path: Path) -> None:
    script = ROOT / "tests" / "scripts" / "no_mark_step_loop.py"
    trace = tmp_path / "loop.trace"
    result = cli("run", "--no-tui", "--iterations", "3", "-o", trace, script, "20", cwd=tmp_path)
    assert result.status == 0, result.stderr
    assert result.stdout.count("loss") == 2  # ended out of the third optimizer.step(), before its print
    assert "stopped after 3 optimizer steps, as asked (--iterations)" in result.stderr
    with lazyviz.open(trace) as opened:
        assert opened.run.optimizer_steps == 3 and opened.run.optimizer_marks == [0, 1, 2]
        findings = Run(opened).analysed().findings
    # Each iteration synced (its loss.item()), yet only the loss: the parameters' updates
    # pile up, and the optimizer's count shows it within three iterations.
    [stepless] = [f for f in findings if "optimizer stepped" in f.message]
    assert stepless.kind == "missing_mark_step" and "the largest graph of each iteration grows" in stepless.message


@pytest.mark.torch
def test_a_loop_that_never_syncs_is_placed_by_its_optimizer_step(tmp_path: Path) -> None:
    """minGPT's trainer once its fallbacks were lowered: the loop syncs only every 10th
    iteration, so within the bound no execution says where it is, and the finding had no
    line ("its source is not readable here"). The optimizer's first step says it."""
    script = tmp_path / "quiet.py"
    script.write_text((ROOT / "tests" / "scripts" / "no_mark_step_loop.py").read_text().replace(
        'print(f"step {step} loss', 'if step % 10 == 9:\n        print(f"step {step} loss'))
    trace = tmp_path / "quiet.trace"
    assert cli("run", "--no-tui", "--iterations", "4", "-o", trace, script, cwd=tmp_path).status == 0
    with lazyviz.open(trace) as opened:
        assert opened.run.optimizer_step_at.line == line_of(script, "optimizer.step()")
        run = Run(opened).analysed()
        findings = run.findings
        # Only the bound's own: the work of the 4 iterations, run when --iterations ended it.
        causes = [run.execution(e).cause for e in run.findings[0].executions]
    [stepless] = [f for f in findings if "optimizer stepped" in f.message]
    assert causes in ([], ["bound"]) and stepless.frame.line == line_of(script, "optimizer.step()")
    proposed = cli("fix", trace, cwd=tmp_path)
    assert "+    torch._lazy.mark_step()" in proposed.stdout, proposed.stderr
    assert f"in the loop at quiet.py:{line_of(script, 'for step in range')}, after its last statement" in proposed.stderr


@pytest.mark.torch
def test_a_growing_loops_trial_is_bounded_by_its_first_iterations_not_the_whole_run(tmp_path: Path) -> None:
    # The graph grows at every sync, so the finding's last sync is the run's last: the
    # trial needs only the first few iterations to see it (and its fix) again.
    script = tmp_path / "loop.py"
    script.write_text((ROOT / "tests" / "scripts" / "no_mark_step_loop.py").read_text())
    trace = tmp_path / "loop.trace"
    assert cli("run", "--no-tui", "-o", trace, script, "16", cwd=tmp_path).status == 0
    result = cli("fix", trace, "--try", cwd=tmp_path)
    assert result.status == 0, result.stderr
    assert "5 iterations (optimizer steps) each side" in result.stderr
    assert "grows by about" in result.stderr.split("findings gone:")[1].split("output:")[0]
    assert "output: the same (4 lines" in result.stderr


@pytest.mark.torch
def test_the_state_moved_to_the_cpu_saves_and_loads_the_same_values(tmp_path: Path) -> None:
    """The function the torch.save edit puts in the user's file, on a checkpoint of a model
    and its optimizer's state on the lazy device: torch.save writes it, torch.load reads
    the same values, the dict types and a state_dict's _metadata kept."""
    from lazyviz.fix.cpu_state import STATE_ON_CPU

    script = tmp_path / "save.py"
    script.write_text(
        "import collections, torch, torch._lazy, torch._lazy.ts_backend\n"
        f"{STATE_ON_CPU.format(step='torch._lazy.mark_step', torch='torch', device='lazy')}\n"
        "torch._lazy.ts_backend.init()\ntorch.manual_seed(0)\n"
        "model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)).to('lazy')\n"
        "optimizer = torch.optim.AdamW(model.parameters())\n"
        "model(torch.randn(3, 4).to('lazy')).sum().backward()\noptimizer.step()\n"
        "state = {'model': model.state_dict(), 'optimizer': optimizer.state_dict(), 'pair': (1, [2.0])}\n"
        "try:\n    torch.save(state, 'raw.pt')\nexcept RuntimeError as error:\n    print('raw:', error)\n"
        "torch.save(state_on_cpu(state), 'ckpt.pt')\n"
        "loaded = torch.load('ckpt.pt')\n"
        "for name, value in model.state_dict().items():\n"
        "    assert torch.equal(loaded['model'][name], value.cpu()), name\n"
        "moments = optimizer.state_dict()['state'][0]['exp_avg'].cpu()\n"
        "assert torch.equal(loaded['optimizer']['state'][0]['exp_avg'], moments)\n"
        "assert isinstance(loaded['model'], collections.OrderedDict) and hasattr(loaded['model'], '_metadata')\n"
        "assert loaded['pair'] == (1, [2.0])\nprint('loaded the same values')\n")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "raw: Attempted to access the data pointer on an invalid python storage" in done.stdout
    assert "loaded the same values" in done.stdout


@pytest.mark.torch
def test_a_whole_model_with_a_cached_mask_is_saved_loaded_back_and_evaluated_on_its_device(tmp_path: Path) -> None:
    """word_language_model's Transformer: `self.src_mask`, a tensor attribute made on the
    device, is copied to the CPU with the parameters (else the copy's torch.save raised as
    the original did), and the `model = torch.load(f)` that loads it back puts it on the
    device the model was moved to (else its evaluation met lazy inputs with CPU weights).
    The edited program prints the CPU's numbers."""
    folder = project(tmp_path, PROGRAMS / "masked_model_save.py")
    trace = traced(folder, "masked_model_save.py", "--device", "lazy")
    result = cli("fix", trace, "--try", cwd=folder)
    assert result.status == 0, result.stderr
    assert_diff_applies(result.stdout, folder)
    assert "+    torch.save(state_on_cpu(model), f)\n" in result.stdout
    assert "+    model = state_on_cpu(torch.load(f), device)\n" in result.stdout
    assert "the torch.load at masked_model_save.py:" in result.stderr
    assert "is gone; the copy ran to its end" in result.stderr and "output: the same" in result.stderr
    subprocess.run(["patch", "-p1", "--batch"], input=result.stdout.encode(), cwd=folder, check=True,
                   capture_output=True)
    done = subprocess.run([sys.executable, "masked_model_save.py", "--device", "lazy"], cwd=folder,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "evaluated" in done.stdout, done.stderr
    original = subprocess.run([sys.executable, str(PROGRAMS / "masked_model_save.py")], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
    assert done.stdout == original.stdout  # the CPU's numbers


TRAINER = """\
import torch, torch._lazy.ts_backend
torch._lazy.ts_backend.init()


class Trainer:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        torch.nn.functional.mse_loss(self.model(source), targets).backward()
        self.optimizer.step()

    def _run_epoch(self, batches):
        for source, targets in batches:
            self._run_batch(source.to("lazy"), targets.to("lazy"))


torch.manual_seed(0)
model = torch.nn.Linear(20, 1).to("lazy")
trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=1e-3))
trainer._run_epoch([(torch.rand(8, 20), torch.rand(8, 1)) for _ in range(12)])
print("trained")
"""


@pytest.mark.torch
def test_a_loop_that_never_syncs_gets_mark_step_in_the_loop_that_calls_its_optimizer_step(tmp_path: Path) -> None:
    """pytorch/examples' ddp-tutorial-series single_gpu.py: the optimizer steps in
    _run_batch(), called from _run_epoch()'s loop, and nothing syncs (no execution, so
    no stack): the step's line's function is followed to its one call in a loop."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "trainer.py").write_text(TRAINER)
    trace = traced(folder, "trainer.py")
    result = cli("fix", trace, cwd=folder)
    assert result.status == 0, result.stderr
    assert_diff_applies(result.stdout, folder)
    called = line_of(folder / "trainer.py", "self._run_batch(source")
    assert f"edit: call torch._lazy.mark_step() at the end of the loop at trainer.py:{called - 1}" in result.stderr
    assert "+            torch._lazy.mark_step()\n" in result.stdout


EVALUATION_ONLY = """\
import sys, time
import torch, torch._lazy, torch._lazy.ts_backend
from torch import nn
torch._lazy.ts_backend.init()
torch.manual_seed(0)
data = torch.randint(0, 50, (161, 4)).to("lazy")
model = nn.Sequential(nn.Embedding(50, 16), nn.Linear(16, 50)).to("lazy").eval()
total = 0.0
with torch.no_grad():
    for i in range(0, data.size(0) - 1, 16):
        source, target = data[i:i + 16], data[i + 1:i + 17].reshape(-1)
        total += len(source) * nn.functional.cross_entropy(model(source).view(-1, 50), target).item()
print(f"loss {total / (data.size(0) - 1):.4f}")
time.sleep(float(sys.argv[1]))  # what a long evaluation takes after its last read
"""


@pytest.mark.torch
def test_an_evaluation_without_steps_or_an_optimizer_is_tried_to_its_end_or_says_why_not(tmp_path: Path) -> None:
    """The word LM's evaluation alone: nothing to stop both sides at the same point, so
    both run to their end; where that takes longer than --timeout, the trial says so
    and exits 0 with the diff (word_language_model's evaluation-only run failed here)."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "evaluate.py").write_text(EVALUATION_ONLY)
    trace = traced(folder, "evaluate.py", "0")
    result = cli("fix", trace, "--try", cwd=folder)
    assert result.status == 0, result.stderr
    assert "run to its end (no steps or optimizer steps to bound it) each side" in result.stderr
    assert "output: the same (1 line" in result.stderr and "findings gone:" in result.stderr
    slow = tmp_path / "slow.trace"
    assert cli("run", "--no-tui", "-o", slow, "evaluate.py", "20", cwd=folder).status == 0
    result = cli("fix", slow, "--try", "--timeout", "8", cwd=folder)
    assert result.status == 0, result.stderr
    assert "index_select" in result.stdout  # the diff stands
    assert result.stderr.strip().splitlines()[-1].startswith(
        "lazyviz: no trial: the original did not end within --timeout 8 s, and the original has no steps")


@pytest.mark.torch
def test_the_lowered_attention_computes_what_the_op_does() -> None:
    """The function the attention edit puts in the user's file, against
    F.scaled_dot_product_attention on the CPU: causal, a boolean mask, an additive mask,
    another scale."""
    import torch
    import torch.nn.functional as F

    from lazyviz.fix.lowered_attention import LOWERED, LOWERED_NAME

    namespace: dict = {"torch": torch}
    exec(LOWERED.format(torch="torch"), namespace)
    lowered = namespace[LOWERED_NAME]
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 8, 16) for _ in range(3))
    allowed = torch.rand(8, 8) > 0.3
    allowed[:, 0] = True  # no row masked whole (the op and softmax both give NaN there)
    for options in ({"is_causal": True}, {"attn_mask": allowed}, {"attn_mask": torch.randn(8, 8)}, {"scale": 0.3},
                    {"is_causal": True, "scale": 0.2, "dropout_p": 0.0}):
        assert torch.allclose(lowered(q, k, v, **options), F.scaled_dot_product_attention(q, k, v, **options),
                              atol=1e-5), options


@pytest.mark.torch
def test_a_bare_attention_call_is_one_finding_and_its_edit_removes_the_fallback(tmp_path: Path) -> None:
    folder = project(tmp_path, PROGRAMS / "sdpa_attention.py")
    trace = traced(folder, "sdpa_attention.py")
    with lazyviz.open(trace) as opened:
        findings = Run(opened).analysed().findings
        fallbacks = Counter(op for e in opened.executions() for op, n in e.fallback_ops.items() for _ in range(n))
    # LTC's truth: the one call falls back through three ops that sync.
    assert {"aten::isneginf", "aten::all.dim", "aten::where.self"} <= set(fallbacks)
    at_line = [f for f in findings if f.frame and f.frame.line == 12]
    assert len(at_line) == 1 and at_line[0].message.startswith("scaled_dot_product_attention() falls back")
    assert "torch.where" not in at_line[0].fix  # the line has no torch.where to rewrite
    result = cli("fix", trace, "--try", cwd=folder)
    assert result.status == 0, result.stderr
    assert_diff_applies(result.stdout, folder)
    assert "+    y = scaled_dot_product_attention_lowered(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)" \
        in result.stdout
    assert row(result.stderr, "executions per step") == ["7.0", "1.0"]
    assert "output: the same" in result.stderr


def test_a_loop_that_steps_already_gets_no_second_mark_step() -> None:
    """time_sequence_prediction: `optimizer.step(closure)`, then `mark_step()`, then a print
    of the loss. A step call anywhere in the loop's own body cuts each iteration: one more
    at the end would cut nothing, so no edit (earlier, only a last statement counted)."""
    from lazyviz.fix import mark_step
    from lazyviz.fix.source import Source

    text = ("import torch._lazy\n"
            "for step in range(3):\n"
            "    loss = optimizer.step(closure)\n"
            "    torch._lazy.mark_step()\n"
            "    print('loss', loss.item())\n")
    source = Source("/w/train.py", text)
    finding = Finding("missing_mark_step", "warning", "repeats", Frame("/w/train.py", 3, "<module>"), (1,))
    step_call = Capabilities().step_call
    proposal = mark_step._insert_at_loop_end(finding, source, source.tree.body[1], step_call, "lazy")
    assert proposal.outlived and not proposal.changes and "already in the loop at train.py:2" in proposal.summary
    without = Source("/w/train.py", text.replace("    torch._lazy.mark_step()\n", ""))
    added = mark_step._insert_at_loop_end(finding, without, without.tree.body[1], step_call, "lazy")
    assert [change.lines for change in added.changes] == [("    torch._lazy.mark_step()\n",)]


def test_an_adam_made_in_another_file_than_its_step_is_made_lowered_there() -> None:
    """minGPT steps its optimizer in trainer.py and makes it in model.py's
    configure_optimizers (an AdamW over parameter groups): the lerp_ finding is at the
    step, and the edit looked for the construction in trainer.py alone."""
    from types import SimpleNamespace

    from lazyviz.analysis.findings import FallbackDetails
    from lazyviz.fix import lowered_adam
    from lazyviz.fix.source import Context, Source

    texts = {"/p/trainer.py": "def run(self):\n    self.optimizer = self.model.configure_optimizers(self.config)\n"
                              "    self.optimizer.step()\n",
             "/p/model.py": "import torch\n\n\ndef configure_optimizers(groups, config):\n"
                            "    optimizer = torch.optim.AdamW(groups, lr=config.lr, betas=config.betas)\n"
                            "    return optimizer\n"}
    info = SimpleNamespace(sources={path: "" for path in texts}, names={}, capabilities=Capabilities())
    context = Context(SimpleNamespace(info=info), lambda path: Source(path, texts[path]) if path in texts else None)
    details = FallbackDetails(op="aten::lerp.Scalar", calls=41, executions_forced=41, per_step=41.0,
                              call="Adam.step", library_line=None, library_fix=False)
    finding = Finding("fallback", "warning", "lerp falls back", Frame("/p/trainer.py", 3, "run"), (1,),
                      details=details)
    assert lowered_adam.answers(finding, context)
    proposal = lowered_adam.propose(finding, context)
    assert "the optimizer at model.py:5 made through with_lowered_step()" in proposal.summary
    # The stand-in in a file of its own beside model.py, imported there in one line.
    assert {change.file for change in proposal.changes} == {"/p/model.py", "/p/lazy_lowered.py"}
    assert any(c.lines == ("from lazy_lowered import with_lowered_step\n",) for c in proposal.changes)
    edited = [c.lines[0] for c in proposal.changes if c.start == 5 and c.file == "/p/model.py"]
    assert edited == ["    optimizer = with_lowered_step(torch.optim.AdamW)(groups, lr=config.lr, betas=config.betas)\n"]


def test_the_cut_for_lbfgs_goes_at_the_end_of_the_closure_before_its_return() -> None:
    """LBFGS.step() calls the closure each of its iterations: the loop is torch's, and
    the user's code inside it is the closure, so mark_step() goes before its return (the
    step loop's own end would cut nothing inside LBFGS.step())."""
    from types import SimpleNamespace

    from lazyviz.analysis.findings import GrowingGraph
    from lazyviz.analysis.library_loops import LibraryLoop
    from lazyviz.fix import mark_step
    from lazyviz.fix.source import Context, Source

    text = ("import torch\n"
            "for i in range(3):\n"
            "    def closure():\n"
            "        optimizer.zero_grad()\n"
            "        loss = criterion(seq(input), target)\n"
            "        loss.backward()\n"
            "        return loss\n"
            "    optimizer.step(closure)\n")
    info = SimpleNamespace(sources={}, names={"mark_step": "torch._lazy.mark_step()"},
                           device="lazy", capabilities=Capabilities())
    context = Context(SimpleNamespace(info=info, trace=None), lambda path: Source(path, text))
    loop = LibraryLoop("torch/optim/lbfgs.py", "step", 330, "LBFGS.step", "call it at the end of closure()", "closure")
    finding = Finding("missing_mark_step", "warning", "the graph grows", Frame("/w/train.py", 5, "closure"), (1,),
                      details=GrowingGraph(growth_per_sync=23357, syncs=6, nodes=(7951,), library_loop=loop))
    proposal = mark_step.propose(finding, context)
    assert "at the end of closure() at train.py:3, before it returns" in proposal.summary
    [change, *imports] = proposal.changes
    assert (change.start, change.lines) == (7, ("        torch._lazy.mark_step()\n",))
    assert [i.lines for i in imports] == [("import torch._lazy\n",)]
    with_cut = Source("/w/train.py", text.replace("        return loss\n", "        torch._lazy.mark_step()\n"
                                                                            "        return loss\n"))
    context = Context(SimpleNamespace(info=info, trace=None), lambda path: with_cut)
    assert mark_step.propose(finding, context).outlived


@pytest.mark.torch
def test_the_work_pending_at_the_bound_is_run_and_counted_on_both_sides(tmp_path: Path) -> None:
    """A loop that reads its loss every 10 iterations and never steps runs nothing before
    its read: ended at 5 iterations, it would look free, and a fixed copy (an execution an
    iteration) costlier. At the bound lazyviz runs what is pending, as the next read
    would, and counts it (cause "bound"): LTC's own counters are the truth."""
    program = ROOT / "tests" / "programs" / "char_lm_device.py"
    folder = project(tmp_path, program)
    trace, counters = tmp_path / "bound.trace", tmp_path / "counters.json"
    ran = subprocess.run([sys.executable, "-m", "lazyviz", "run", "--no-tui", "--iterations", "5", "-o", str(trace),
                          str(ROOT / "tests" / "programs" / "with_counters.py"), program.name, "--device", "lazy"],
                         cwd=folder, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "COUNTERS_FILE": str(counters)}, check=False)
    assert ran.returncode == 0, ran.stderr
    truth = json.loads(counters.read_text())
    with lazyviz.open(trace) as opened:
        run = Run(opened).analysed()
        executions = list(run.executions)
        assert len(executions) == (truth.get("CachedCompile", 0) + truth.get("UncachedCompile", 0)) == 1
        assert executions[0].cause == "bound" and run.info.stopped_after_iterations == 5
        # The graph holds the five iterations' work: the block repeated 5 times.
        (grown,) = [f for f in run.findings if f.kind == "missing_mark_step"]
        assert "5 times" in grown.message or "stepped 5 times" in grown.message, grown.message
    # In a trial bounded after the read at 10, the original's two last iterations run at
    # the bound too: its executions are the read's and the bound's, and its sync time per
    # iteration covers every iteration it did.
    full = traced(folder, program.name, "--device", "lazy")
    tried = cli("fix", "--try", full, cwd=folder)
    assert tried.status == 0, tried.stderr
    assert "12 iterations (optimizer steps) each side" in tried.stderr
    assert row(tried.stderr, "executions")[0] == "2"
    before, after = (float(v) for v in row(tried.stderr, "executions per iteration"))
    assert before < after == 1.0
