"""lazyviz from Python (`lazyviz.trace`) on the real TorchScript backend. Each case is a
real script run in its own interpreter, as a user's program would be: the hook is
installed into that process, not into pytest's."""
from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lazyviz.trace import open as open_trace

pytestmark = pytest.mark.torch

PRELUDE = """
import sys, torch, torch._lazy, torch._lazy.ts_backend
import lazyviz

torch._lazy.ts_backend.init()  # the user's own init, before lazyviz starts: it must still work

def step(batch):
    x = torch.ones(batch, 8, device="lazy")
    loss = torch.nn.functional.mse_loss(x * 2, x)  # falls back on this backend
    torch._lazy.mark_step()
    return loss
"""


def run_python(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    script = tmp_path / "user.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)


def line_of(tmp_path: Path, text: str) -> int:
    lines = (tmp_path / "user.py").read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if text in line)


def test_with_block_records_the_same_report_the_cli_prints(tmp_path: Path) -> None:
    done = run_python(tmp_path, """
        with lazyviz.trace("run.trace") as run:
            for batch in (16, 16, 16, 16, 24):
                step(batch)
        import json
        json.dump(run.report(), open("report.json", "w"))
        print([(f.kind, f.frame.line) for f in run.findings])
    """)
    assert done.returncode == 0, done.stderr
    cli = subprocess.run([sys.executable, "-m", "lazyviz", "report", "--format", "json", "run.trace"],
                         cwd=tmp_path, capture_output=True, text=True, check=True)
    assert json.loads((tmp_path / "report.json").read_text()) == json.loads(cli.stdout)
    report = json.loads(cli.stdout)
    assert report["run"]["source"] == "api" and report["run"]["argv"] == []
    assert report["summary"]["executions"] == 10 and report["steps"] == 5
    fallback = next(f for f in report["findings"] if f["kind"] == "fallback")
    assert fallback["site"]["line"] == line_of(tmp_path, "mse_loss(x * 2")
    assert "recompile" in {f["kind"] for f in report["findings"]}  # the batch of 24 after warm-up
    with open_trace(tmp_path / "run.trace") as trace:
        assert trace.run.complete and trace.run.state == "ended"


def test_several_traces_in_one_process_and_sync_sites_put_back(tmp_path: Path) -> None:
    done = run_python(tmp_path, """
        original = torch._lazy.mark_step
        with lazyviz.trace("first.trace"):
            assert "to" in vars(torch.Tensor)  # wrapped to note the line that moves data to the device
            step(4)
        assert torch._lazy.mark_step is original, "mark_step still wrapped after the trace"
        assert "to" not in vars(torch.Tensor) and torch.Tensor.to is torch._C.TensorBase.to
        step(4)  # untraced between traces
        with lazyviz.trace("second.trace", capture="light"):
            step(4)   # compiled during the first trace: a cache hit here
            step(6)
        session = lazyviz.trace("third.trace").start()  # as a framework callback would
        step(6)
        session.stop()
        print("ok")
    """)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    with open_trace(tmp_path / "first.trace") as first:
        assert first.count() == 2
    with open_trace(tmp_path / "second.trace") as second:
        executions = second.executions()
        assert len(executions) == 4 and second.run.capture == "light"
        assert executions[0].cache == "hit" and executions[2].cache == "miss"
        # The graph compiled by the first trace is still in the second, under its real id.
        assert not executions[0].graph.startswith("unknown") and executions[0].nodes > 0
        assert {g.id for g in second.graphs()} >= {executions[0].graph}
    with open_trace(tmp_path / "third.trace") as third:
        assert third.count() == 2 and third.run.steps == 1


def test_wrapped_sync_sites_look_and_behave_like_the_originals(tmp_path: Path) -> None:
    done = run_python(tmp_path, """
        import inspect
        def looks(f):
            return (f.__name__, f.__qualname__, f.__doc__, str(inspect.signature(f)) if f is torch._lazy.mark_step else "")
        original = torch._lazy.mark_step
        before = [looks(torch._lazy.mark_step), looks(torch.Tensor.item), looks(torch.Tensor.__repr__)]
        with lazyviz.trace("run.trace"):
            assert torch._lazy.mark_step is not original and torch._lazy.mark_step.__wrapped__ is original
            assert [looks(torch._lazy.mark_step), looks(torch.Tensor.item), looks(torch.Tensor.__repr__)] == before
            t = torch.ones(3, device="lazy") * 2
            torch._lazy.mark_step(wait=True)                          # keywords pass through
            values = [t.sum().item(), torch.Tensor.item(t[0] + 1), getattr(t[1] * 3, "item")()]
            try:
                (t + 1).item()                                        # torch's own error, unchanged
            except RuntimeError as error:
                print("error:", error)
            u = (t * 5).sum()  # noqa: F841 - live: the next mark_step runs it
            torch._lazy.mark_step()                                   # named as itself after the error
            kept = torch._lazy.mark_step  # a wrapper someone keeps past the trace
        kept()                            # passes the call on, recording nothing
        print(values, bool(t.sum() > 0))
    """)
    assert done.returncode == 0, done.stderr
    assert "[6.0, 3.0, 6.0] True" in done.stdout
    assert "error: a Tensor with 3 elements cannot be converted to Scalar" in done.stdout
    with open_trace(tmp_path / "run.trace") as trace:
        causes = [(e.cause, e.frame and e.frame.line) for e in trace.executions()]
        assert trace.run.steps == 2
    line = line_of(tmp_path, "values = [")
    assert causes[0][0] == "mark_step" and causes[1:4] == [("item", line)] * 3
    assert causes[4:] == [("mark_step", line_of(tmp_path, "named as itself"))]  # kept() recorded nothing


