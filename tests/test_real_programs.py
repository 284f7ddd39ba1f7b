"""Training programs as users port them to the lazy device (tests/programs: an MNIST
classifier, a VAE and a Transformer language model in the shapes of pytorch/examples'
mnist, vae and word_language_model, on random data), traced for real, each count checked
against LTC's own counters from the same run: the findings must name the real problem
first, and nothing on code that is right."""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import ROOT, assert_diff_applies, cli, line_of, row

import lazyviz

pytestmark = pytest.mark.torch  # each test runs real programs on torch's lazy backend

PROGRAMS = ROOT / "tests" / "programs"
MNIST = ["--epochs", "1", "--batch-size", "32"]


def traced(tmp_path: Path, program: str, *args: str) -> tuple[Path, dict[str, int], dict]:
    """Trace a program under with_counters.py: (the trace, LTC's counters at its end,
    the JSON report)."""
    trace, counters = tmp_path / f"{program}.trace", tmp_path / f"{program}.counters.json"
    env = {**os.environ, "COUNTERS_FILE": str(counters)}
    subprocess.run([sys.executable, "-m", "lazyviz", "run", "--no-tui", "-o", str(trace),
                    str(PROGRAMS / "with_counters.py"), str(PROGRAMS / program), *args],
                   capture_output=True, text=True, env=env, timeout=600, check=False)
    report = cli("report", trace, "--format", "json")
    assert report.status == 0, report.stderr
    return trace, json.loads(counters.read_text()), json.loads(report.stdout)


def assert_counts_match_ltc(trace: Path, counters: dict[str, int]) -> None:
    """Every execution LTC counted is in the trace: misses and hits, and every fallback op."""
    with lazyviz.open(trace) as opened:
        executions = opened.executions()
    cache = Counter(e.cache for e in executions)
    assert cache["miss"] == counters.get("UncachedCompile", 0)
    assert cache["hit"] == counters.get("CachedCompile", 0)
    fallbacks: Counter[str] = Counter()
    for execution in executions:
        fallbacks.update(execution.fallback_ops)
    ltc = {name: count for name, count in counters.items()
           if name.startswith("aten::") and name != "aten::_local_scalar_dense"}
    assert dict(fallbacks) == ltc


def kinds(report: dict) -> list[str]:
    return [finding["kind"] for finding in report["findings"]]


def test_mnist_ported_right_has_no_false_mark_step_finding(tmp_path: Path) -> None:
    # Adadelta updates the model's 8 parameters one at a time: the same ops 8 times in
    # one graph, side by side, not a loop.
    trace, counters, report = traced(tmp_path, "mnist_lazy.py", *MNIST)
    assert_counts_match_ltc(trace, counters)
    assert "missing_mark_step" not in kinds(report)
    # What is there to find is found: the short last batch (200 = 6 x 32 + 8) and argmax.
    recompile = next(f for f in report["findings"] if f["kind"] == "recompile")
    assert "Float[32,1,28,28] -> Float[8,1,28,28]" in recompile["message"] and "drop_last" in recompile["fix"]
    assert any(f["kind"] == "fallback" and f["details"]["op"] == "aten::argmax" for f in report["findings"])
    # The evaluation loop after the last mark_step() reads its results: no "extra sync" there.
    assert "extra_sync" not in kinds(report)
    check = cli("check", trace, "--any-fallbacks")
    assert "missing mark_step" not in check.stdout


def test_mnists_own_argmax_is_edited_to_max_indices_and_falls_back_no_more(tmp_path: Path) -> None:
    """pytorch/examples' mnist's evaluation: `scores.argmax(dim=1)` falls back on TS. The
    edit takes the same indices from max; LTC then counts no argmax, and the evaluation
    prints the same loss and count."""
    program = tmp_path / "mnist_lazy.py"
    shutil.copy(PROGRAMS / "mnist_lazy.py", program)
    trace = tmp_path / "mnist.trace"
    assert cli("run", "--no-tui", "-o", trace, program, *MNIST, cwd=tmp_path).status == 0
    diff = cli("fix", trace, cwd=tmp_path).stdout
    assert_diff_applies(diff, tmp_path)
    assert "+            correct += scores.max(dim=1).indices.eq(labels).sum().item()" in diff

    def untraced() -> tuple[dict[str, int], str]:
        counters = tmp_path / "counters.json"
        done = subprocess.run([sys.executable, str(PROGRAMS / "with_counters.py"), str(program), *MNIST],
                              capture_output=True, text=True, env={**os.environ, "COUNTERS_FILE": str(counters)},
                              timeout=600, check=True)
        return json.loads(counters.read_text()), done.stdout.splitlines()[-1]

    before, printed = untraced()
    # That edit alone (the diff also sets drop_last=True, which changes what is trained).
    edited = next(line[1:] for line in diff.splitlines() if line.startswith("+") and ".indices.eq(" in line)
    program.write_text(program.read_text().replace(
        "            correct += scores.argmax(dim=1).eq(labels).sum().item()", edited))
    after, printed_after = untraced()
    assert before.get("aten::argmax") == 1 and "aten::argmax" not in after
    assert printed.startswith("test: loss") and printed_after == printed


