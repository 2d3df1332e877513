"""Compile caching (`CacheOptions`): entries keyed by model, options, input shapes and the
mnrt version and code, stored whole with checksums; an entry that cannot be loaded, or whose files
changed since, is compiled again; a read-only cache serves what it holds."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
from pathlib import Path

import numpy as np
import pytest
import xxhash
from graph_harness import mlp_input, small_mlp

import mnrt
from mnrt.compiler import cache as cache_module
from mnrt.compiler.models import MODELS

HANG_S = 60  # a hang guard, not a timing


def stored_entry(ctx, tmp_path):
    """A cache with one entry of the mlp model: (cache options, entry, its output)."""
    cache = mnrt.CacheOptions(tmp_path / "cache")
    b = small_mlp(np.random.default_rng(7))
    want = ctx.compile(b, {"x": mlp_input()}, cache_options=cache)({"x": mlp_input()})["y"].cpu()
    (entry,) = (tmp_path / "cache").iterdir()
    return cache, entry, want


def compiled_again(ctx, cache, entry, want) -> bool:
    """Compile the mlp model with `cache` again: whether it was compiled (and stored anew)
    rather than loaded. Its result is right either way."""
    stamp = (entry / "graph.json").stat().st_mtime_ns
    again = ctx.compile(
        small_mlp(np.random.default_rng(7)), {"x": mlp_input()}, cache_options=cache
    )
    np.testing.assert_array_equal(again({"x": mlp_input()})["y"].cpu(), want)
    return (entry / "graph.json").stat().st_mtime_ns != stamp


def test_compile_cache_dir_with_nul(ctx, tmp_path):
    b, inp = MODELS["mlp"]()
    with pytest.raises(mnrt.MnrtError):  # ValueError: embedded null byte
        ctx.compile(b, inp, cache_options=mnrt.CacheOptions(str(tmp_path / "c\x00")))


def test_cache_entry_with_consistent_checksums_but_bad_graph(ctx, tmp_path):
    b, inp = MODELS["mlp"]()
    co = mnrt.CacheOptions(tmp_path / "cache")
    ctx.compile(b, inp, cache_options=co)
    [entry] = list((tmp_path / "cache").iterdir())
    doc = json.loads((entry / "graph.json").read_text())
    doc["values"] = []
    (entry / "graph.json").write_text(json.dumps(doc))
    sums = json.loads((entry / "checksums.json").read_text())
    sums["graph.json"] = xxhash.xxh3_128_hexdigest((entry / "graph.json").read_bytes())
    (entry / "checksums.json").write_text(json.dumps(sums))
    # AttributeError escapes: _load_cached catches only MnrtError (context.py:683)
    f = ctx.compile(b, inp, cache_options=co)
    assert f(inp)["probs"].cpu().shape == (32, 10)


def test_a_cache_hit_records_this_compiles_inputs(ctx, tmp_path):
    b = small_mlp(np.random.default_rng(4))
    cache = mnrt.CacheOptions(tmp_path / "cache")
    ctx.compile(b, {"x": mlp_input(1)}, cache_options=cache)
    hit = ctx.compile(b, {"x": mlp_input(2)}, codegen_dir=tmp_path / "cg", cache_options=cache)
    assert len(list((tmp_path / "cache").iterdir())) == 1
    np.testing.assert_array_equal(hit.example_inputs["x"], mlp_input(2))
    with np.load(tmp_path / "cg" / "inputs.npz") as npz:
        np.testing.assert_array_equal(npz["x"], mlp_input(2))
    assert hit.options["option_json"] == "O1" and hit.source is b.graph


def test_a_cache_hits_report_shows_the_stored_compiles_phases(ctx, tmp_path):
    b = small_mlp(np.random.default_rng(4))
    cache = mnrt.CacheOptions(tmp_path / "cache")
    ctx.compile(b, {"x": mlp_input()}, codegen_dir=tmp_path / "miss", cache_options=cache)
    ctx.compile(b, {"x": mlp_input()}, codegen_dir=tmp_path / "hit", cache_options=cache)
    miss, hit = (json.loads((tmp_path / d / "report.json").read_text()) for d in ("miss", "hit"))
    (entry,) = (tmp_path / "cache").iterdir()
    assert next(p for p in miss["phases"] if p["name"] == "cache")["result"] == "miss"
    cache_phase = next(p for p in hit["phases"] if p["name"] == "cache")
    assert cache_phase["result"] == "hit" and cache_phase["entry"] == entry.name
    own = ("import", "cache", "light binary", "onnx export")
    stored = [p for p in miss["phases"] if p["name"] not in own]
    reused = [p for p in hit["phases"] if p.get("cached")]
    assert reused == [{**p, "cached": True} for p in stored]
    assert any(p["name"] == "schedule" and p["account"] for p in reused)


def test_a_cache_hit_still_writes_out_onnx(ctx, tmp_path):
    pytest.importorskip("onnx")
    b = small_mlp(np.random.default_rng(5))
    out = tmp_path / "opt.onnx"
    options = {"out_onnx": str(out)}
    cache = mnrt.CacheOptions(tmp_path / "cache")
    ctx.compile(b, {"x": mlp_input()}, options=options, cache_options=cache)
    out.unlink()
    ctx.compile(b, {"x": mlp_input()}, options=options, cache_options=cache)
    assert out.is_file()


def test_the_cache_key_holds_the_mnrt_version(ctx, tmp_path, monkeypatch):
    b = small_mlp(np.random.default_rng(6))
    cache = mnrt.CacheOptions(tmp_path / "cache")
    ctx.compile(b, {"x": mlp_input()}, cache_options=cache)
    monkeypatch.setattr(cache_module, "__version__", "0.0.0-other")
    ctx.compile(b, {"x": mlp_input()}, cache_options=cache)
    assert len(list((tmp_path / "cache").iterdir())) == 2


def test_the_cache_key_holds_the_mnrt_code(ctx, tmp_path, monkeypatch):
    """A build whose passes changed under the same version (a development checkout, an
    install from a branch) compiles again rather than load what the old code compiled."""
    b = small_mlp(np.random.default_rng(6))
    cache = mnrt.CacheOptions(tmp_path / "cache")
    ctx.compile(b, {"x": mlp_input()}, cache_options=cache)
    ctx.compile(b, {"x": mlp_input()}, cache_options=cache)
    assert len(list((tmp_path / "cache").iterdir())) == 1
    monkeypatch.setattr(cache_module, "_mnrt_code", lambda: "another build")
    ctx.compile(b, {"x": mlp_input()}, cache_options=cache)
    assert len(list((tmp_path / "cache").iterdir())) == 2


def test_the_code_digest_follows_sources_and_presets_only(tmp_path):
    package = tmp_path / "pkg"
    (package / "presets").mkdir(parents=True)
    (package / "__pycache__").mkdir()
    (package / "passes.py").write_text("FOLD = True\n")
    (package / "presets" / "O1.json").write_text('{"passes": ["fold"]}')
    digest = cache_module.code_digest(package)
    assert cache_module.code_digest(package) == digest
    (package / "__pycache__" / "passes.cpython-311.pyc").write_bytes(b"\0" * 16)
    (package / "notes.txt").write_text("not code")
    assert cache_module.code_digest(package) == digest
    seen = {digest}
    for change in (
        lambda: (package / "passes.py").write_text("FOLD = False\n"),
        lambda: (package / "presets" / "O1.json").write_text('{"passes": []}'),
        lambda: (package / "passes.py").rename(package / "lower.py"),
        lambda: (package / "empty.py").write_text(""),
    ):
        change()
        seen.add(cache_module.code_digest(package))
    assert len(seen) == 5


def test_the_installed_code_digest_is_taken_once(monkeypatch):
    cache_module._mnrt_code.cache_clear()
    calls = []
    monkeypatch.setattr(cache_module, "code_digest", lambda p: calls.append(p) or "d")
    assert cache_module._mnrt_code() == cache_module._mnrt_code() == "d"
    assert calls == [Path(mnrt.__file__).resolve().parent]
    cache_module._mnrt_code.cache_clear()


@pytest.mark.parametrize(
    "edit",
    [
        ("graph.json", '"alpha": 1.0', '"alpha": 2.0'),  # still parses: a different program
        ("option.json", '"O', '"O'),  # unchanged: the entry is used
        ("checksums.json", "{", "["),
    ],
)
def test_a_cache_entry_that_changed_on_disk_is_compiled_again(ctx, tmp_path, edit):
    b = small_mlp(np.random.default_rng(7))
    cache = mnrt.CacheOptions(tmp_path / "cache")
    want = ctx.compile(b, {"x": mlp_input()}, cache_options=cache)({"x": mlp_input()})["y"].cpu()
    (entry,) = (tmp_path / "cache").iterdir()
    name, old, new = edit
    text = (entry / name).read_text()
    assert old in text
    (entry / name).write_text(text.replace(old, new, 1))
    stamp = (entry / "graph.json").stat().st_mtime_ns
    again = ctx.compile(b, {"x": mlp_input()}, cache_options=cache)
    np.testing.assert_array_equal(again({"x": mlp_input()})["y"].cpu(), want)
    rewritten = (entry / "graph.json").stat().st_mtime_ns != stamp
    assert rewritten == (old != new)  # compiled again (and stored) only when it changed


@pytest.mark.parametrize("damaged", ["graph.params.npz", "inputs.npz", "graph.json"])
def test_a_damaged_cache_entry_is_compiled_again(ctx, tmp_path, damaged):
    b = small_mlp(np.random.default_rng(7))
    cache = mnrt.CacheOptions(tmp_path / "cache")
    want = ctx.compile(b, {"x": mlp_input()}, cache_options=cache)({"x": mlp_input()})["y"].cpu()
    (entry,) = (tmp_path / "cache").iterdir()
    path = entry / damaged
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # a truncated write
    again = ctx.compile(b, {"x": mlp_input()}, cache_options=cache)
    np.testing.assert_array_equal(again({"x": mlp_input()})["y"].cpu(), want)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [entry.name]
    ctx.load_codegen_dir(entry)  # repaired
    path.write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(mnrt.InvalidArgumentError):
        ctx.load_codegen_dir(entry)


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
    (entry / cache_module.CHECKSUMS).write_text(text, errors="surrogateescape")
    assert compiled_again(ctx, cache, entry, want)


def test_a_missing_file_means_compiling_again(ctx, tmp_path):
    cache, entry, want = stored_entry(ctx, tmp_path)
    (entry / "l3ir.txt").unlink()
    assert compiled_again(ctx, cache, entry, want)


def test_a_read_only_cache_serves_its_entries_and_a_miss_compiles_without_storing(
    ctx, tmp_path, monkeypatch
):
    cache, entry, want = stored_entry(ctx, tmp_path)
    monkeypatch.setattr(cache_module.os, "access", lambda path, mode: False)  # as for a non-root
    assert not compiled_again(ctx, cache, entry, want)
    b = small_mlp(np.random.default_rng(8))  # another key: it would have to be stored
    with pytest.warns(UserWarning, match="not writable, so this compile was not stored"):
        compiled = ctx.compile(b, {"x": mlp_input()}, cache_options=cache)
    assert compiled({"x": mlp_input()})["y"].cpu().shape == (4, 3)
    assert list((tmp_path / "cache").iterdir()) == [entry]


def test_entries_stored_while_another_compile_loads_them_are_whole(ctx, tmp_path, monkeypatch):
    # Writers replace the entry, as compiles of a key whose entry they could not use do,
    # while a reader loads it: the reader gets the program or None, never a partial entry
    # or an error. (The writers copy a codegen_dir: writing one captures a light binary,
    # and a process runs one capture at a time.)
    _, entry, _ = stored_entry(ctx, tmp_path)
    compiled = ctx._load_cached(entry)
    made = {p.name: p.read_bytes() for p in entry.iterdir() if p.name != cache_module.CHECKSUMS}

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
                cache_module.store_cached(compiled, entry, [])
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
    assert loaded and cache_module.checksums_hold(entry)
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
                c.compile(
                    small_mlp(np.random.default_rng(7)), {"x": mlp_input()}, cache_options=cache
                )
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_file_where_an_entry_goes_is_replaced_by_the_entry(ctx, tmp_path):
    cache, entry, want = stored_entry(ctx, tmp_path)
    shutil.rmtree(entry)
    entry.write_text("not an entry")
    again = ctx.compile(
        small_mlp(np.random.default_rng(7)), {"x": mlp_input()}, cache_options=cache
    )
    np.testing.assert_array_equal(again({"x": mlp_input()})["y"].cpu(), want)
    assert entry.is_dir()
    assert not compiled_again(ctx, cache, entry, want)  # and the next compile loads it


def test_a_pipelined_compile_is_cached_as_its_optimised_graph(ctx, tmp_path):
    """A hit skips the passes and mapping before the split into stages, and the pipeline
    it makes is the one the miss made: the same outputs, an equal binary. An entry that
    changed on disk is compiled again, as a single-device one is."""
    from mnrt.replay.diff import diff

    b = small_mlp(np.random.default_rng(4))
    cache = mnrt.CacheOptions(tmp_path / "cache")
    options = {"mpmd": {"devices": [0, 1], "microbatches": 2}}

    xs = {"x": np.stack([mlp_input(1), mlp_input(2)])}

    def compiled(name):
        """(outputs on xs, report.json's phases) of a compile, its devices closed after."""
        made = ctx.compile(
            b, {"x": mlp_input()}, codegen_dir=tmp_path / name, options=options, cache_options=cache
        )
        y = made(xs)["y"]
        made.close()
        return y, json.loads((tmp_path / name / "report.json").read_text())["phases"]

    miss, miss_phases = compiled("miss")
    hit, hit_phases = compiled("hit")
    (entry,) = (tmp_path / "cache").iterdir()
    assert [p["result"] for p in miss_phases if p["name"] == "cache"] == ["miss"]
    cache_phase = next(p for p in hit_phases if p["name"] == "cache")
    assert cache_phase["result"] == "hit" and cache_phase["entry"] == entry.name
    assert any(p["name"] == "schedule" and p.get("cached") for p in hit_phases)
    np.testing.assert_array_equal(hit, miss)
    binaries = [mnrt.LightBinary.load(tmp_path / name / "model.mnlb") for name in ("miss", "hit")]
    assert diff(*binaries)["equal"]
    (entry / "option.json").write_text((entry / "option.json").read_text().replace("O1", "O3"))
    _, again = compiled("again")
    assert [p["result"] for p in again if p["name"] == "cache"] == ["miss"]