def test_an_exception_in_the_block_goes_on_unchanged_and_the_trace_keeps_it(tmp_path: Path) -> None:
    done = run_python(tmp_path, """
        boom = ValueError("boom")
        try:
            with lazyviz.trace("run.trace"):
                step(4)
                raise boom
        except ValueError as caught:
            print("same object:", caught is boom)
    """)
    assert done.returncode == 0 and "same object: True" in done.stdout, done.stderr
    with open_trace(tmp_path / "run.trace") as trace:
        run = trace.run
        assert run.error == "ValueError: boom" and "raise boom" in run.traceback
        assert run.state == "raised ValueError: boom" and trace.count() == 2


def test_decorator_records_one_trace_per_call(tmp_path: Path) -> None:
    done = run_python(tmp_path, """
        @lazyviz.trace("train.trace")
        def train(batch):
            return step(batch).item()

        print(train(4), train(8))
    """)
    assert done.returncode == 0, done.stderr
    for name, batch in (("train.trace", 4), ("train-2.trace", 8)):
        with open_trace(tmp_path / name) as trace:
            graphs = trace.graphs()
            assert graphs and f"[{batch},8]" in graphs[0].ir_text


def test_bad_use_is_one_clear_lazyviz_error_and_harms_nothing(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    done = run_python(tmp_path, """
        def error(make):
            try:
                make()
            except lazyviz.LazyvizError as caught:
                return str(caught)
            return "no error"

        print("not a trace:", error(lambda: lazyviz.trace("notes.txt", force=True).start()))
        print("capture:", error(lambda: lazyviz.trace("x.trace", capture="everything")))
        print("backend:", error(lambda: lazyviz.trace("y.trace", backend="tpu").start()))
        print("nested:", error(lambda: [lazyviz.trace("outer.trace").start(), lazyviz.trace("inner.trace").start()]))
        step(4)  # the outer trace goes on, and is never stopped
    """)
    assert done.returncode == 0, done.stderr
    said = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert "already recording" in said["nested"] and "outer.trace" in said["nested"]
    assert "lazyviz replaces only its own traces" in said["not a trace"]
    assert "capture must be one of full, light" in said["capture"]
    assert "unknown backend 'tpu'" in said["backend"]
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert not (tmp_path / "inner.trace").exists() and not (tmp_path / "y.trace").exists()
    with open_trace(tmp_path / "outer.trace") as outer:  # never stopped: closed at the interpreter's exit
        assert outer.count() == 2 and outer.run.complete and outer.run.state == "ended"


def test_an_existing_trace_is_replaced_only_with_force(tmp_path: Path) -> None:
    done = run_python(tmp_path, """
        with lazyviz.trace("run.trace"):
            step(4)
        try:
            lazyviz.trace("run.trace").start()
        except lazyviz.LazyvizError as caught:
            print(caught)
        with lazyviz.trace("run.trace", force=True):
            step(6)
    """)
    assert done.returncode == 0, done.stderr
    assert "run.trace exists (a lazyviz trace); use force=True" in done.stdout
    with open_trace(tmp_path / "run.trace") as trace:
        assert "[6,8]" in trace.graphs()[0].ir_text


async def test_the_terminal_ui_reads_a_trace_written_from_python(tmp_path: Path) -> None:
    from lazyviz.tui.app import build_app
    from lazyviz.tui.widgets.executions import ExecutionList
    from lazyviz.tui.widgets.header import RunHeader
    from tests.test_tui import wait_for

    done = run_python(tmp_path, """
        with lazyviz.trace("run.trace"):
            step(4)
            step(4)
    """)
    assert done.returncode == 0, done.stderr
    app = build_app(tmp_path / "run.trace")
    async with app.run_test(size=(120, 30)) as pilot:
        table = app.query_one(ExecutionList)
        await wait_for(pilot, lambda: len(table.rows) == 4 and app.state.latest is not None)
        header = str(app.query_one(RunHeader).render())
        assert "lazyviz.trace() in Python" in header and "ended" in header


def test_a_repeated_row_keeps_the_cause_of_the_call_that_ran_it(tmp_path: Path) -> None:
    """One instruction that calls a different sync each time (`getattr(t, name)()`): the
    stack is the same, so only the cause running tells the rows apart."""
    result = run_python(tmp_path, """
        x = torch.ones(4, device="lazy")
        torch._lazy.mark_step()
        with lazyviz.trace("t.trace", capture="light"):
            for i in range(30):
                y = x * 2  # the same graph each time: a cache hit after the first
                getattr(y, ("tolist", "cpu", "tolist")[i % 3])()  # the sync line
    """)
    assert result.returncode == 0, result.stderr
    with open_trace(tmp_path / "t.trace") as trace:
        rows = trace.executions()
    assert [e.cause for e in rows] == [("tolist", "cpu", "tolist")[i % 3] for i in range(30)]
    assert sum(e.is_miss for e in rows) == 1
    assert {e.frame.line for e in rows} == {line_of(tmp_path, "# the sync line")}


def test_repeated_fallbacks_keep_their_op_and_the_execution_that_follows_it(tmp_path: Path) -> None:
    """A fallback op with two pending inputs runs two executions; only the first sees
    its counter move. Repeated step after step, both stay the fallback's."""
    result = run_python(tmp_path, """
        x = torch.ones(8, device="lazy")
        torch._lazy.mark_step()
        with lazyviz.trace("t.trace", capture="light"):
            for i in range(12):
                y = torch.lerp(x * 2, x + 1, 0.5)  # the lerp line
                z = (y * 3).sum()  # pending: runs at the mark_step
                torch._lazy.mark_step()  # the mark_step line
    """)
    assert result.returncode == 0, result.stderr
    lerp, mark = line_of(tmp_path, "# the lerp line"), line_of(tmp_path, "# the mark_step line")
    with open_trace(tmp_path / "t.trace") as trace:
        rows = trace.executions()
    one_step = [("fallback", "aten::lerp.Scalar", lerp)] * 2 + [("mark_step", "mark_step()", mark)]
    assert [(e.cause, e.detail, e.frame.line) for e in rows] == one_step * 12
    assert [e.step for e in rows] == [step for step in range(12) for _ in one_step]
    assert {e.step for e in rows if e.is_miss} == {0}


def test_repeated_hits_keep_each_rows_own_line_cause_step_and_graph(tmp_path: Path) -> None:
    """Cache hits from a stack seen before repeat its row (the fast path): each must still
    carry its own sync line, cause, step and graph, as the first one from there did."""
    result = run_python(tmp_path, """
        x = torch.zeros(4, device="lazy")
        with lazyviz.trace("t.trace", capture="full"):
            for i in range(60):
                x = x + 1
                if i % 3 == 0:
                    x.sum().item()  # the item line
                y = x * 2 if i % 2 else x - 1
                torch._lazy.mark_step()  # the mark_step line
                if i % 20 == 19:
                    (y * 3).cpu()  # the cpu line
    """)
    assert result.returncode == 0, result.stderr
    item, mark, cpu = (line_of(tmp_path, f"# the {name} line") for name in ("item", "mark_step", "cpu"))
    with open_trace(tmp_path / "t.trace") as trace:
        rows = trace.executions()
    assert [e.index for e in rows] == list(range(len(rows)))
    expected = []  # (cause, line, step), as the loop runs
    for i in range(60):
        if i % 3 == 0:
            expected.append(("item", item, i))
        expected.append(("mark_step", mark, i))
        if i % 20 == 19:
            expected.append(("cpu", cpu, i + 1))  # after the step ended
    assert [(e.cause, e.frame.line, e.step) for e in rows] == expected
    marks = [e for e in rows if e.cause == "mark_step"]
    assert len({e.graph for e in marks[2:]}) == 2  # the two branches' graphs, alternating as the loop did
    assert all(a.graph != b.graph for a, b in itertools.pairwise(marks[2:]))
    assert all(e.stack_id is not None and e.detail for e in rows)
    assert sum(e.is_miss for e in rows) < 10 and all(e.sync_ms >= 0 for e in rows)


def test_the_hooks_ir_text_is_torchs_line_for_line(tmp_path: Path) -> None:
    """The hook prints each new graph's IR itself (torch's printer costs ~15 us a node):
    on real graphs, with and without source lines, it is torch's text exactly."""
    result = run_python(tmp_path, f"""
        sys.path.insert(0, {str(Path(__file__).resolve().parent.parent / "samples")!r})
        from lazyviz.backends.ts import load_hook
        from transformer_adamw import build

        hook = load_hook()

        def graphs():
            x = torch.randn(4, 8).to("lazy")
            yield [x * 2 + 1]
            yield list(torch.max(x, dim=1))  # a node with two outputs: %3.0, %3.1
            yield [x[1:3, ::2].sum(dim=0, keepdim=True), torch.topk(x, 2)[1].float()]
            yield [torch.cat([x, x.t().reshape(4, 8)], 1).view(-1)[:5].clamp(min=0.1, max=0.9)]
            model, _, inputs, targets = build()
            loss = ((model(inputs) - targets) ** 2).mean()  # attention, layer norm, constants
            loss.backward()
            yield [loss, *(p.grad for p in model.parameters())]

        def compare(label):
            for number, roots in enumerate(graphs()):
                ours, torchs = hook.ir_texts(roots)
                assert ours == torchs, (label, number, ours, torchs)
            return ours.count("\\n")

        plain = compare("plain")
        with lazyviz.trace("t.trace", capture="full"):  # nodes made here carry their line
            lines = compare("with source lines")
            assert "location=" in hook.ir_texts(next(graphs()))[0]
        print("same", plain, lines)
    """)
    assert result.returncode == 0, result.stderr
    plain, with_lines = map(int, result.stdout.split()[1:])
    assert plain > 300 and with_lines == plain  # the last graph: a transformer step's backward


def test_a_node_keeps_a_reference_to_its_line_decoded_where_a_graph_is_read(tmp_path: Path) -> None:
    """Full capture gives each IR node a reference to the user's line (a number no file's
    line reaches), not the line's strings: torch's own text of a graph shows the
    reference, and the hook puts the line back in both forms it is printed in (IR text,
    XLA's HLO metadata, where the empty file is left out)."""
    result = run_python(tmp_path, """
        import json, re
        from lazyviz.backends.ts import load_hook

        hook = load_hook()
        with lazyviz.trace("t.trace", capture="full"):
            x = torch.ones(2, 3, device="lazy")
            y = (x * 2).relu()  # the line every node of y names
            raw = torch._C._lazy._get_tensors_text([y])
            refs = sorted(set(re.findall(r"location=@:(\\d+)", raw)))
            hlo = "".join(f'metadata={{op_type="aten__mul" source_line={ref} stack_frame_id=1}}\\n' for ref in refs)
            print(json.dumps({"raw": raw, "ir": hook.decode_locations(raw), "hlo": hook.decode_locations(hlo),
                              "unknown": hook.decode_locations("location=@:1999999999, source_line=1999999998 x"),
                              "mark_step": torch._lazy.mark_step() is None}))
    """)
    assert result.returncode == 0, result.stderr
    texts = json.loads(result.stdout)
    line = line_of(tmp_path, "y = (x * 2).relu()")
    assert re.search(r"location=@:1\d{9}\b", texts["raw"]) and "user.py" not in texts["raw"]
    assert "location=@:" not in texts["ir"]
    assert set(re.findall(r"aten::(?:mul|relu)\(.*?location=([^,\n]+)", texts["ir"])) == {f"<module>@user.py:{line}"}
    lines = {int(number) for number in re.findall(r"location=<module>@user\.py:(\d+)", texts["ir"])}
    assert lines == {line_of(tmp_path, "x = torch.ones(2, 3"), line}, texts["ir"]  # every node: a line of the user's
    assert set(re.findall(r'source_file="([^"]+)" source_line=(\d+) stack_frame_id=1', texts["hlo"])) == {
        ("user.py", str(n)) for n in lines}
    assert texts["unknown"] == "location=@:1999999999, source_line=1999999998 x"  # not ours: left as it is


def test_sys_exit_in_a_with_block_is_the_exit_status_it_names(tmp_path: Path) -> None:
    done = run_python(tmp_path, """
        with lazyviz.trace("three.trace"):
            step(4)
            sys.exit(3)
    """)
    assert done.returncode == 3, done.stderr
    with open_trace(tmp_path / "three.trace") as trace:
        assert (trace.run.exit_status, trace.run.error, trace.run.finished) == (3, "SystemExit: 3", True)
    clean = run_python(tmp_path, """
        with lazyviz.trace("zero.trace"):
            step(4)
            sys.exit()
    """)
    assert clean.returncode == 0, clean.stderr
    with open_trace(tmp_path / "zero.trace") as trace:
        assert (trace.run.exit_status, trace.run.error) == (0, None)