def test_mnist_without_mark_step_names_it_first_and_fails_check(tmp_path: Path) -> None:
    trace, counters, report = traced(tmp_path, "mnist_lazy.py", *MNIST, "--no-mark-step")
    assert_counts_match_ltc(trace, counters)
    first, *rest = report["findings"]
    assert first["kind"] == "missing_mark_step", report["findings"]
    # The argmax fallback costs what it does because the graph is never cut: it says so.
    argmax = next(f for f in rest if f["kind"] == "fallback")
    assert "fix the missing mark_step() finding first" in argmax["message"]
    check = cli("check", trace, "--any-fallbacks")
    assert check.status == 1 and "missing mark_step()" in check.stdout


def test_a_transformers_layers_are_not_a_loop_without_mark_step(tmp_path: Path) -> None:
    # makemore's shape once its split is fixed: AdamW's lerp_ falls back per parameter,
    # each fallback running the step's forward and backward, whose 4 blocks repeat one
    # block of ops 4 times, chained. The loop has its mark_step(): nothing is missing.
    for name in ("train.py", "model.py"):
        shutil.copy(PROGRAMS / "gpt_char" / name, tmp_path / name)
    train, model = tmp_path / "train.py", tmp_path / "model.py"
    train.write_text(train.read_text().replace("torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)",
                                               "torch.optim.AdamW(model.parameters(), lr=1e-3)")
                     .replace("    optimizer.step()\n", "    optimizer.step()\n    torch._lazy.mark_step()\n")
                     .split("\ncheckpoint = ")[0] + "\n")
    model.write_text(model.read_text().replace("n_layer=2", "n_layer=4").replace(
        "q, k, v = self.c_attn(x).split(self.n_embd, dim=2)",
        "qkv = self.c_attn(x)\n        q, k, v = (qkv.narrow(2, i * self.n_embd, self.n_embd) for i in range(3))"))
    trace, counters = tmp_path / "gpt.trace", tmp_path / "counters.json"
    subprocess.run([sys.executable, "-m", "lazyviz", "run", "--no-tui", "-o", str(trace),
                    str(PROGRAMS / "with_counters.py"), str(train), "4"], capture_output=True, text=True,
                   env={**os.environ, "COUNTERS_FILE": str(counters)}, timeout=600, check=True, cwd=tmp_path)
    truth = json.loads(counters.read_text())
    assert_counts_match_ltc(trace, truth)
    assert truth["MarkStep"] == 4  # the script's own, one an iteration
    report = json.loads(cli("report", trace, "--format", "json").stdout)
    assert "missing_mark_step" not in kinds(report), report["findings"][0]["message"]
    [lerp] = [f for f in report["findings"] if f["kind"] == "fallback"]
    assert lerp["details"]["op"] == "aten::lerp.Scalar" and "not cut" not in lerp["message"]
    with lazyviz.open(trace) as opened:  # the repeated block is there: 4 blocks in one step's graph
        assert max(e.nodes for e in opened.executions()) > 600


