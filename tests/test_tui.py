"""The terminal UI driven with Textual's Pilot on real traces of the samples."""
from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import pytest
from conftest import ROOT, SCRIPTS

from lazyviz.tui.app import build_app
from lazyviz.tui.widgets.code_view import CodeView
from lazyviz.tui.widgets.executions import SORTS, ExecutionList
from lazyviz.tui.widgets.header import RunHeader, ending

SIZE = (100, 32)


async def wait_for(pilot, condition: Callable[[], bool], seconds: float = 30) -> None:
    for _ in range(int(seconds / 0.05)):
        if condition():
            await pilot.pause()
            return
        await pilot.pause(0.05)
    raise AssertionError("the UI never got there")


def view(app, view_id: str) -> str:
    return app.query_one(f"#{view_id}", CodeView).text


async def test_table_rows_causes_and_sites(sample_trace) -> None:
    app = build_app(sample_trace("item_in_loop"))
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(ExecutionList)
        await wait_for(pilot, lambda: len(table.rows) == 10 and app.state.latest is not None)
        assert [e.cause for e in table.rows[:2]] == ["item", "mark_step"]
        line = table.render_line(0).text
        assert "item" in line and "item_in_loop.py:31" in line and "miss" in line
        assert "Tensor.item()" in line  # the why column names the call that synced


# What the first screen must name for each sample: the strip's top line, the row it
# selects (its cause) and the tab that explains it.
FIRST_SCREENS = {
    "batch_size_change": ("shape 16->24, built at batch_size_change.py:28", "mark_step", "diff"),
    "item_in_loop": ("Tensor.item() forces 1 extra execution per step", "item", "stack"),
    "fallback_mse": ("aten::mse_loss in mse_loss()", "fallback", "stack"),
    "missing_mark_step": ("no mark_step  one graph repeats", "item", "stack"),
    "transformer_adamw": ("aten::lerp.Scalar in Adam.step()", "fallback", "stack"),
    "python_number_aliasing": ("step 3: aliasing", "mark_step", "diff"),
    "dtype_change": ("dtype Float->Double", "mark_step", "diff"),
    "python_branch": ("+52 ops", "mark_step", "diff"),
    "clean_mlp": ("clean: one execution per step", "mark_step", "ir"),
}


def strip_text(app) -> list[str]:
    from lazyviz.tui.widgets.findings_strip import FindingsStrip

    return [str(option.prompt) for option in app.query_one(FindingsStrip).options]


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
@pytest.mark.parametrize("sample", sorted(FIRST_SCREENS))
async def test_the_first_screen_names_the_problem(sample_trace, sample: str, size: tuple[int, int]) -> None:
    """A finished trace opens on its worst finding: the strip names it, its execution is
    selected and the tab that explains it is open, at 80x24 as at 200x50."""
    expected, cause, tab = FIRST_SCREENS[sample]
    app = build_app(sample_trace(sample))
    async with app.run_test(size=size) as pilot:
        table = app.query_one(ExecutionList)
        await wait_for(pilot, lambda: app.state.latest is not None and app.state.opened)
        assert expected in strip_text(app)[0]
        assert all(len(line) <= size[0] for line in strip_text(app))  # one line each, never wrapped
        assert table.selected.cause == cause
        assert app.query_one("#details").active == tab
        if app.state.latest.findings:
            assert table.selected.index == app.state.latest.findings[0].executions[0]
        header = str(app.query_one("#header").render())
        # The counts line survives any command length: the first line never wraps.
        assert header.splitlines()[1].startswith("steps ") and "misses" in header.splitlines()[1]


