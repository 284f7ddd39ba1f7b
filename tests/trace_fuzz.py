"""Damaged traces against every reader command: byte flips and SQL mutations of real
traces. A reader may say what is wrong (exit 2) or show what it can (exit 0, or 1 for
`check`); it may never raise, print a traceback, hang, or hit lazyviz's internal-error
line. tests/test_fuzz.py runs a bounded, seeded sample of it; run this file for a
large campaign:

    python tests/trace_fuzz.py TRACE [--cases 3000] [--seed 1]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import shutil
import signal
import sqlite3
import sys
import tempfile
from collections import Counter
from pathlib import Path

from lazyviz.cli import main as lazyviz_main

TABLES = {
    "executions": ["idx", "step", "kind", "sync_ms", "trace_ms", "compile_ms", "execute_ms", "start_ms"],
    "kinds": ["id", "cause", "detail", "file", "line", "function", "stack_id", "graph", "nodes", "cache",
              "fallback_ops", "counters", "call", "context"],
    "graphs": ["id", "nodes", "ir_text", "backend_text", "first_execution", "ir_lines"],
    "ir_lines": ["first", "count", "text"],
    "stacks": ["id", "frames"],
    "run": ["key", "value"],
    "meta": ["key", "value"],
}
VALUES = [None, "x", -5, 2**62, 1.5, float("nan"), "{", "[[[[[[[[[[[[[[[[[[[[", '{"a": "b"}', "[1, 2]",
          "x" * 100_000, "\x1b[31m", b"\xff\xfe", '"unterminated', "null", "true", "{}", "[]",
          "%0 = [Float[2]] aten::add(%9, %1)", "IR {\n  %0 = garbage\n}",
          # JSON that escapes a lone surrogate: valid JSON, text no encoder writes out
          '"\\ud800"', '["\\ud800.py"]', '{"aten::\\udfff": 1}', '[["/x\\ud800.py", 1, "f\\udc00"]]',
          '"ok\\udbff"']
ACTIONS = ("set", "drop_table", "drop_column", "delete_rows", "view_table")


def commands(trace: Path, out: Path) -> list[list[str]]:
    return [
        ["report", str(trace)],
        ["report", str(trace), "--format", "json"],
        ["report", str(trace), "--format", "html", "-o", str(out / "r.html"), "--force"],
        ["check", str(trace)],
        ["check", str(trace), "--allow-unfinished", "--any-fallbacks"],
        ["export", str(trace), "--execution", "1", "--format", "dot"],
        ["export", str(trace), "--format", "chrome"],
        ["diff", str(trace), str(trace)],
    ]


class Hang(Exception):
    pass


def path_cases(trace: Path, folder: Path) -> list[list[str]]:
    """Every path argument given a FIFO, a folder, a dangling link and a link to the
    trace, and every number a huge one: each answered at once, never a hang."""
    fifo, dangling, link = folder / "fifo", folder / "dangling", folder / "link.trace"
    if not fifo.exists():
        os.mkfifo(fifo)
    for made, target in ((dangling, folder / "nowhere"), (link, trace)):
        if not made.is_symlink():
            made.symlink_to(target)
    cases = []
    for odd in (fifo, folder, dangling):
        cases += [["report", str(odd)], ["check", str(odd)], ["export", str(odd), "--execution", "0"],
                  ["diff", str(trace), str(odd)], ["check", str(trace), "--baseline", str(odd)],
                  ["report", str(trace), "-o", str(odd), "--force"]]
    cases += [["report", str(trace), "-f", "-o", str(link)], ["report", str(link)],
              ["export", str(trace), "--execution", str(2**63 - 1)], ["export", str(trace), "--execution", str(10**30)],
              ["export", str(trace), "--execution", "0", "--format", "dot", "--around", "%1", "--depth", str(2**31 - 1)],
              ["export", str(trace), "--execution", "0", "--format", "dot", "--max-nodes", str(2**31 - 1)],
              ["check", str(trace), "--warmup-steps", str(2**31 - 1)], ["check", str(trace), "--max-miss-rate", "1e308"]]
    return cases


def run_reader(argv: list[str], seconds: int = 60) -> tuple[str, int, str]:
    """(outcome, exit status, stderr): outcome is ok, refused, or a failure kind. Output
    goes through strict UTF-8 encoders, as a real stdout and stderr would take it."""
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    stderr = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")

    def too_slow(*_: object) -> None:
        raise Hang

    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(seconds)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            status = lazyviz_main(argv)
    except Hang:
        return "hang", -1, ""
    except SystemExit as exit:
        status = exit.code if isinstance(exit.code, int) else 2
    except BaseException as error:
        return f"raised {type(error).__name__}: {error}"[:200], -1, _text(stderr)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    try:
        _text(stdout)
        err = _text(stderr)
    except UnicodeEncodeError as error:  # text a real stdout could not take
        return f"unwritable output: {error}"[:200], -1, ""
    if "Traceback" in err or "internal error" in err:
        return "traceback", status, err
    if status not in (0, 1, 2):
        return f"exit {status}", status, err
    if status == 2 and err.count("\n") != 1:
        return "not one line", status, err
    return ("ok" if status in (0, 1) else "refused"), status, err


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    return stream.buffer.getvalue().decode("utf-8")  # type: ignore[attr-defined]


def flip_bytes(source: Path, target: Path, rng: random.Random, flips: int) -> None:
    data = bytearray(source.read_bytes())
    for _ in range(flips):
        data[rng.randrange(len(data))] = rng.randrange(256)
    target.write_bytes(bytes(data))


def mutate_sql(source: Path, target: Path, rng: random.Random) -> str:
    shutil.copy(source, target)
    table = rng.choice(sorted(TABLES))
    column = rng.choice(TABLES[table])
    action = rng.choice(ACTIONS)
    value = rng.choice(VALUES)
    with contextlib.closing(sqlite3.connect(target)) as db:
        try:
            if action == "set":
                where = rng.choice(["", " WHERE rowid = (SELECT MIN(rowid) FROM {t})", " WHERE rowid % 2 = 0"])
                db.execute(f"UPDATE {table} SET {column} = ?{where.format(t=table)}", (value,))
            elif action == "drop_table":
                db.execute(f"DROP TABLE {table}")
            elif action == "drop_column":
                db.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
            elif action == "delete_rows":
                db.execute(f"DELETE FROM {table} WHERE rowid % 3 = 0")
            else:
                db.execute(f"ALTER TABLE {table} RENAME TO old_{table}")
                db.execute(f"CREATE VIEW {table} AS SELECT * FROM old_{table}")
            db.commit()
        except sqlite3.Error:
            pass  # e.g. NOT NULL refused the value: the file stays as it was
    return f"{action} {table}.{column} = {str(value)[:20]!r}"


def campaign(source: Path, cases: int, seed: int) -> Counter[str]:
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        trace = work / "fuzzed.trace"
        for case in range(cases):
            trace.unlink(missing_ok=True)
            if case % 2:
                flip_bytes(source, trace, rng, rng.choice([1, 1, 2, 8, 64]))
                what = "bytes"
            else:
                what = mutate_sql(source, trace, rng)
            for argv in commands(trace, work):
                outcome, _, err = run_reader(argv)
                counts[outcome] += 1
                if outcome not in ("ok", "refused"):
                    print(f"case {case} ({what}): lazyviz {' '.join(argv[:1] + argv[2:])}: {outcome} {err[-300:]}",
                          file=sys.stderr)
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", type=Path, help="a real trace to mutate (e.g. from samples/item_in_loop.py)")
    parser.add_argument("--cases", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    options = parser.parse_args()
    counts = campaign(options.trace, options.cases, options.seed)
    total = sum(counts.values())
    bad = total - counts["ok"] - counts["refused"]
    print(f"{options.cases} damaged traces x {len(commands(Path('t'), Path('.')))} reader commands = {total} runs: "
          f"{counts['ok']} read (exit 0/1), {counts['refused']} refused in one line (exit 2), {bad} failures "
          + (str(dict(counts)) if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