def test_the_lerp_findings_advice_holds_by_ltcs_counts(tmp_path: Path) -> None:
    # The lerp_ fallback's fix says: a mark_step() between backward and the optimizer's
    # step runs the forward and backward once instead of once per fallback. LTC's own
    # counts on the sample with and without it, the loss the same.
    sample = ROOT / "samples" / "transformer_adamw.py"
    early = tmp_path / "early.py"
    early.write_text(sample.read_text().replace("    loss.backward()\n    optimizer.step()\n",
                                                "    loss.backward()\n    sync()\n    optimizer.step()\n"))
    runs = []
    for script in (sample, early):
        counters = tmp_path / f"{script.stem}.json"
        done = subprocess.run([sys.executable, str(PROGRAMS / "with_counters.py"), str(script), "--steps", "8"],
                              capture_output=True, text=True, env={**os.environ, "COUNTERS_FILE": str(counters)},
                              timeout=600, check=True)
        ltc = json.loads(counters.read_text())
        runs.append((ltc["UncachedCompile"] + ltc["CachedCompile"], ltc["aten::lerp.Scalar"], done.stdout))
    (before, lerps, loss), (after, same_lerps, same_loss) = runs
    assert lerps == same_lerps and loss == same_loss and "final loss" in loss
    assert after * 3 < before, runs
    report = json.loads(cli("report", "--format", "json", traced_sample(tmp_path, sample)).stdout)
    [lerp] = [f for f in report["findings"] if f["kind"] == "fallback" and f["details"]["op"] == "aten::lerp.Scalar"]
    assert "mark_step() between loss.backward() and optimizer.step()" in lerp["fix"]


def traced_sample(tmp_path: Path, sample: Path) -> Path:
    trace = tmp_path / f"{sample.stem}.trace"
    assert cli("run", "--no-tui", "-o", trace, sample, "--steps", "8").status == 0
    return trace


@pytest.mark.parametrize("optimizer", ["adamw", "sgd", "adadelta"])
def test_clean_optimizer_loops_have_no_mark_step_finding(tmp_path: Path, optimizer: str) -> None:
    trace, counters, report = traced(tmp_path, "clean_optimizers.py", optimizer)
    assert_counts_match_ltc(trace, counters)
    assert "missing_mark_step" not in kinds(report)
    check = cli("check", trace, "--any-fallbacks", "--max-executions-per-step", "99")
    assert check.status == 0, check.stdout
    # Light capture sees no IR, and must agree.
    light = tmp_path / "light.trace"
    cli("run", "--no-tui", "--capture", "light", "-o", light, PROGRAMS / "clean_optimizers.py", optimizer)
    light_report = json.loads(cli("report", light, "--format", "json").stdout)
    assert "missing_mark_step" not in kinds(light_report)


def test_vae_failed_execution_is_recorded_and_explained_first(tmp_path: Path) -> None:
    # Adam's lerp_ falls back; the graph pending then fails in the TorchScript
    # interpreter (a Python number, Double on the device, meets Float in a matmul), as
    # it does untraced.
    untraced = subprocess.run([sys.executable, str(PROGRAMS / "vae_lazy.py"), *MNIST],
                              capture_output=True, text=True, timeout=600)
    assert untraced.returncode == 1 and "double != float" in untraced.stderr
    trace, counters, report = traced(tmp_path, "vae_lazy.py", *MNIST)
    assert_counts_match_ltc(trace, counters)  # the execution that failed is there too
    with lazyviz.open(trace) as opened:
        run, executions = opened.run, opened.executions()
    [failure] = run.failures
    assert failure.execution == len(executions) - 1 and "double != float" in failure.error
    first = report["findings"][0]
    assert first["kind"] == "failed_execution" and first["severity"] == "error"
    assert first["site"]["line"] == line_of(PROGRAMS / "vae_lazy.py", "optimizer.step()")
    # The 0-dim multiply whose Python number made it Double, built in loss.backward().
    assert first["details"]["op"] == "aten::mul"
    assert first["details"]["built_at"] == f"vae_lazy.py:{line_of(PROGRAMS / 'vae_lazy.py', 'loss.backward()')}"
    assert first["details"]["reaches_op"] in ("aten::mm", "aten::addmm")
    check = cli("check", trace, "--any-fallbacks")
    assert check.status == 1 and "failed execution" in check.stdout.splitlines()[0]


WORD_LM = PROGRAMS / "word_lm.py"


def fake_corpus(folder: Path) -> Path:
    """A wikitext-like corpus: 200 words, 22 training lines (4 batches of 20 tokens x 4)
    and 64 validation lines (several evaluation batches)."""
    generator = random.Random(0)
    words = [f"w{i}" for i in range(200)]
    for name, lines in (("train", 22), ("valid", 64)):
        text = "".join(" ".join(generator.choice(words) for _ in range(12)) + "\n" for _ in range(lines))
        (folder / f"{name}.txt").write_text(text)
    return folder