async def test_keys_move_between_findings_table_and_details(sample_trace) -> None:
    app = build_app(sample_trace("transformer_adamw"))
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(ExecutionList)
        await wait_for(pilot, lambda: app.state.latest is not None and app.state.opened)
        findings = app.state.latest.findings
        await pilot.press("g")  # the next finding: its first execution
        assert table.selected.index == findings[1].executions[0]
        await pilot.press("enter")
        assert app.focused is not table
        await pilot.press("escape")
        assert app.focused is table
        selected = table.selected
        await pilot.press("o")  # sorted by sync ms, largest first; the selection stays
        assert [table.row(i).sync_ms for i in range(3)] == sorted((e.sync_ms for e in table.rows), reverse=True)[:3]
        assert table.selected == selected and "▼sync ms" in str(app.query_one("#columns").render())
        await pilot.press("f1")
        assert type(app.screen).__name__ == "HelpScreen"
        await pilot.press("escape")
        assert type(app.screen).__name__ != "HelpScreen"
        titles = [command.title for command in app.get_system_commands(app.screen)]
        assert any(t.startswith("Go to finding 1: fallback") or t.startswith("Go to finding 1:") for t in titles)
        assert "Sort by nodes" in titles and "Export the selected graph as SVG" in titles
        # A long headline is cut between words, and lazyviz's commands come before Textual's own.
        for number, finding in enumerate(findings, 1):
            from lazyviz.present import finding_headline
            title = next(t for t in titles if t.startswith(f"Go to finding {number}: "))
            shown = title.removeprefix(f"Go to finding {number}: ").removesuffix(" …")
            full = finding_headline(finding)
            assert full.startswith(shown) and (shown == full or full[len(shown)] == " ")
        assert titles.index("Reverse the sort") < titles.index("Quit")


