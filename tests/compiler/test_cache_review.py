"""Review of compile cache checksums: an entry is used only when its files are exactly those
it was stored with; anything else about it is compiled again, never a traceback; entries
stored and read at the same time stay loadable."""

from __future__ import annotations

import os
import shutil
import signal
import threading

import numpy as np
import pytest
from test_context_review import mlp, x_data

import mnrt
from mnrt.compiler import context

HANG_S = 60  # a hang guard, not a timing


def stored_entry(ctx, tmp_path):
    """A cache with one entry of the mlp model: (cache options, entry, its output)."""
    cache = mnrt.CacheOptions(tmp_path / "cache")
    b = mlp(np.random.default_rng(7))
    want = ctx.compile(b, {"x": x_data()}, cache_options=cache)({"x": x_data()})["y"].cpu()
    (entry,) = (tmp_path / "cache").iterdir()
    return cache, entry, want


def compiled_again(ctx, cache, entry, want) -> bool:
    """Compile the mlp model with `cache` again: whether it was compiled (and stored anew)
    rather than loaded. Its result is right either way."""
    stamp = (entry / "graph.json").stat().st_mtime_ns
    again = ctx.compile(mlp(np.random.default_rng(7)), {"x": x_data()}, cache_options=cache)
    np.testing.assert_array_equal(again({"x": x_data()})["y"].cpu(), want)
    return (entry / "graph.json").stat().st_mtime_ns != stamp


def test_an_unchanged_entry_is_used(ctx, tmp_path):
    assert not compiled_again(ctx, *stored_entry(ctx, tmp_path))


@pytest.mark.parametrize("extra", ["extra.txt", "graph.params.npz.orig", "sub/"])
def test_an_entry_with_a_file_it_was_not_stored_with_is_compiled_again(ctx, tmp_path, extra):
    cache, entry, want = stored_entry(ctx, tmp_path)
    if extra.endswith("/"):
        (entry / extra).mkdir()
    else:
        (entry / extra).write_text("not stored with the entry")
    assert compiled_again(ctx, cache, entry, want)
    assert not (entry / extra.rstrip("/")).exists()


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a": ' * 100_000, "\udcff", "null", "[]"])
def test_an_unreadable_checksums_file_means_compiling_again(ctx, tmp_path, text):
    cache, entry, want = stored_entry(ctx, tmp_path)
    (entry / context.CHECKSUMS).write_text(text, errors="surrogateescape")
    assert compiled_again(ctx, cache, entry, want)


def test_a_missing_file_means_compiling_again(ctx, tmp_path):
    cache, entry, want = stored_entry(ctx, tmp_path)
    (entry / "l3ir.txt").unlink()
    assert compiled_again(ctx, cache, entry, want)


def test_a_read_only_cache_serves_its_entries_and_a_miss_compiles_without_storing(
    ctx, tmp_path, monkeypatch
):
    cache, entry, want = stored_entry(ctx, tmp_path)
    monkeypatch.setattr(context.os, "access", lambda path, mode: False)  # as for a non-root
    assert not compiled_again(ctx, cache, entry, want)
    b = mlp(np.random.default_rng(8))  # another key: it would have to be stored
    with pytest.warns(UserWarning, match="not writable, so this compile was not stored"):
        compiled = ctx.compile(b, {"x": x_data()}, cache_options=cache)
    assert compiled({"x": x_data()})["y"].cpu().shape == (4, 3)
    assert list((tmp_path / "cache").iterdir()) == [entry]


def test_entries_stored_while_another_compile_loads_them_are_whole(ctx, tmp_path, monkeypatch):
    # Writers replace the entry, as compiles of a key whose entry they could not use do,
    # while a reader loads it: the reader gets the program or None, never a partial entry
    # or an error. (The writers copy a codegen_dir: writing one captures a light binary,
    # and a process runs one capture at a time.)
    _, entry, _ = stored_entry(ctx, tmp_path)
    compiled = ctx._load_cached(entry)
    made = {p.name: p.read_bytes() for p in entry.iterdir() if p.name != context.CHECKSUMS}

    def write_codegen_dir(folder, phases, what="codegen_dir"):
        folder.mkdir()
        for name, data in made.items():
            (folder / name).write_bytes(data)

    monkeypatch.setattr(compiled, "write_codegen_dir", write_codegen_dir)
    done = threading.Event()
    failures: list[BaseException] = []
    loaded: list[bool] = []

    def write() -> None:
        try:
            for _ in range(20):
                context._store_cached(compiled, entry, [])
        except BaseException as e:  # reported below
            failures.append(e)

    def read() -> None:
        try:
            while not done.is_set():
                got = ctx._load_cached(entry)
                assert got is None or got.graph.outputs == ["y"]
                loaded.append(got is not None)
        except BaseException as e:  # reported below
            failures.append(e)

    writers = [threading.Thread(target=write) for _ in range(3)]
    reader = threading.Thread(target=read)
    for t in [reader, *writers]:
        t.start()
    for t in writers:
        t.join(HANG_S)
    done.set()
    reader.join(HANG_S)
    assert not any(t.is_alive() for t in [reader, *writers]), "hung"
    assert not failures, failures
    assert loaded and context._checksums_hold(entry)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [entry.name]  # no staging left


def test_a_fifo_planted_in_an_entry_is_not_waited_on(ctx, tmp_path):
    cache, entry, _ = stored_entry(ctx, tmp_path)
    (entry / "l3ir.txt").unlink()
    os.mkfifo(entry / "l3ir.txt")  # reading it would wait for a writer forever
    pid = os.fork()
    if pid == 0:  # exit 3: the compile hung
        signal.signal(signal.SIGALRM, lambda *a: os._exit(3))
        signal.alarm(HANG_S)
        try:
            with mnrt.Context() as c:
                c.compile(mlp(np.random.default_rng(7)), {"x": x_data()}, cache_options=cache)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_file_where_an_entry_goes_is_replaced_by_the_entry(ctx, tmp_path):
    cache, entry, want = stored_entry(ctx, tmp_path)
    shutil.rmtree(entry)
    entry.write_text("not an entry")
    again = ctx.compile(mlp(np.random.default_rng(7)), {"x": x_data()}, cache_options=cache)
    np.testing.assert_array_equal(again({"x": x_data()})["y"].cpu(), want)
    assert entry.is_dir()
    assert not compiled_again(ctx, cache, entry, want)  # and the next compile loads it