@pytest.fixture(scope="module")
def word_lm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int], dict]:
    """The language model as a first port: no mark_step(), clip_grad_norm_ falling back,
    slice bounds baked into each graph."""
    folder = tmp_path_factory.mktemp("word-lm")
    return traced(folder, "word_lm.py", "--data", str(fake_corpus(folder)))


def test_word_language_model_without_mark_step(word_lm) -> None:
    trace, counters, report = word_lm
    assert_counts_match_ltc(trace, counters)
    findings = report["findings"]
    assert findings[0]["kind"] == "missing_mark_step" and "torch._lazy.mark_step()" in findings[0]["fix"]
    clip = next(f for f in findings if f["kind"] == "fallback" and f["details"]["call"] == "clip_grad_norm_")
    assert "because the graph is not cut: fix the missing mark_step() finding first" in clip["message"]
    # The slice bounds of cut() (`source[start:start + length]`, `source[start + 1:...]`) are
    # one cause, one finding.
    slicing = {f"word_lm.py:{line_of(WORD_LM, 'return source[start:start + length]')}"}
    baked = [f for f in findings if f["kind"] == "recompile" and any(line in f["message"] for line in slicing)]
    assert len(baked) == 1 and "one cause" in baked[0]["message"], [f["message"] for f in baked]
    check = cli("check", trace, "--any-fallbacks")
    assert check.status == 1 and "missing mark_step()" in check.stdout and "cache miss rate" in check.stdout


def test_word_language_model_html_report_stays_small(word_lm, tmp_path: Path) -> None:
    # Graphs of ~2,000 nodes: their IR, backend text and diff are cut on the page, each
    # saying which command prints it whole (pytorch/examples' own word LM made 7.5 MB).
    trace = word_lm[0]
    page = tmp_path / "report.html"
    assert cli("report", trace, "-o", page).status == 0
    html = page.read_text()
    assert len(html.encode()) < 2 << 20
    assert "more lines: lazyviz export TRACE --execution" in html and "unchanged nodes</span>" in html
    import re

    from lazyviz.export.html import PAGE_MAX_LINES
    longest = max(block.count("\n") for block in re.findall(r"<pre>(.*?)</pre>", html, flags=re.S))
    assert longest <= PAGE_MAX_LINES + 1


async def test_word_language_model_first_screen_names_the_root_cause_and_its_fix(word_lm) -> None:
    from lazyviz.tui.app import build_app
    from lazyviz.tui.widgets.findings_strip import FindingsStrip

    app = build_app(word_lm[0])
    async with app.run_test(size=(80, 24)) as pilot:
        for _ in range(200):  # the analysis runs in a worker
            await pilot.pause(0.05)
            # ...and the fix line is shown and laid out, as the user first sees it.
            if app.state.latest is not None and app.state.opened and app.query_one("#fix").size.width:
                break
        strip = app.query_one(FindingsStrip)
        first = str(strip.get_option_at_index(0).prompt)
        assert "no mark_step" in first and "grows" in first
        fix = app.query_one("#fix")
        assert fix.display and fix.size.width > 40
        assert str(fix.render()).startswith("fix: call torch._lazy.mark_step()")


BERT = ["--steps", "6"]


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int], dict]:
    """A Hugging Face classifier fine-tuned as its examples write it: per-batch padding
    (DataCollatorWithPadding), transformers' own attention-mask code."""
    return traced(tmp_path_factory.mktemp("bert"), "bert_classifier.py", *BERT)


def test_bert_counts_are_the_runs_and_the_library_sync_is_named_where_it_is(bert) -> None:
    trace, counters, report = bert
    assert_counts_match_ltc(trace, counters)
    findings = report["findings"]
    # Per-batch padding: one cause, counted in the run's steps (6), however many syncs a step recompiles at.
    [shapes] = [f for f in findings if f["kind"] == "dynamic_shape"]
    assert shapes["details"]["steps"] <= 6 and "of 6 steps" in shapes["message"]
    assert "pad or bucket" in shapes["fix"]
    # The host read is transformers' check of the mask, inside the model: named there, with the option that avoids it.
    [read] = [f for f in findings if f["kind"] == "extra_sync" and f["details"]["cause"] == "bool"]
    assert read["details"]["library_line"].startswith("transformers/masking_utils.py:")
    assert "inside BertModel.forward()" in read["message"]
    assert "attn_implementation=\"eager\"" in read["fix"] and "4D additive mask" in read["fix"]
    assert "instead of `if tensor:`" not in read["fix"]  # there is no `if` in the user's code
    index = next(f for f in findings if f["kind"] == "fallback" and f["details"]["op"] == "aten::index.Tensor")
    assert index["details"]["library_line"].startswith("transformers/masking_utils.py:") and index["details"]["library_fix"]


