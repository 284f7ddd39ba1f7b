"""Traces on network filesystems (NFS, Lustre, GPFS, CIFS, FUSE): SQLite's WAL needs
shared memory and locks those do not keep between hosts, so a trace there is written
with a rollback journal, and lazyviz says so once. The detection is checked with a faked
statfs; the mode for real, on a FUSE mount (bindfs) where this machine can make one."""
from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from conftest import SCRIPTS, cli, python

import lazyviz
from lazyviz.trace.files import JOURNAL_VARIABLE, NETWORK_FILESYSTEMS, journal_for, network_filesystem

NFS, LUSTRE, EXT4, TMPFS = 0x6969, 0x0BD00BD0, 0xEF53, 0x01021994


@pytest.mark.parametrize(("magic", "name"), [(NFS, "NFS"), (LUSTRE, "Lustre"), (0x47504653, "GPFS"),
                                             (0xFF534D42, "CIFS"), (0x65735546, "FUSE (sshfs, s3fs, ...)")])
def test_network_filesystems_are_named_from_statfs(magic: int, name: str) -> None:
    assert network_filesystem(Path("/scratch"), statfs=lambda folder: magic) == name


@pytest.mark.parametrize("magic", [EXT4, TMPFS, None])  # None: statfs failed, or not Linux
def test_local_disks_keep_wal(magic: int | None, monkeypatch) -> None:
    monkeypatch.delenv(JOURNAL_VARIABLE, raising=False)
    assert journal_for(Path("/data/run.trace"), statfs=lambda folder: magic) == ("wal", None)


def test_a_network_filesystem_gets_a_rollback_journal_and_says_why(monkeypatch) -> None:
    monkeypatch.delenv(JOURNAL_VARIABLE, raising=False)
    asked: list[Path] = []
    mode, why = journal_for(Path("/home/me/run.trace"), statfs=lambda folder: asked.append(folder) or NFS)
    assert asked == [Path("/home/me")]  # the folder the trace goes in, which holds its journal too
    assert mode == "delete" and why is not None and "/home/me is on NFS" in why and "WAL" in why


def test_the_variable_forces_either_mode(monkeypatch) -> None:
    monkeypatch.setenv(JOURNAL_VARIABLE, "rollback")
    assert journal_for(Path("/data/run.trace"), statfs=lambda folder: EXT4)[0] == "delete"
    monkeypatch.setenv(JOURNAL_VARIABLE, "wal")
    assert journal_for(Path("/nfs/run.trace"), statfs=lambda folder: NFS) == ("wal", None)


def test_every_known_magic_is_a_distinct_filesystem() -> None:
    assert len(set(NETWORK_FILESYSTEMS.values())) == len(NETWORK_FILESYSTEMS)
    assert EXT4 not in NETWORK_FILESYSTEMS and TMPFS not in NETWORK_FILESYSTEMS


def probe(trace: Path, env: dict | None = None) -> tuple[object, str]:
    """`lazyviz run` of a script that reads its own trace's journal mode mid-run (the
    finished trace is always left with a rollback journal: one self-contained file)."""
    result = cli("run", "--no-tui", "-o", trace, SCRIPTS / "journal_probe.py", trace, env=env)
    assert result.status == 0, result.stderr
    return result, result.stdout


@pytest.mark.torch
def test_forced_rollback_mode_records_a_whole_trace(tmp_path: Path) -> None:
    trace = tmp_path / "r.trace"
    result, output = probe(trace, {**os.environ, JOURNAL_VARIABLE: "rollback"})
    assert "journal: delete" in output and "-wal" not in output
    assert [p.name for p in tmp_path.iterdir()] == ["r.trace"]  # no -journal, -wal or -shm left
    assert result.stderr.count(f"{JOURNAL_VARIABLE}=rollback") == 1  # said once
    with lazyviz.open(trace) as opened:
        assert opened.count() == 3 and opened.run.finished
        assert any(JOURNAL_VARIABLE in note for note in opened.run.notes)
    assert f"note: {JOURNAL_VARIABLE}=rollback" in cli("report", trace).stdout


@pytest.mark.torch
def test_a_local_disk_keeps_wal(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(JOURNAL_VARIABLE, raising=False)
    result, output = probe(tmp_path / "w.trace")
    assert "journal: wal" in output and "w.trace-wal" in output and "network" not in result.stderr


@pytest.fixture
def fuse_folder(tmp_path: Path):
    """A real FUSE mount of a folder (bindfs), as sshfs or s3fs would be."""
    if shutil.which("bindfs") is None or not os.path.exists("/dev/fuse"):
        pytest.skip("needs bindfs and /dev/fuse (apt-get install bindfs)")
    source, mount = tmp_path / "source", tmp_path / "mount"
    source.mkdir()
    mount.mkdir()
    if subprocess.run(["bindfs", str(source), str(mount)], capture_output=True).returncode != 0:
        pytest.skip("bindfs could not mount here (no FUSE permission)")
    try:
        yield mount
    finally:
        subprocess.run(["fusermount", "-u", str(mount)], capture_output=True)
        subprocess.run(["umount", str(mount)], capture_output=True)


@pytest.mark.torch
def test_a_trace_on_a_real_fuse_mount_uses_the_safe_mode(fuse_folder: Path, monkeypatch) -> None:
    monkeypatch.delenv(JOURNAL_VARIABLE, raising=False)
    trace = fuse_folder / "f.trace"
    result, output = probe(trace)
    assert "journal: delete" in output and "-wal" not in output
    assert result.stderr.count("a network filesystem") == 1 and "FUSE" in result.stderr
    assert sorted(p.name for p in fuse_folder.iterdir()) == ["f.trace"]
    with lazyviz.open(trace) as opened:
        assert opened.count() == 3 and opened.run.finished
    report = cli("report", trace)
    assert report.status == 0 and "is on FUSE" in report.stdout


@pytest.mark.torch
def test_from_python_the_mode_is_said_once_and_kept(tmp_path: Path) -> None:
    script = tmp_path / "api.py"
    script.write_text(textwrap.dedent("""
        import torch, torch._lazy, torch._lazy.ts_backend, lazyviz
        torch._lazy.ts_backend.init()
        with lazyviz.trace("api.trace") as recorder:
            x = torch.ones(2, device="lazy") * 2
            torch._lazy.mark_step()
        print(len(recorder.run.executions), recorder.run.info.notes)
    """))
    result = python(script, cwd=tmp_path, env={**os.environ, JOURNAL_VARIABLE: "rollback"})
    assert result.status == 0, result.stderr
    assert result.stderr.count("rollback journal") == 1 and result.stdout.startswith("1 [")
    assert f"{JOURNAL_VARIABLE}=rollback" in result.stdout
