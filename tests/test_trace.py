"""The trace file on its own: written and read back without torch."""
from __future__ import annotations

import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest

import lazyviz
from lazyviz.trace.schema import ExecutionRecord, GraphRecord, StackRecord
from lazyviz.trace.synthetic import execution
from lazyviz.trace.writer import TraceWriter


def row(index: int, step: int = 0, cause: str = "mark_step", cache: str = "hit") -> ExecutionRecord:
    return execution(index, step=step, cause=cause, cache=cache, file="/x/train.py", line=10 + index, graph="g1",
                     fallback_ops={"aten::sin": 1} if cause == "fallback" else {})


def test_round_trip(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path / "t.trace")
    writer.set_run(argv=["train.py", "--x"], backend="ts", capture="full", versions={"torch": "2.13.0"})
    writer.add_execution(row(0, cache="miss"), graph=GraphRecord("g1", 5, "IR {}", "graph()", 0),
                         stack=StackRecord(1, [("/x/train.py", 10, "<module>")]))
    writer.add_execution(row(1, step=1, cause="fallback"))
    writer.set_run(exit_status=0, error=None, traceback=None, steps=2, elapsed_s=1.0)
    writer.close()
    with lazyviz.open(tmp_path / "t.trace") as trace:
        first, second = trace.executions()
        assert (first.cache, first.frame.line, second.fallback_ops) == ("miss", 10, {"aten::sin": 1})
        assert trace.graph("g1").backend_text == "graph()" and trace.graph("nope") is None
        assert trace.stack(1)[0].function == "<module>"
        run = trace.run
        assert run.argv == ["train.py", "--x"] and run.finished and run.steps == 2
        with pytest.raises(lazyviz.TraceError, match="no execution 7"):
            trace.execution(7)