def test_bert_with_the_advised_mask_has_no_library_sync_or_fallback(tmp_path: Path) -> None:
    # The fix lazyviz gives, applied: eager attention and a 4D additive mask. LTC's counters
    # say what is left: no fallback, no host read but the final loss.item(), one execution a step.
    trace, counters, report = traced(tmp_path, "bert_classifier.py", *BERT, "--mask-4d")
    assert_counts_match_ltc(trace, counters)
    assert not any(name.startswith("aten::") and name != "aten::_local_scalar_dense" for name in counters)
    assert counters.get("aten::_local_scalar_dense") == 1
    assert {f["kind"] for f in report["findings"]} == {"dynamic_shape"}
    assert report["summary"]["executions"] == 6 == counters["MarkStep"]


def test_bert_per_batch_padding_and_sdpa_get_their_edits_proved_against_ltcs_counts(tmp_path: Path) -> None:
    # DataCollatorWithPadding pads each batch to its own longest: a new length, a new
    # graph. The edit pads to a multiple that puts every length the trace saw in one
    # shape; the attention's fallback goes with attn_implementation="eager"; --try
    # measures both, and LTC's own counters on the patched program agree.
    folder = tmp_path / "project"
    folder.mkdir()
    for name in ("bert_classifier.py", "with_counters.py"):
        (folder / name).write_bytes((PROGRAMS / name).read_bytes())
    trace = tmp_path / "bert.trace"
    assert cli("run", "--no-tui", "-o", trace, "bert_classifier.py", *BERT, cwd=folder).status == 0
    fixed = cli("fix", trace, "--try", cwd=folder)
    assert fixed.status == 0, fixed.stderr
    assert_diff_applies(fixed.stdout, folder)
    assert "+                    collate_fn=DataCollatorWithPadding(tokenizer, pad_to_multiple_of=32))" in fixed.stdout
    assert "edit: pad_to_multiple_of=32 on the padding at bert_classifier.py:" in fixed.stderr
    assert "become 1 shape" in fixed.stderr
    before, after = (int(cell) for cell in row(fixed.stderr, "recompiles after warm-up"))
    assert before > 0 and after == 0
    misses_after = int(row(fixed.stderr, "cache misses")[1])
    gone = fixed.stderr.split("findings gone:")[1].split("findings left:")[0]
    assert "input shapes change" in gone
    # transformers' scaled_dot_product_attention falls back on its masked path: eager attention, in the config.
    assert '+                    attn_implementation="eager")' in fixed.stdout
    assert "BertSelfAttention.forward() falls back" in gone
    assert row(fixed.stderr, "executions per step") == ["16.0", "8.0"]
    # The truth for the patched side: the edit written to the project, run untraced.
    assert cli("fix", trace, "--write", cwd=folder).status == 0
    counters = tmp_path / "ltc.json"
    patched = subprocess.run([sys.executable, "with_counters.py", "bert_classifier.py", *BERT], cwd=folder,
                             capture_output=True, text=True, env={**os.environ, "COUNTERS_FILE": str(counters)},
                             timeout=600)
    assert patched.returncode == 0, patched.stderr
    assert json.loads(counters.read_text())["UncachedCompile"] == misses_after


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_scripts_own_counters_read_as_untraced_in_every_capture_mode(tmp_path: Path, optimizer: str) -> None:
    # A user printing torch._lazy.metrics sees the numbers of their loop, not lazyviz's:
    # full capture with source lines once kept the last frame that built a node alive,
    # and a tensor in it was one more SyncedTensorsWithIR at every mark_step (with Adam).
    program = PROGRAMS / "optimizer_counters.py"
    untraced = subprocess.run([sys.executable, str(program), optimizer], capture_output=True, text=True, timeout=300)
    assert untraced.returncode == 0, untraced.stderr
    expected = untraced.stdout.strip().splitlines()[-1]
    assert "'SyncedTensorsWithIR'" in expected
    for mode in ([], ["--no-source-lines"], ["--capture", "light"]):
        trace = tmp_path / f"{'-'.join(mode) or 'full'}.trace"
        run = cli("run", "--no-tui", "-o", trace, *mode, program, optimizer)
        assert run.status == 0, run.stderr
        printed = next(line for line in run.stdout.splitlines() if line.startswith("{"))
        assert printed == expected, f"capture {mode or 'full'}"


