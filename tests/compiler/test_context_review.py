"""The Context API used correctly gives correct results: calls own their inputs, save_binary
goldens match what the function computes (registered values, double precision), and the
compile cache is keyed, stored and refreshed soundly."""

from __future__ import annotations

import numpy as np
import pytest

import mnrt
from mnrt.compiler import GraphBuilder, context


def mlp(rng: np.random.Generator) -> GraphBuilder:
    """Two GEMM layers and a softmax on a (4, 8) input."""
    b = GraphBuilder("mlp")
    h = b.input("x", (4, 8), "float")
    for i, (fi, fo) in enumerate([(8, 16), (16, 3)]):
        w = b.param(f"w{i}", (rng.standard_normal((fi, fo)) / np.sqrt(fi)).astype(np.float32))
        h = b.gemm(h, w, b.param(f"b{i}", rng.standard_normal(fo).astype(np.float32)))
    b.output(b.softmax(h), "y")
    return b


def x_data(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((4, 8)).astype(np.float32)


def scale_shift_model() -> GraphBuilder:
    """A GEMM followed by a per-channel scale and shift, which O2 folds into its weights."""
    rng = np.random.default_rng(9)
    b = GraphBuilder("ss")
    x = b.input("x", (4, 8), "float")
    h = b.gemm(x, b.param("w", rng.standard_normal((8, 6)).astype(np.float32)))
    h = b.mul(h, b.param("s", rng.standard_normal(6).astype(np.float32)))
    b.output(b.add(h, b.param("t", rng.standard_normal(6).astype(np.float32))), "y")
    return b


def test_a_call_owns_its_inputs_the_caller_may_refill_them_at_once(ctx, monkeypatch):
    compiled = ctx.compile(mlp(np.random.default_rng(0)), {"x": x_data()})
    written = []
    write = ctx.queue.enqueue_write_buffer
    monkeypatch.setattr(
        ctx.queue,
        "enqueue_write_buffer",
        lambda buf, data: (written.append(data), write(buf, data)),
    )
    x = x_data(1)
    compiled({"x": x})
    # The write runs on the queue's thread later: it must not read the caller's array.
    assert len(written) == 1 and not np.shares_memory(written[0], x)


def test_save_binary_with_a_double_registered_param_keeps_it(ctx, tmp_path):
    b = mlp(np.random.default_rng(1))
    shared = ctx.register_param("w0", b.graph.values["w0"].data, dtype="double")
    compiled = ctx.compile(b, {"x": x_data()}, options={"float_dtype": "double"})
    assert compiled.lowered.bindings["w0"] is shared.buffer
    compiled.save_binary(tmp_path / "m.mnlb")  # its reference must not free the shared buffer
    assert shared.buffer.is_allocated
    assert mnrt.replay(tmp_path / "m.mnlb").passed
    compiled({"x": x_data()})["y"].cpu()


def test_goldens_use_the_current_value_of_a_registered_param(ctx, tmp_path):
    b = mlp(np.random.default_rng(2))
    shared = ctx.register_param("w0", b.graph.values["w0"].data)
    compiled = ctx.compile(b, {"x": x_data()})
    before = compiled({"x": x_data()})["y"].cpu()
    shared.load_from(2 * b.graph.values["w0"].data)
    assert not np.allclose(compiled({"x": x_data()})["y"].cpu(), before)
    compiled.save_binary(tmp_path / "m.mnlb")
    report = mnrt.replay(tmp_path / "m.mnlb")
    assert report.passed, report.summary()


@pytest.mark.parametrize("preset", ["O1", "O2"])
def test_double_precision_folds_in_double(ctx, tmp_path, preset):
    b = scale_shift_model()
    rng = np.random.default_rng(3)
    v = b.param("v", rng.random(6).astype(np.float32))
    e = b.param("e", np.full(6, 1e-5, np.float32))
    b.graph.outputs.append(b.div(b.graph.outputs[0], b.sqrt(b.add(v, e))))  # folds at O1
    compiled = ctx.compile(
        b, {"x": x_data()}, options={"option_json": preset, "float_dtype": "double"}
    )
    compiled.save_binary(tmp_path / "m.mnlb")
    report = mnrt.replay(tmp_path / "m.mnlb")
    assert report.passed, report.summary()


def test_a_cache_hit_records_this_compiles_inputs(ctx, tmp_path):
    b = mlp(np.random.default_rng(4))
    cache = mnrt.CacheOptions(tmp_path / "cache")
    ctx.compile(b, {"x": x_data(1)}, cache_options=cache)
    hit = ctx.compile(b, {"x": x_data(2)}, codegen_dir=tmp_path / "cg", cache_options=cache)
    assert len(list((tmp_path / "cache").iterdir())) == 1
    np.testing.assert_array_equal(hit.example_inputs["x"], x_data(2))
    with np.load(tmp_path / "cg" / "inputs.npz") as npz:
        np.testing.assert_array_equal(npz["x"], x_data(2))
    assert hit.options["option_json"] == "O1" and hit.source is b.graph


def test_a_cache_hit_still_writes_out_onnx(ctx, tmp_path):
    pytest.importorskip("onnx")
    b = mlp(np.random.default_rng(5))
    out = tmp_path / "opt.onnx"
    options = {"out_onnx": str(out)}
    cache = mnrt.CacheOptions(tmp_path / "cache")
    ctx.compile(b, {"x": x_data()}, options=options, cache_options=cache)
    out.unlink()
    ctx.compile(b, {"x": x_data()}, options=options, cache_options=cache)
    assert out.is_file()


def test_the_cache_key_holds_the_mnrt_version(ctx, tmp_path, monkeypatch):
    b = mlp(np.random.default_rng(6))
    cache = mnrt.CacheOptions(tmp_path / "cache")
    ctx.compile(b, {"x": x_data()}, cache_options=cache)
    monkeypatch.setattr(context, "__version__", "0.0.0-other")
    ctx.compile(b, {"x": x_data()}, cache_options=cache)
    assert len(list((tmp_path / "cache").iterdir())) == 2


@pytest.mark.parametrize(
    "edit",
    [
        ("graph.json", '"alpha": 1.0', '"alpha": 2.0'),  # still parses: a different program
        ("option.json", '"O', '"O'),  # unchanged: the entry is used
        ("checksums.json", "{", "["),
    ],
)
def test_a_cache_entry_that_changed_on_disk_is_compiled_again(ctx, tmp_path, edit):
    b = mlp(np.random.default_rng(7))
    cache = mnrt.CacheOptions(tmp_path / "cache")
    want = ctx.compile(b, {"x": x_data()}, cache_options=cache)({"x": x_data()})["y"].cpu()
    (entry,) = (tmp_path / "cache").iterdir()
    name, old, new = edit
    text = (entry / name).read_text()
    assert old in text
    (entry / name).write_text(text.replace(old, new, 1))
    stamp = (entry / "graph.json").stat().st_mtime_ns
    again = ctx.compile(b, {"x": x_data()}, cache_options=cache)
    np.testing.assert_array_equal(again({"x": x_data()})["y"].cpu(), want)
    rewritten = (entry / "graph.json").stat().st_mtime_ns != stamp
    assert rewritten == (old != new)  # compiled again (and stored) only when it changed


@pytest.mark.parametrize("damaged", ["graph.params.npz", "inputs.npz", "graph.json"])
def test_a_damaged_cache_entry_is_compiled_again(ctx, tmp_path, damaged):
    b = mlp(np.random.default_rng(7))
    cache = mnrt.CacheOptions(tmp_path / "cache")
    want = ctx.compile(b, {"x": x_data()}, cache_options=cache)({"x": x_data()})["y"].cpu()
    (entry,) = (tmp_path / "cache").iterdir()
    path = entry / damaged
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # a truncated write
    again = ctx.compile(b, {"x": x_data()}, cache_options=cache)
    np.testing.assert_array_equal(again({"x": x_data()})["y"].cpu(), want)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [entry.name]
    ctx.load_codegen_dir(entry)  # repaired
    path.write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(mnrt.InvalidArgumentError):
        ctx.load_codegen_dir(entry)
