"""Damaged traces, seeded and bounded so CI stays fast: every reader command answers
with what it can read or one line saying what is wrong. tests/trace_fuzz.py runs the
large campaign."""
from __future__ import annotations

import random
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trace_fuzz import VALUES, commands, flip_bytes, mutate_sql, path_cases, run_reader

FUZZ = settings(max_examples=40, derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _check_all_readers(trace: Path, folder: Path, what: str) -> None:
    for argv in commands(trace, folder):
        outcome, _status, err = run_reader(argv)
        assert outcome in ("ok", "refused"), f"{what}: lazyviz {' '.join(argv)}: {outcome}\n{err}"


@FUZZ
@given(seed=st.integers(0, 2**32 - 1), flips=st.sampled_from([1, 2, 8, 64]))
def test_flipped_bytes(sample_trace, tmp_path_factory, seed: int, flips: int) -> None:
    folder = tmp_path_factory.mktemp("bytes")
    trace = folder / "t.trace"
    flip_bytes(sample_trace("item_in_loop"), trace, random.Random(seed), flips)
    _check_all_readers(trace, folder, f"{flips} flipped bytes, seed {seed}")


@FUZZ
@given(seed=st.integers(0, 2**32 - 1))
def test_sql_mutations(sample_trace, tmp_path_factory, seed: int) -> None:
    folder = tmp_path_factory.mktemp("sql")
    trace = folder / "t.trace"
    what = mutate_sql(sample_trace("batch_size_change"), trace, random.Random(seed))
    _check_all_readers(trace, folder, what)


def test_an_intact_trace_reads(sample_trace, tmp_path: Path) -> None:
    """The fuzzer's baseline: the same commands on the unmutated trace all succeed."""
    trace = tmp_path / "t.trace"
    shutil.copy(sample_trace("item_in_loop"), trace)
    for argv in commands(trace, tmp_path):
        outcome, _status, err = run_reader(argv)
        assert outcome == "ok", (argv, outcome, err)


def test_odd_paths_and_huge_numbers(sample_trace, tmp_path: Path) -> None:
    trace = tmp_path / "t.trace"
    shutil.copy(sample_trace("item_in_loop"), trace)
    for argv in path_cases(trace, tmp_path):
        outcome, _status, err = run_reader(argv, seconds=30)
        assert outcome in ("ok", "refused"), f"lazyviz {' '.join(argv)}: {outcome}\n{err}"
    assert trace.read_bytes()[:16] == b"SQLite format 3\0" and (tmp_path / "link.trace").is_symlink()


def test_invalid_text_in_every_json_field(sample_trace, tmp_path: Path) -> None:
    """Each JSON column (run values, a kind's counts, a stack's frames) holding each
    lone-surrogate value: shown with the character replaced, or refused in one line."""
    import contextlib
    import sqlite3

    texts = [v for v in VALUES if isinstance(v, str) and "\\u" in v]
    fields = [("run", "value", "WHERE key = 'argv'"), ("run", "value", "WHERE key = 'capture'"),
              ("kinds", "fallback_ops", ""), ("kinds", "counters", ""), ("stacks", "frames", "")]
    for number, ((table, column, where), text) in enumerate((f, t) for f in fields for t in texts):
        trace = tmp_path / f"s{number}.trace"
        shutil.copy(sample_trace("item_in_loop"), trace)
        with contextlib.closing(sqlite3.connect(trace)) as db:
            db.execute(f"UPDATE {table} SET {column} = ? {where}", (text,))
            db.commit()
        for argv in commands(trace, tmp_path):
            outcome, _status, err = run_reader(argv)
            assert outcome in ("ok", "refused"), f"{table}.{column} = {text}: lazyviz {' '.join(argv)}: {outcome}\n{err}"
