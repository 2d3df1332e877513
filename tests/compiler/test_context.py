"""The MLSDK-style API: Context, compile options, CompiledFunction, proxies, save_binary."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import mnrt
from mnrt.compiler import GraphBuilder
from mnrt.compiler.options import OptionError, resolve


def mlp(rng, batch=4):
    b = GraphBuilder("mlp")
    h = b.input("x", (batch, 8), "float")
    for i, (fi, fo) in enumerate([(8, 16), (16, 3)]):
        w = b.param(f"w{i}", (rng.standard_normal((fi, fo)) / np.sqrt(fi)).astype(np.float32))
        bias = b.param(f"b{i}", rng.standard_normal(fo).astype(np.float32))
        h = b.gemm(h, w, bias)
        h = b.gelu(h) if i == 0 else h
    b.output(b.softmax(h), "y")
    return b


def numpy_mlp(b, x):
    from math import erf

    v = b.graph.values
    h = x.astype(np.float64) @ v["w0"].data + v["b0"].data
    h = 0.5 * h * (1 + np.vectorize(erf)(h / np.sqrt(2)))
    h = h @ v["w1"].data + v["b1"].data
    e = np.exp(h - h.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize(
    ("float_dtype", "tol"), [("float", 1e-5), ("double", 1e-12), ("mixed", 2e-2), ("half", 3e-2)]
)
def test_compile_and_call_at_each_precision(ctx, float_dtype, tol):
    rng = np.random.default_rng(0)
    b = mlp(rng)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    compiled = ctx.compile(b, {"x": x}, options={"float_dtype": float_dtype})
    y = compiled({"x": x})["y"].cpu()
    np.testing.assert_allclose(y, numpy_mlp(b, x), rtol=tol, atol=tol)
    again = compiled({"x": 2 * x})["y"].cpu()  # weights stay resident between calls
    np.testing.assert_allclose(again, numpy_mlp(b, 2 * x), rtol=tol, atol=tol)


def test_mixed_precision_runs_matrix_kernels_in_half(ctx):
    b = mlp(np.random.default_rng(1))
    compiled = ctx.compile(b, {"x": np.zeros((4, 8), np.float32)}, options={"float_dtype": "mixed"})
    g = compiled.graph
    gemms = [n for n in g.nodes if n.op == "gemm"]
    assert all(g.values[n.inputs[0]].dtype is mnrt.half for n in gemms)
    assert all(g.values[n.outputs[0]].dtype is mnrt.half for n in gemms)
    assert g.values["y"].dtype is mnrt.float32
    assert sum(n.op == "cast" for n in g.nodes) == 4


def test_input_proxies_and_registered_params(ctx):
    rng = np.random.default_rng(2)
    b = mlp(rng)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    shared = ctx.register_param("w0", b.graph.values["w0"].data)
    compiled = ctx.compile(b, {"x": x})
    assert compiled.lowered.bindings["w0"] is shared.buffer
    assert ctx.get_registered_value_proxy("w0") is shared
    proxy = compiled.allocate_input_proxy("x")
    proxy.load_from(x)
    np.testing.assert_allclose(
        compiled({"x": proxy})["y"].cpu(), numpy_mlp(b, x), rtol=1e-5, atol=1e-6
    )
    with pytest.raises(mnrt.InvalidArgumentError, match="no registered value 'nope'"):
        ctx.get_registered_value_proxy("nope")
    with pytest.raises(mnrt.InvalidArgumentError, match="no input 'z'"):
        compiled.allocate_input_proxy("z")


def test_compile_checks_inputs_and_options(ctx):
    b = mlp(np.random.default_rng(3))
    with pytest.raises(mnrt.InvalidArgumentError, match="missing x"):
        ctx.compile(b, {})
    with pytest.raises(mnrt.InvalidArgumentError, match=r"shape \(2, 8\)"):
        ctx.compile(b, {"x": np.zeros((2, 8), np.float32)})
    with pytest.raises(OptionError, match="unknown compile option 'float_type'.*float_dtype"):
        ctx.compile(b, {"x": np.zeros((4, 8), np.float32)}, options={"float_type": "half"})
    with pytest.raises(OptionError, match="valid values are mixed, half, float, double"):
        resolve({"float_dtype": "bfloat16"})


def test_option_json_presets_files_and_overrides(tmp_path):
    assert resolve({"option_json": "O2"})["float_dtype"] == "mixed"
    assert resolve({"option_json": "O2", "float_dtype": "float"})["float_dtype"] == "float"
    path = tmp_path / "opts.json"
    path.write_text(
        json.dumps(
            {
                "name": "mine",
                "envs": {"CODEGEN_X": "1"},
                "args": ["--float_dtype=half", "--option_json=O0"],
            }
        )
    )
    opts = resolve({"option_json": str(path)})
    assert opts["float_dtype"] == "half" and opts.envs == {"CODEGEN_X": "1"} and opts.name == "mine"
    assert "--float_dtype=half" in opts.to_json()["args"]
    with pytest.raises(OptionError, match="neither a preset"):
        resolve({"option_json": "O9"})


def test_save_binary_replays_with_mnrt_run(ctx, tmp_path):
    rng = np.random.default_rng(4)
    b = mlp(rng)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    for float_dtype in ("float", "mixed"):
        compiled = ctx.compile(b, {"x": x}, options={"float_dtype": float_dtype})
        path = tmp_path / f"mlp-{float_dtype}.mnlb"
        compiled.save_binary(path)
        report = mnrt.replay(path)
        assert report.passed, report.summary()
        # The output, and the GEMM result its relu read (a relu hides negative errors).
        assert [c.name for c in report.checks] == ["y", compiled.graph.nodes[-1].inputs[0]]


def test_device_names():
    assert mnrt.MNDevice("mncore2:3").index == 3
    for bad in ("gpu:0", "mncore2", "mncore2:x"):
        with pytest.raises(mnrt.InvalidArgumentError):
            mnrt.MNDevice(bad)


def test_codegen_dir_holds_everything_and_loads_without_compiling(ctx, tmp_path):
    rng = np.random.default_rng(5)
    b = mlp(rng)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    cg = tmp_path / "cg"
    compiled = ctx.compile(b, {"x": x}, codegen_dir=cg, options={"option_json": "O2"})
    names = {p.name for p in cg.iterdir()}
    assert {"option.json", "l3ir.txt", "report.json", "model.mnlb", "graph.json"} <= names
    report = json.loads((cg / "report.json").read_text())
    assert [p["name"] for p in report["phases"]] == [
        "import",
        "dead_code",
        "fold_constants",
        "common_subexpressions",
        "fold_scale_shift",
        "fuse_epilogues",
        "float_dtype",
        "common_subexpressions",
        "cancel_round_trip_casts",
        "schedule",
        "placement",
        "layout",
        "lower",
        "light binary",
        "onnx export",
    ]
    assert report["perf"]["gemm"]["count"] == 2 and report["total"]["device_time_s"] > 0
    assert report["memory"]["peak_live_bytes"] > 0 and report["memory"]["buffers"] > 0
    assert "@dram layout=row_major" in (cg / "l3ir.txt").read_text()
    assert resolve({"option_json": str(cg / "option.json")})["float_dtype"] == "mixed"
    assert mnrt.replay(cg / "model.mnlb").passed
    loaded = ctx.load_codegen_dir(cg)
    np.testing.assert_array_equal(loaded({"x": x})["y"].cpu(), compiled({"x": x})["y"].cpu())


def test_compile_cache_hits_on_the_same_model_options_and_shapes(ctx, tmp_path):
    rng = np.random.default_rng(6)
    b = mlp(rng)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    cache = mnrt.CacheOptions(tmp_path / "cache")
    first = ctx.compile(b, {"x": x}, cache_options=cache)
    entries = list((tmp_path / "cache").iterdir())
    assert len(entries) == 1
    second = ctx.compile(b, {"x": x}, cache_options=cache)
    assert list((tmp_path / "cache").iterdir()) == entries
    np.testing.assert_array_equal(second({"x": x})["y"].cpu(), first({"x": x})["y"].cpu())
    ctx.compile(b, {"x": x}, cache_options=cache, options={"float_dtype": "double"})
    assert len(list((tmp_path / "cache").iterdir())) == 2


def test_codegen_debug_env_dumps_the_graph_after_every_phase(ctx, tmp_path):
    b = mlp(np.random.default_rng(7))
    x = np.zeros((4, 8), np.float32)
    ctx.compile(b, {"x": x}, codegen_dir=tmp_path / "cg", options={"option_json": "debug"})
    dumps = sorted(p.name for p in (tmp_path / "cg").glob("debug_*.txt"))
    assert dumps == [
        "debug_00_import.txt",
        "debug_01_float_dtype.txt",
        "debug_02_schedule.txt",
        "debug_03_placement.txt",
        "debug_04_layout.txt",
    ]
    ctx.compile(b, {"x": x}, codegen_dir=tmp_path / "cg2", options={"option_json": "O2"})
    assert not list((tmp_path / "cg2").glob("debug_*.txt"))


def test_a_registered_value_the_compile_cannot_bind_is_warned_about(ctx):
    rng = np.random.default_rng(5)
    w = rng.standard_normal((8, 4)).astype(np.float32)
    b = GraphBuilder("fc")
    b.output(b.gemm(b.input("x", (2, 8)), b.param("w", w)), "y")
    x = {"x": rng.standard_normal((2, 8)).astype(np.float32)}
    ctx.register_param("w", w)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bound = ctx.compile(b, x, options={"float_dtype": "float"})  # shares it: no warning
    assert "w" in bound.shared
    with pytest.warns(UserWarning, match=r"does not bind registered value\(s\) 'w'.*mixed"):
        ctx.compile(b, x, options={"float_dtype": "mixed"})  # w becomes half: its own copy


def test_save_binary_leaves_the_inputs_a_call_would_use(ctx, tmp_path):
    rng = np.random.default_rng(6)
    b = mlp(rng)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    compiled = ctx.compile(b, {"x": x})
    mine = rng.standard_normal((4, 8)).astype(np.float32)
    compiled.allocate_input_proxy("x").load_from(mine)
    compiled.save_binary(tmp_path / "m.mnlb")  # runs on the example inputs
    np.testing.assert_allclose(compiled()["y"].cpu(), numpy_mlp(b, mine), rtol=1e-5, atol=1e-6)
    assert mnrt.replay(tmp_path / "m.mnlb").passed


def test_a_save_binary_that_fails_to_write_still_leaves_the_inputs(ctx, tmp_path, monkeypatch):
    rng = np.random.default_rng(6)
    b = mlp(rng)
    compiled = ctx.compile(b, {"x": rng.standard_normal((4, 8)).astype(np.float32)})
    mine = rng.standard_normal((4, 8)).astype(np.float32)
    compiled.allocate_input_proxy("x").load_from(mine)

    def disk_full(self, path):
        raise mnrt.MnrtError(f"cannot write {path}: no space left on device")

    monkeypatch.setattr(mnrt.LightBinary, "save", disk_full)
    with pytest.raises(mnrt.MnrtError, match="no space left"):
        compiled.save_binary(tmp_path / "m.mnlb")
    np.testing.assert_allclose(compiled()["y"].cpu(), numpy_mlp(b, mine), rtol=1e-5, atol=1e-6)