TIME_SEQUENCE = PROGRAMS / "time_sequence_lazy.py"


def test_time_sequence_split_in_a_loop_header_is_named_at_the_split(tmp_path: Path) -> None:
    # `for input_t in input.split(1, dim=1)`: the data is on the device already, so the
    # split syncs nothing; its pieces come back on the CPU and the cell two lines on raises.
    _, counters, report = traced(tmp_path, "time_sequence_lazy.py")
    assert counters.get("aten::split_copy.Tensor", 0) >= 1
    crash = report["findings"][0]
    assert crash["kind"] == "crash" and crash["details"]["op"] == "aten::split_copy.Tensor"
    split_line = line_of(TIME_SEQUENCE, "else input.split(1, dim=1)")
    assert crash["site"]["line"] == split_line and f"time_sequence_lazy.py:{split_line}, which falls back" in \
        crash["message"]
    assert "narrow" in crash["fix"]
    assert not any(f["kind"] == "fallback" and "split" in f["details"]["op"] for f in report["findings"])


def test_time_sequence_lstm_cell_cannot_run_here_and_the_workaround_trains(tmp_path: Path) -> None:
    trace, counters, report = traced(tmp_path, "time_sequence_lazy.py", "--narrow")
    assert_counts_match_ltc(trace, counters)
    [crash] = [f for f in report["findings"] if f["kind"] == "crash"]
    assert crash["details"]["op"] == "aten::as_strided" and crash["details"]["call"] == "LSTMCell.forward"
    assert "cannot run on the lazy device at all" in crash["message"]
    assert crash["site"]["line"] == line_of(TIME_SEQUENCE, "else module(x, state)")
    assert "gates.narrow" in crash["fix"]
    # Not a fallback to accept: no finding says "falls back" for the view op.
    assert not any(f["kind"] == "fallback" for f in report["findings"])
    # The advice, applied: the model trains, with LTC's counters as the truth.
    (tmp_path / "cells").mkdir()
    trace, counters, report = traced(tmp_path / "cells", "time_sequence_lazy.py", "--cells")
    assert_counts_match_ltc(trace, counters)
    assert report["run"]["exit_status"] == 0 and "crash" not in {f["kind"] for f in report["findings"]}
    # What is left falls back in LBFGS's own code (its dot products), not in the cells.
    assert {name for name in counters if name.startswith("aten::")} <= {"aten::_local_scalar_dense", "aten::dot"}


def test_adamws_per_parameter_syncs_are_not_a_batch_change(tmp_path: Path) -> None:
    """AdamW's lerp_ falls back once per parameter on TS: optimizer.step() syncs once per
    parameter, each of another shape. Every batch has 16 rows: no shape finding, no
    drop_last; the loop without mark_step() and the fallback are what is there."""
    trace, counters, report = traced(tmp_path, "adamw_no_step.py")
    assert_counts_match_ltc(trace, counters)
    assert counters["aten::lerp.Scalar"] == 4 * 6  # four parameters, six iterations: the truth
    assert "dynamic_shape" not in kinds(report)
    assert not [f for f in report["findings"] if "drop_last" in f["fix"] or "shape" in f["message"].split(":")[0]]
    lerp = next(f for f in report["findings"] if f["kind"] == "fallback" and f["details"]["op"] == "aten::lerp.Scalar")
    assert "24 calls" in lerp["message"]
    assert kinds(report)[0] == "missing_mark_step"


def test_predictions_grown_by_concatenation_are_an_accumulator_not_batches(tmp_path: Path) -> None:
    """Every batch has 8 rows; the predictions kept on the device grow by 8 at every step
    (torch.cat), so each step's graph is new: LTC compiles it, and lazyviz says why."""
    trace, counters, report = traced(tmp_path, "eval_accumulate.py")
    assert_counts_match_ltc(trace, counters)
    assert counters["UncachedCompile"] == 9  # a new shape each step (and the final read): the truth
    grown = next(f for f in report["findings"] if f["kind"] == "dynamic_shape")
    assert "an input grows by 8 at each of" in grown["message"]
    assert "Float[8,4] -> Float[16,4] -> Float[24,4]" in grown["message"] and "eval_accumulate.py:15" in grown["message"]
    assert "drop_last" not in grown["fix"] and "eval_accumulation_steps" in grown["fix"]
