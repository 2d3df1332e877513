"""Atomic writes: what a writer killed mid-write leaves behind is removed by the next writer
to the same folder and by `mnrt clean`; a live writer's files are never touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from cli_harness import assert_one_line_error, invoke_cli

from mnrt.format import files
from mnrt.format.files import leftovers, parse_json, write_atomically, write_with_folder

# A writer that is killed while its temporary file is open and partly written.
_KILLED_WRITER = """
import os, sys, time
from mnrt.format import files
def stall(fd):
    print("writing", flush=True)
    time.sleep(60)
files.os.fsync = stall
files.write_atomically(sys.argv[1], b"x" * 100000)
"""


@pytest.fixture(autouse=True)
def _fresh_sweeps(monkeypatch):
    monkeypatch.setattr(files, "_swept", set())


def _killed_mid_write(dest) -> None:
    p = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(dest)], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout.readline() == "writing\n"
    p.send_signal(signal.SIGKILL)
    p.wait()


def test_the_next_writer_removes_what_a_killed_writer_left(tmp_path):
    _killed_mid_write(tmp_path / "out.mnlb")
    [left] = [p for p in tmp_path.iterdir() if p.name.startswith(".mnrt-")]
    assert left.stat().st_size > 0 and leftovers(tmp_path) == [left]
    write_atomically(tmp_path / "other.bin", b"data")  # before: the leftover stayed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.bin"]


def test_a_live_writers_files_are_kept(tmp_path):
    mine = tmp_path / f".mnrt-{os.getpid()}-0123abcd.tmp"
    mine.write_bytes(b"in progress")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        theirs = tmp_path / f".mnrt-{sleeper.pid}-0123abcd.tmp"
        theirs.mkdir()
        assert leftovers(tmp_path) == []
        write_atomically(tmp_path / "a.bin", b"a")
        assert mine.exists() and theirs.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert leftovers(tmp_path) == [theirs]


def test_staging_folders_of_dead_writers_are_removed_too(tmp_path):
    dead = _dead_pid()
    staging = tmp_path / f".mnrt-{dead}-00ff00ff.tmp"
    (staging / "sub").mkdir(parents=True)
    old = tmp_path / f".mnrt-{dead}-00ff00ff.tmp.old"
    old.mkdir()
    unrelated = tmp_path / ".mnrt-notapid.tmp"
    unrelated.write_bytes(b"")
    write_with_folder(tmp_path / "m.json", tmp_path / "m_blobs", lambda d: b"{}")
    assert not staging.exists() and not old.exists() and unrelated.exists()


def test_mnrt_clean_lists_and_removes_leftovers(tmp_path):
    dead = _dead_pid()
    left = tmp_path / f".mnrt-{dead}-deadbeef.tmp"
    left.write_bytes(b"partial")
    code, out = invoke_cli("clean", "--list", tmp_path)
    assert code == 0 and str(left) in out and left.exists()
    code, out = invoke_cli("clean", tmp_path)
    assert code == 0 and str(left) in out and "1 leftover(s) removed" in out
    assert not left.exists()


def test_mnrt_clean_of_what_is_not_a_folder_is_an_error_not_a_clean_folder(tmp_path):
    """A mistyped folder reported "0 leftover(s) removed", as if it had been clean."""
    (tmp_path / "file").write_bytes(b"")
    for path, says in (
        (tmp_path / "missing", "does not exist"),
        (tmp_path / "file", "is not a folder"),
        (tmp_path / ("x" * 300), "cannot be read (File name too long)"),  # was an OSError
    ):
        assert_one_line_error(*invoke_cli("clean", tmp_path, path), f"{path} {says}")


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(p.pid, 0)
        except ProcessLookupError:
            return p.pid
        time.sleep(0.01)
    pytest.skip("the pid was reused at once")


def test_json_nested_too_deeply_is_a_value_error_like_any_malformed_json():
    # json raises RecursionError for it, which readers catching ValueError let through as a
    # traceback (mnrt bench --baseline, the dashboard's pages, an mpmd option).
    with pytest.raises(ValueError, match="nested too deeply"):
        parse_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError):
        parse_json("{")
    assert parse_json(b'{"a": [[1]]}') == {"a": [[1]]}