async def test_a_killed_run_shows_how_long_it_ran_not_how_long_ago_it_started(tmp_path: Path) -> None:
    from lazyviz.trace.synthetic import execution, write_trace

    # Killed: lazyviz run recorded how it ended, the script never recorded its elapsed time.
    write_trace(tmp_path / "killed.trace", [execution(i, start_ms=i * 1000.0, sync_ms=500.0) for i in range(5)],
                finished=False, start_time="2020-01-01T00:00:00", ended_by="killed by SIGTERM", exit_status=-15)
    app = build_app(tmp_path / "killed.trace", poll_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(ExecutionList)
        await wait_for(pilot, lambda: len(table.rows) == 5)
        app.trace_view.refresh_header()
        await pilot.pause()
        header = str(app.query_one(RunHeader).render())
        assert "killed by SIGTERM" in header and " 4.5s " in header  # the last execution's end


async def test_a_long_sync_shows_whole_in_a_unit_that_fits(tmp_path: Path) -> None:
    """A 10.9 s sync at 100 columns reads "10.9 s", not "10874.…" cut to the column."""
    from lazyviz.trace.synthetic import execution, write_trace

    write_trace(tmp_path / "slow.trace", [execution(0, sync_ms=10874.12, cache="miss"), execution(1, sync_ms=953.5),
                                          execution(2, sync_ms=2250.0)])
    app = build_app(tmp_path / "slow.trace")
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(ExecutionList)
        await wait_for(pilot, lambda: len(table.rows) == 3)
        lines = [table.render_line(row).text for row in range(3)]
        assert "10.9 s" in lines[0] and "…" not in lines[0].split("miss")[1], lines[0]
        assert "953.50" in lines[1] and "2250.0" in lines[2]


async def test_the_column_heading_follows_a_resize(sample_trace) -> None:
    # Wider, the rows gain the graph and trace ms columns: the heading must gain them too.
    app = build_app(sample_trace("batch_size_change"))
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(ExecutionList)
        await wait_for(pilot, lambda: len(table.rows) == 8)

        def heading() -> str:
            return str(app.query_one("#columns").render())

        assert "graph" not in heading()
        for size, wide in (((200, 50), True), ((60, 20), False), ((120, 40), True)):
            await pilot.resize_terminal(*size)
            await wait_for(pilot, lambda wide=wide: ("trace ms" in heading()) == wide)
            assert ("graph" in heading()) == wide


def test_the_header_says_the_script_raised_and_where_not_lazyviz() -> None:
    from builders import run_info

    from lazyviz.trace.model import Frame

    # pytorch/examples' word_language_model ends in torch.save(model) on the lazy device.
    frames = [Frame("/w/main.py", 238, "<module>"), Frame("/venv/site-packages/torch/serialization.py", 1224, "save")]
    run = run_info(argv=["main.py"], exit_status=1, error_frames=frames,
                   error="RuntimeError: Attempted to access the data pointer on an invalid python storage.")
    assert ending(run) == "main.py raised RuntimeError at main.py:238"
    assert ending(run_info(exit_status=130, error="KeyboardInterrupt")) == "stopped by you (Ctrl-C or q)"
    assert ending(run_info(exit_status=0)) == "exited 0"


def test_a_big_trace_shows_all_its_rows_before_it_is_analysed(tmp_path: Path, monkeypatch) -> None:
    import lazyviz.tui.watcher
    from lazyviz.trace.synthetic import execution, write_trace

    write_trace(tmp_path / "big.trace", [execution(i, step=i) for i in range(1050)])
    monkeypatch.setattr(lazyviz.tui.watcher, "FIRST_BATCH", 100)
    monkeypatch.setattr(lazyviz.tui.watcher, "BATCH", 300)
    watcher = lazyviz.tui.watcher.TraceWatcher(tmp_path / "big.trace")
    updates = []
    while not (updates and updates[-1].done):
        updates.append(watcher.poll())
    assert [u.count for u in updates] == [100, 400, 700, 1000, 1050, 1050]
    # Every batch, the short last one too, goes out at once without waiting for the analysis ...
    assert all(u.more and u.analysed is None for u in updates[:-1])
    # ... which comes right after, with everything in it.
    assert updates[-1].analysed is not None and updates[-1].analysed.summary.executions == 1050


def test_a_trace_with_much_ir_shows_quick_findings_first_then_all(sample_trace, monkeypatch) -> None:
    # A word LM's 68 MB of IR take 4 s to analyse; what needs no graph parsed in full
    # (fallbacks, extra syncs, a growing graph) goes out first, the rest right after.
    import lazyviz.tui.watcher

    monkeypatch.setattr(lazyviz.tui.watcher, "QUICK_FIRST_IR_BYTES", 0)  # the samples' IR is small
    watcher = lazyviz.tui.watcher.TraceWatcher(sample_trace("batch_size_change"))
    analysed = []
    while not analysed or not analysed[-1].analysis.complete:
        update = watcher.poll()
        if update.analysed is not None:
            analysed.append(update.analysed)
    quick, whole = analysed
    assert not quick.analysis.complete and quick.analysis.recompiles == []
    assert [f.kind for f in whole.findings] == ["recompile"] and quick.findings == []
    assert whole.summary == quick.summary


def test_a_trace_with_megabytes_of_distinct_lines_gets_the_quick_pass_first(tmp_path: Path) -> None:
    """The threshold counts what there is to parse, each stored line once: a run whose
    graphs each bring 300 new lines (a new input shape every step) is over it."""
    import lazyviz.tui.watcher
    from lazyviz.trace.schema import GraphRecord
    from lazyviz.trace.synthetic import execution
    from lazyviz.trace.writer import TraceWriter

    writer = TraceWriter(tmp_path / "t.trace")
    writer.set_run(argv=["train.py"], capture="full")
    for step in range(120):
        text = f"IR {{\n  %0 = [Float[4,{8 + step},64]] lazy_tensors::device_data(), device=CPU0\n" + "".join(
            f"  %{i} = [Float[4,{8 + step},64]] aten::add(%{i - 1}, %0), location=step@train.py:{i}, NodeType=N\n"
            for i in range(1, 300)) + "}\n"
        writer.add_execution(execution(step, step=step, graph=f"g{step}", nodes=300, cache="miss"),
                             GraphRecord(f"g{step}", 300, text, "", step))
    writer.set_run(exit_status=0, steps=120, complete=True)
    writer.close()
    watcher = lazyviz.tui.watcher.TraceWatcher(tmp_path / "t.trace")
    first = next(update.analysed for update in iter(watcher.poll, None) if update.analysed is not None)
    assert watcher.ir_texts.size() > lazyviz.tui.watcher.QUICK_FIRST_IR_BYTES
    assert not first.analysis.complete  # the quick pass, then the whole analysis


async def test_a_sorted_table_puts_rows_that_arrive_in_their_place(tmp_path: Path) -> None:
    from lazyviz.trace.synthetic import execution
    from lazyviz.trace.writer import TraceWriter

    writer = TraceWriter(tmp_path / "live.trace")
    writer.set_run(argv=["train.py"])
    for index in range(20):
        writer.add_execution(execution(index, sync_ms=float(index % 5)))
    writer.flush()
    try:
        app = build_app(tmp_path / "live.trace", poll_s=0.05)
        async with app.run_test(size=SIZE) as pilot:
            table = app.query_one(ExecutionList)
            await wait_for(pilot, lambda: len(table.rows) == 20)
            await pilot.press("o")  # sync ms, largest first
            for index in range(20, 45):
                writer.add_execution(execution(index, sync_ms=float(index % 7)))
            writer.flush()
            await wait_for(pilot, lambda: len(table.rows) == 45)
            shown = [table.row(position) for position in range(45)]
            assert sorted(e.index for e in shown) == list(range(45))
            assert [e.sync_ms for e in shown] == sorted((e.sync_ms for e in shown), reverse=True)
            assert all(a.index < b.index for a, b in pairwise(shown) if a.sync_ms == b.sync_ms)
    finally:
        writer.close()


async def test_selecting_a_row_shows_ir_and_backend(sample_trace) -> None:
    app = build_app(sample_trace("clean_mlp"))
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(ExecutionList)
        await wait_for(pilot, lambda: len(table.rows) == 6)
        await pilot.press("home", "down")
        graph = table.rows[1].graph
        await wait_for(pilot, lambda: graph in view(app, "ir-view"))
        assert "aten::addmm" in view(app, "ir-view")
        assert "graph(" in view(app, "backend-view")
        assert "mark_step" in view(app, "stack-view") and "> main" in view(app, "stack-view")
        assert not table.follow  # moving away from the tail stops following
        await pilot.press("f")  # a finished run: to its last execution, with nothing more to follow
        assert not table.follow and table.cursor == 5


async def test_diff_of_the_recompile_shows_the_changed_shapes(sample_trace) -> None:
    app = build_app(sample_trace("batch_size_change"))
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(ExecutionList)
        await wait_for(pilot, lambda: len(table.rows) == 8)
        await pilot.press("home", "n")
        assert table.cursor == 1
        await pilot.press("n")
        assert table.cursor == 4  # the first step with the new batch size
        await pilot.press("3")
        await wait_for(pilot, lambda: "vs execution 1" in view(app, "diff-view"))
        diff = view(app, "diff-view")
        assert "input shape" in diff and "Float[16,32] -> Float[24,32]" in diff
        assert any(line.startswith("! ") and "Float[24,32]" in line for line in diff.splitlines())
        await pilot.press("N")
        assert table.cursor == 1


async def test_search_finds_an_op(sample_trace) -> None:
    app = build_app(sample_trace("transformer_adamw"))
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(ExecutionList)
        await wait_for(pilot, lambda: len(table.rows) > 30)
        await pilot.press("home", "slash")
        await pilot.press(*"aten::_softmax", "enter")
        found = table.rows[table.cursor]
        assert table.cursor > 0 and "aten::_softmax" in app.state.ir_texts[found.graph]


async def test_findings_and_timing_tabs(sample_trace) -> None:
    app = build_app(sample_trace("fallback_mse"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.state.latest is not None and app.state.run_info and app.state.run_info.finished)
        await pilot.press("6")
        findings = str(app.query_one("#findings-view").render())
        assert "aten::mse_loss falls back" in findings and "fallback_mse.py:30" in findings
        await pilot.press("7")
        assert "4 steps" in str(app.query_one("#timing-view").render())


@pytest.mark.torch  # runs lazyviz on a real script
async def test_follows_a_trace_another_process_writes(tmp_path: Path) -> None:
    path, gate = tmp_path / "grow.trace", tmp_path / "go"
    process = subprocess.Popen(
        [sys.executable, "-m", "lazyviz", "run", "--no-tui", "-o", str(path), str(SCRIPTS / "slow_steps.py"),
         "6", "0.1", str(gate)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert process.stdout.readline() == "step 0\n"  # and it waits for the gate
        app = build_app(path, poll_s=0.05)
        async with app.run_test(size=SIZE) as pilot:
            table = app.query_one(ExecutionList)
            await wait_for(pilot, lambda: len(table.rows) >= 1)
            assert len(table.rows) == 1 and not app.state.run_info.finished
            gate.touch()
            await wait_for(pilot, lambda: len(table.rows) == 6 and app.state.run_info.finished)
            assert "exited 0" in str(app.query_one("#header").render())
    finally:
        process.wait(60)


def _normalised_copy(trace: Path, folder: Path) -> Path:
    """The same trace with timings and paths that do not depend on the machine."""
    copy = folder / trace.name
    shutil.copy(trace, copy)
    with sqlite3.connect(copy) as db:
        db.execute("UPDATE executions SET sync_ms = 1.5 + idx % 3, trace_ms = 2.25 + idx % 5, "
                   "compile_ms = 0, execute_ms = 1.5, start_ms = idx * 10")
        db.execute("UPDATE kinds SET file = replace(file, ?, '/repo')", (str(ROOT),))
        # Stacks name the repo, site-packages and the stdlib, wherever this machine has them.
        for folder, stable in ((str(ROOT), "/repo"), (sysconfig.get_paths()["purelib"], "/site-packages"),
                               (sysconfig.get_paths()["stdlib"], "/python")):
            db.execute("UPDATE stacks SET frames = replace(frames, ?, ?)", (folder, stable))
        # Graph ids hash torch's post order, which a loaded machine can shift for a graph
        # or two (see the closing note of #12): number them by first execution instead.
        first_seen = [row[0] for row in db.execute("SELECT graph FROM execution_rows GROUP BY graph ORDER BY MIN(idx)")]
        for number, graph in enumerate(first_seen):
            stable = f"{number:08x}" + "0" * 8
            db.execute("UPDATE kinds SET graph = ? WHERE graph = ?", (stable, graph))
            db.execute("UPDATE graphs SET id = ? WHERE id = ?", (stable, graph))
        # The process's memory as it rose: two figures, at the first and the last execution.
        last, step = db.execute("SELECT idx, step FROM executions ORDER BY idx DESC LIMIT 1").fetchone()
        db.execute("DELETE FROM memory")
        db.executemany("INSERT OR REPLACE INTO memory VALUES (?, ?, ?)", [(0, 0, 400_000), (last, step, 520_000)])
        db.execute("UPDATE run SET value = '1.0' WHERE key = 'elapsed_s'")
        db.execute("UPDATE run SET value = replace(value, ?, '/repo') WHERE key IN ('argv', 'cwd')", (str(ROOT),))
    return copy


def _case(sample: str, keys: list[str], size: tuple[int, int], what: str = "first-screen"):
    return pytest.param(sample, keys, size, id=f"{sample}-{what}-{size[0]}x{size[1]}")


@pytest.mark.parametrize("sample, keys, size", [
    *[_case(sample, [], size) for sample in sorted(FIRST_SCREENS) for size in ((80, 24), (200, 50))],
    _case("batch_size_change", ["home", "n", "n", "3"], (100, 30), "second-miss-diff"),
    _case("item_in_loop", ["6"], (100, 30), "findings-tab"),
    _case("transformer_adamw", ["7"], (100, 30), "timing-tab"),
    _case("transformer_adamw", ["question_mark"], (80, 24), "help"),
    # A light theme picked in the palette: every lazyviz colour readable on white.
    _case("python_number_aliasing", ["theme:textual-light", "home", "down", "down", "down", "3"], (100, 30),
          "light-theme-diff"),
])
def test_snapshots(snap_compare, sample_trace, tmp_path: Path, sample: str, keys: list[str],
                   size: tuple[int, int]) -> None:
    """The first screen of every sample at 80x24 and 200x50, and a few views after keys."""
    app = build_app(_normalised_copy(sample_trace(sample), tmp_path), poll_s=0.05)
    app.animation_level = "none"  # the tab underline must not be caught mid-slide on a loaded machine

    async def settle(pilot) -> None:
        table = app.query_one(ExecutionList)
        await wait_for(pilot, lambda: app.state.run_info is not None and app.state.run_info.finished and table.rows
                       and app.state.latest is not None and app.state.opened)
        for key in keys:
            if key.startswith("theme:"):
                app.theme = key.removeprefix("theme:")
                await pilot.pause()
            else:
                await pilot.press(key)
        await wait_for(pilot, lambda: any("execution" in view(app, v) or "at " in view(app, v)
                                          for v in ("ir-view", "diff-view", "stack-view")))
        await pilot.wait_for_scheduled_animations()
        await pilot.pause(0.3)

    assert snap_compare(app, terminal_size=size, run_before=settle)


async def test_small_terminal_still_shows_rows_and_details(sample_trace) -> None:
    app = build_app(sample_trace("item_in_loop"))
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(ExecutionList)
        await wait_for(pilot, lambda: len(table.rows) == 10)
        active = app.query_one("#details").active  # the tab that explains the selected row
        assert table.size.height >= 3 and app.query_one(f"#{active}-view").size.height >= 3


async def test_saving_svg_never_replaces_a_file(sample_trace, tmp_path: Path) -> None:
    trace = tmp_path / "t.trace"
    shutil.copy(sample_trace("clean_mlp"), trace)
    mine = tmp_path / "t.trace.execution-5.svg"
    mine.write_text("my drawing")
    app = build_app(trace)
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(ExecutionList)
        await wait_for(pilot, lambda: len(table.rows) == 6 and table.cursor == 5)
        await pilot.press("s")
        await wait_for(pilot, lambda: (tmp_path / "t.trace.execution-5-2.svg").exists(), 60)
    assert mine.read_text() == "my drawing"
    assert "<svg" in (tmp_path / "t.trace.execution-5-2.svg").read_text()


async def test_a_damaged_trace_says_so_instead_of_hanging(sample_trace, tmp_path: Path) -> None:
    trace = tmp_path / "t.trace"
    shutil.copy(sample_trace("clean_mlp"), trace)
    with sqlite3.connect(trace) as db:
        db.execute("UPDATE executions SET sync_ms = 'many' WHERE idx = 3")
    app = build_app(trace)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "damaged" in view(app, "ir-view"))
        assert "execution 3" in view(app, "ir-view")


async def test_every_tab_has_a_key_and_the_tenth_shows_the_ops(sample_trace) -> None:
    from lazyviz.tui.panels import TABS, tab_key

    assert len({tab_key(n) for n in range(len(TABS))}) == len(TABS) >= 10
    app = build_app(sample_trace("clean_mlp"))
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(ExecutionList)
        await wait_for(pilot, lambda: len(table.rows) == 6)
        await pilot.press("0")
        await wait_for(pilot, lambda: "aten::addmm" in view(app, "ops-view"))
        assert app.query_one("#details").active == "ops"
        assert "distinct ops" in view(app, "ops-view")


@pytest.mark.torch
async def test_a_live_run_moves_to_its_worst_finding_when_it_ends(tmp_path: Path) -> None:
    # As `lazyviz run` shows it: following the newest row while the script runs, then, at
    # the end, the recompile of step 4 (the batch grew) selected, its fix under the strip.
    trace = tmp_path / "live.trace"
    process = subprocess.Popen([sys.executable, "-m", "lazyviz", "run", "--no-tui", "-o", str(trace),
                                str(ROOT / "samples" / "batch_size_change.py"), "--steps", "8"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        app = build_app(trace, process=process, poll_s=0.05)
        async with app.run_test(size=(80, 24)) as pilot:
            table = app.query_one(ExecutionList)
            fix = app.query_one("#fix")
            await wait_for(pilot, lambda: app.state.opened and fix.size.width > 0, seconds=120)
            assert table.selected is not None and table.selected.index == 4 and not table.follow
            assert fix.display and "pad or bucket batches" in str(fix.render())
    finally:
        process.wait(timeout=120)


@pytest.mark.torch  # traces a script of its own
async def test_the_stack_tab_opens_on_the_users_line_centred(tmp_path: Path) -> None:
    # 27 frames of stack come first: the source line that synced would be below the pane.
    script = tmp_path / "deep.py"
    script.write_text("import torch\nimport torch._lazy.ts_backend\n\ntorch._lazy.ts_backend.init()\n\n\n"
                      "def deeper(n, x):\n    if n == 0:\n        return x.sum().item()\n    return deeper(n - 1, x)\n\n\n"
                      "deeper(25, torch.ones(3).to('lazy') * 2)\n")
    trace = tmp_path / "deep.trace"
    subprocess.run([sys.executable, "-m", "lazyviz", "run", "--no-tui", "-o", str(trace), str(script)],
                   capture_output=True, check=True, timeout=600)
    app = build_app(trace)
    async with app.run_test(size=(100, 30)) as pilot:
        table = app.query_one(ExecutionList)
        await wait_for(pilot, lambda: len(table.rows) == 1)
        await pilot.press("home")
        stack = app.query_one("#stack-view", CodeView)
        await wait_for(pilot, lambda: "deeper" in stack.text)
        await pilot.press("4")  # the Stack tab
        await pilot.pause()
        marked = next(i for i, line in enumerate(stack.lines) if line.lstrip().startswith("9 >"))
        assert marked > stack.size.height  # it would be out of sight from the top
        top, height = stack.scroll_offset.y, stack.size.height
        # Centred, as far as the end of the text allows.
        assert top <= marked < top + height and top == min(marked - height // 2, stack.max_scroll_y)


async def test_at_80x24_the_table_has_the_rows_and_whole_file_names(sample_trace) -> None:
    from lazyviz.tui.widgets.findings_strip import FindingsStrip

    app = build_app(sample_trace("transformer_adamw"))
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(ExecutionList)
        await wait_for(pilot, lambda: app.state.latest is not None and len(table.rows) > 20)
        strip = app.query_one(FindingsStrip)
        assert strip.has_class("compact") and strip.size.height == 1  # 2 findings, one line
        assert table.size.height >= 9
        row = table.render_line(0).text
        # No folder; a name too long for the column keeps its start, extension and line.
        assert "samples/" not in row and re.search(r" transfo\w*…\w*adamw\.py:\d+ ", row), row
        assert table.virtual_size.width <= table.size.width  # no sideways scrolling, no scrollbar row
        strip.focus()
        await pilot.pause()
        assert strip.size.height == 2  # focused, it shows every finding


async def test_a_long_diff_sentence_wraps_at_80_columns(sample_trace) -> None:
    app = build_app(sample_trace("python_number_aliasing"))
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(ExecutionList)
        await wait_for(pilot, lambda: app.state.latest is not None and len(table.rows) == 6)
        await pilot.press("home", "down", "down", "down")  # the aliasing recompile
        diff = app.query_one("#diff-view", CodeView)
        await wait_for(pilot, lambda: "aliasing" in diff.text)
        await pilot.press("3")
        await pilot.pause()
        sentence = next(line for line in diff.text.splitlines() if "aliasing:" in line)
        assert len(sentence) > diff.size.width  # it would be cut
        shown = [line for line in diff.lines if line.startswith("#")]
        assert all(len(line) <= diff.size.width - 2 for line in shown)
        assert " ".join(" ".join(shown).replace("#", " ").split()).find(" ".join(sentence.lstrip("# ").split())) >= 0


async def test_sorting_by_heading_reversing_and_only_visible_columns(sample_trace) -> None:
    app = build_app(sample_trace("transformer_adamw"))
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(ExecutionList)
        await wait_for(pilot, lambda: app.state.latest is not None and len(table.rows) > 20)
        heading = app.query_one("#columns")
        layout = table.layout()
        assert "trace ms" not in [c.title for c in layout.columns]  # not at 80 columns
        offered = []
        for _ in range(6):  # o cycles through the columns on screen only
            await pilot.press("o")
            offered.append(SORTS[table.sort][0])
        assert "trace ms" not in offered and offered[:5] == ["sync ms", "nodes", "cause", "site", "cache"]
        # A click on a heading sorts by it, the heading highlighted, its arrow before it.
        x = sum(w + 1 for c, w in zip(layout.columns, layout.widths) if c.title in ("#", "step", "cause", "site"))
        await pilot.click("#columns", offset=(x + 1, 0))
        assert SORTS[table.sort][0] == "nodes" and table.descending
        nodes = [table.row(i).nodes for i in range(len(table.rows))]
        assert nodes == sorted(nodes, reverse=True)
        rendered = heading.render()
        assert "▼nodes" in str(rendered) and any(getattr(span.style, "reverse", False) for span in rendered.spans)
        widths = table.layout().widths
        await pilot.press("O")  # the other way round; no column moves
        assert not table.descending and table.layout().widths == widths
        nodes = [table.row(i).nodes for i in range(len(table.rows))]
        assert nodes == sorted(nodes) and "▲nodes" in str(heading.render())
        await pilot.click("#columns", offset=(x + 1, 0))  # the sorted heading again: reversed back
        assert table.descending
        await pilot.press("o", "o", "o", "o")  # on round to the order they ran in; O: newest first
        assert SORTS[table.sort][0] == "#"
        await pilot.press("O")
        assert [table.row(i).index for i in range(3)] == sorted((e.index for e in table.rows), reverse=True)[:3]