def test_graph_texts_are_stored_compressed_and_read_back_whole(tmp_path: Path) -> None:
    ir = "".join(f"%{i} = lazy::add(%{i - 1}, %0), xla_shape=f32[16,16]{{1,0}}, location=step@train.py:{i}\n"
                 for i in range(1, 5000))
    writer = TraceWriter(tmp_path / "t.trace")
    writer.add_execution(row(0, cache="miss"), graph=GraphRecord("g1", 5000, ir, "graph(" + ir + ")", 0))
    writer.close()
    assert (tmp_path / "t.trace").stat().st_size < 2 * len(ir) / 5  # both texts, compressed
    with lazyviz.open(tmp_path / "t.trace") as trace:
        graph = trace.graph("g1")
        assert graph.ir_text == ir and graph.backend_text == "graph(" + ir + ")"
        assert trace.ir_texts() == {"g1": ir}
    for table, column in (("graphs", "ir_lines"), ("ir_lines", "text")):  # one damaged byte in what is stored
        damaged = tmp_path / f"{table}.trace"
        shutil.copy(tmp_path / "t.trace", damaged)
        with sqlite3.connect(damaged) as db:
            blob = bytearray(db.execute(f"SELECT {column} FROM {table}").fetchone()[0])
            blob[len(blob) // 2] ^= 0xFF
            db.execute(f"UPDATE {table} SET {column} = ?", (bytes(blob),))
        message = "graph 'g1''s IR is not readable" if table == "graphs" else "IR lines from 1 is not readable"
        with lazyviz.open(damaged) as trace, pytest.raises(lazyviz.TraceError, match=f"damaged: {message}"):
            trace.graph("g1")


def test_a_graph_stores_only_the_lines_no_graph_had_at_its_place(tmp_path: Path) -> None:
    """A recompile's graph repeats most lines of the graph before it: those are stored
    once, and every graph reads back as it was given, line for line."""
    def graph_ir(rows: int) -> str:
        return "IR {\n" + "".join(f"  %{i} = [Float[{rows if i % 50 == 0 else 16},64]] aten::add(%{i - 1}, %0), "
                                  f"NodeType=N, location=step@train.py:{i}\n" for i in range(1, 400)) + "}\n"

    texts = {f"g{rows}": graph_ir(rows) for rows in (8, 12, 16, 24)}
    writer = TraceWriter(tmp_path / "t.trace")
    for index, (graph, text) in enumerate(texts.items()):
        writer.add_execution(row(index, cache="miss")._replace(graph=graph), graph=GraphRecord(graph, 400, text, "", index))
    writer.close()
    with sqlite3.connect(tmp_path / "t.trace") as db:
        stored = db.execute("SELECT sum(count) FROM ir_lines").fetchone()[0]
        whole = db.execute("SELECT count(*) FROM graphs WHERE ir_lines IS NULL").fetchone()[0]
    # The first graph's 402 lines, then the 7 lines each later graph changed.
    assert (stored, whole) == (402 + 3 * 7, 0)
    with lazyviz.open(tmp_path / "t.trace") as trace:
        read = trace.ir_texts()
        assert dict(read) == texts and {g: trace.graph(g).ir_text for g in texts} == texts
        assert len(set(read.line_ids("g8")) & set(read.line_ids("g24"))) == 402 - 7
        distinct = {(line, number) for text in texts.values() for number, line in enumerate(text.split("\n"))}
        assert read.size() == sum(len(line) + 1 for line, _ in distinct)  # each stored line once


def test_a_window_rolled_back_numbers_its_lines_again(tmp_path: Path) -> None:
    """A window whose transaction fails (a full disk) is written again record by record:
    the lines it had numbered are numbered again from where the trace stands, so every
    stored graph reads back and no id is left without its line."""
    class FailingOnce:
        def __init__(self, db: sqlite3.Connection) -> None:
            self.db, self.failed = db, False

        def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
            if sql.startswith("INSERT OR IGNORE INTO graphs") and args[0][0] == "g2" and not self.failed:
                self.failed = True
                raise sqlite3.OperationalError("database or disk is full")
            return self.db.execute(sql, *args)

        def __getattr__(self, name: str) -> object:
            return getattr(self.db, name)

    texts = {g: "IR {\n" + "".join(f"  %{i} = [Float[{rows}]] aten::relu(%{max(i - 1, 0)})\n" for i in range(40)) + "}\n"
             for g, rows in (("g1", 4), ("g2", 8))}
    writer = TraceWriter(tmp_path / "t.trace")
    writer._db = FailingOnce(writer._db)  # type: ignore[assignment]
    for index, (graph, text) in enumerate(texts.items()):  # one window
        writer.add_execution(row(index, cache="miss")._replace(graph=graph), graph=GraphRecord(graph, 40, text, "", index))
    writer.close()
    assert writer._db.failed
    with lazyviz.open(tmp_path / "t.trace") as trace:
        read = trace.ir_texts()
        assert dict(read) == texts and not read.lines._lacking


def test_lines_let_go_are_unpacked_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past KEPT_UNPACKED lines a row stays compressed until asked again: the texts and
    the parsed graphs read the same as with every line kept."""
    from lazyviz.analysis.graphs import IRGraphs
    from lazyviz.trace import lines

    texts = {f"g{rows}": f"IR {{\n  %0 = [Float[{rows}]] lazy_tensors::device_data()\n" + "".join(
        f"  %{i} = [Float[{rows},{i}]] aten::relu(%{i - 1}), NodeType=N\n" for i in range(1, 60)) + "}\n"
        for rows in range(20)}
    writer = TraceWriter(tmp_path / "t.trace")
    for index, (graph, text) in enumerate(texts.items()):
        writer.add_execution(row(index, cache="miss")._replace(graph=graph), graph=GraphRecord(graph, 60, text, "", index))
    writer.close()
    with lazyviz.open(tmp_path / "t.trace") as trace:
        whole = IRGraphs(trace.ir_texts())
        kept = {g: [n.op for n in whole.parsed(g).nodes] for g in texts}
    monkeypatch.setattr(lines, "KEPT_UNPACKED", 100)  # about two graphs' lines
    with lazyviz.open(tmp_path / "t.trace") as trace:
        read = trace.ir_texts()
        assert dict(read) == texts and {g: read[g] for g in reversed(list(read))} == texts  # again, in any order
        assert read.lines._unpacked_lines <= 100 + 62
        graphs = IRGraphs(read)
        assert {g: [n.op for n in graphs.parsed(g).nodes] for g in reversed(list(texts))} == kept


def test_unfinished_trace_reads_what_was_written(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path / "t.trace")
    writer.set_run(argv=["a.py"])
    writer.add_execution(row(0))
    writer.flush()
    with lazyviz.open(tmp_path / "t.trace") as trace:  # while the writer is still open
        assert trace.count() == 1 and not trace.run.finished
    writer.close()


def test_follow_yields_rows_as_they_commit(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path / "t.trace")
    writer.set_run(argv=["a.py"])
    writer.flush()

    def produce() -> None:
        for index in range(4):
            writer.add_execution(row(index))
            time.sleep(0.1)
        writer.set_run(exit_status=0)
        writer.close()

    threading.Thread(target=produce).start()
    with lazyviz.open(tmp_path / "t.trace") as trace:
        batches = list(trace.follow(poll_s=0.02))
    assert [e.index for batch in batches for e in batch] == [0, 1, 2, 3] and len(batches) >= 2


def _varied_trace(path: Path, count: int = 40) -> None:
    """Misses, hits, fallbacks and syncs from a few sites, as a run writes them."""
    writer = TraceWriter(path)
    writer.set_run(argv=["a.py"])
    for index in range(count):
        cause = ("mark_step", "item", "fallback")[index % 3]
        writer.add_execution(execution(index, step=index // 3, cause=cause, line=10 + index % 3,
                                       graph=f"g{index % 4}", cache="miss" if index < 4 else "hit",
                                       sync_ms=float(index % 7), fallback_ops={"aten::sin": 1} if cause == "fallback" else {}))
    writer.close()


def test_reading_a_growing_trace_in_batches_gives_the_whole_trace(tmp_path: Path) -> None:
    """How the UI follows a run: batches of columns, kinds read as rows first name them."""
    from lazyviz.trace.table import ExecutionTable

    path = tmp_path / "t.trace"
    _varied_trace(path)
    with lazyviz.open(path) as trace:
        whole = trace.executions()
        table = ExecutionTable.empty()
        _ = table.positions  # kept up to date from here on, as the UI's watcher keeps it
        batches = []
        while added := trace.read_more(table, 7):
            batches.append(added)
        head = table.head(20)
    assert batches == [7, 7, 7, 7, 7, 5] and list(table) == whole
    fresh = ExecutionTable.of(whole)
    assert table.positions == fresh.positions and table.in_order == fresh.in_order
    # A head is the first rows, with where each kind occurs among them only.
    assert list(head) == whole[:20] and head.positions == ExecutionTable.of(whole[:20]).positions

    with sqlite3.connect(path) as db:  # kind ids as another writer might number them
        db.execute("UPDATE kinds SET id = 100 - id")
        db.execute("UPDATE executions SET kind = 100 - kind")
    with lazyviz.open(path) as trace:
        table = ExecutionTable.empty()
        while trace.read_more(table, 7):
            pass
    assert list(table) == whole


def test_a_row_that_names_no_kind_is_damage_said_in_one_line(tmp_path: Path) -> None:
    from lazyviz.trace.table import ExecutionTable

    path = tmp_path / "t.trace"
    _varied_trace(path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE executions SET kind = 999 WHERE idx = 30")
    with lazyviz.open(path) as trace:
        table = ExecutionTable.empty()
        assert trace.read_more(table, 30) == 30  # what comes before the damage still reads
        with pytest.raises(lazyviz.TraceError, match=r"t.trace: damaged: execution 30: \w+ is None$"):
            trace.read_more(table, 30)
    assert len(table) == 30


def test_a_row_given_counters_read_later_keeps_its_kind_and_adds_them(tmp_path: Path) -> None:
    # XLA's copies, read on the writer's thread once a second, go with the last row taken.
    from lazyviz.trace.schema import split_row
    from lazyviz.trace.writer import stored

    writer = TraceWriter(tmp_path / "t.trace")
    record = row(0)._replace(counters={"CachedCompile": 1})
    kind, rest = split_row(stored(record))
    plain = writer.kind_id(kind)
    carrying = writer.kind_with_counters(plain, {"TransferFromDevice": 2, "CachedCompile": 1})
    assert carrying != plain and writer.kind_with_counters(plain, {"TransferFromDevice": 2, "CachedCompile": 1}) == carrying
    writer.add_rows([(0, rest[1], plain, *rest[2:]), (1, rest[1], carrying, *rest[2:])])
    writer.close()
    with lazyviz.open(tmp_path / "t.trace") as trace:
        first, second = trace.executions()
    assert first.counters == {"CachedCompile": 1}
    assert second.counters == {"CachedCompile": 2, "TransferFromDevice": 2}
    assert (second.graph, second.cause, second.frame) == (first.graph, first.cause, first.frame)


def test_not_a_trace(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    for path in (other, tmp_path / "missing.trace"):
        with pytest.raises(lazyviz.TraceError):
            lazyviz.open(path)


CLOSING_UNDER_READERS = """
import os, sys, threading, time
from pathlib import Path
import lazyviz
from lazyviz.trace.reader import close_all
from lazyviz.trace.files import finish_trace

path = Path(sys.argv[1])
held = lazyviz.open(path)  # the UI watcher's: open for the whole run
stop = False

def keep_reading(fresh):
    try:
        while not stop:
            if fresh:  # the details pane's: one trace per selection
                with lazyviz.open(path) as trace:
                    trace.ir_texts()
            else:
                held.count(); held.ir_texts(); held.run; held.table()
    except lazyviz.TraceError:
        pass  # closed under it: the process is exiting

threads = [threading.Thread(target=keep_reading, args=(fresh,), daemon=True) for fresh in (False, True)]
for thread in threads:
    thread.start()
time.sleep(0.05)
close_all()  # what the SIGHUP handler does, from the main thread, before os._exit
print(finish_trace(path, {}), sorted(p.name for p in path.parent.iterdir()))
os._exit(0)
"""


def test_closing_every_trace_while_threads_read_leaves_one_file(tmp_path: Path) -> None:
    """A closed terminal ends the UI from its main thread while the watcher and the
    details pane read: closing their connections under them crashed the process
    (SIGSEGV), and a crashed UI left -wal and -shm beside the trace."""
    import subprocess
    import sys

    for attempt in range(12):  # the crash needed the close to land mid-read: a few tries
        folder = tmp_path / str(attempt)
        folder.mkdir()
        path = folder / "t.trace"
        _varied_trace(path, 400)
        with sqlite3.connect(path) as db:  # as a live run leaves it
            db.execute("PRAGMA journal_mode=WAL")
        done = subprocess.run([sys.executable, "-c", CLOSING_UNDER_READERS, str(path)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == "None ['t.trace']"


def test_a_trace_opening_as_every_trace_closes_is_closed_too(tmp_path: Path, monkeypatch) -> None:
    """The details pane opens a trace as the UI closes. Its open had passed the exiting
    check when close_all ran, and connected after: once finish_trace had made the -wal,
    that connection held it, and CI failed on "database is locked" with the -wal and
    -shm left beside the trace. close_all now waits for an open under way."""
    from lazyviz.trace import reader
    from lazyviz.trace.files import finish_trace

    path = tmp_path / "t.trace"
    _varied_trace(path, 40)
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
    monkeypatch.setattr(reader, "_EXITING", False)  # close_all sets it for the process
    opening, go_on = threading.Event(), threading.Event()
    uri_of = reader.read_only_uri

    def slow_uri(*args: object) -> str:  # past the exiting check, not yet connected
        opening.set()
        go_on.wait(5)
        return uri_of(*args)

    monkeypatch.setattr(reader, "read_only_uri", slow_uri)
    opened: list[object] = []

    def open_trace() -> None:
        try:
            opened.append(lazyviz.open(path))
        except lazyviz.TraceError as error:
            opened.append(str(error))

    opener = threading.Thread(target=open_trace)
    opener.start()
    assert opening.wait(5)
    closer = threading.Thread(target=reader.close_all)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive()  # waiting for the open; before, it had returned
    go_on.set()
    closer.join(10)
    opener.join(10)
    # Refused, or opened before close_all marked the process exiting and closed by it.
    assert opened == [f"{path}: not read: this process is exiting"] or opened[0]._closed
    assert finish_trace(path, {}) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.trace"]


def test_a_thread_reading_in_a_loop_lets_every_trace_close(tmp_path: Path, monkeypatch) -> None:
    """A thread that reads again the moment its read ends takes the connection's lock
    before close_all can (a lock is not fair): no read starts once close_all runs."""
    from lazyviz.trace import reader

    path = tmp_path / "t.trace"
    _varied_trace(path, 40)
    monkeypatch.setattr(reader, "_EXITING", False)
    monkeypatch.setattr(reader, "CLOSE_ALL_WAIT_S", 0.2)
    trace = lazyviz.open(path)
    release = threading.Event()

    def hold() -> None:  # a read longer than close_all waits
        with trace._using:
            release.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    reader.close_all()  # gives this trace up: its read did not end in time
    release.set()
    holder.join(5)
    with pytest.raises(lazyviz.TraceError, match="this process is exiting"):
        trace.count()
    trace.close()
