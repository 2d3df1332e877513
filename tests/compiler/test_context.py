"""The MLSDK-style API: Context, compile options, CompiledFunction, proxies, save_binary."""

from __future__ import annotations

import gc
import itertools
import json
import warnings

import numpy as np
import pytest
from graph_harness import mlp_input, small_mlp
from hypothesis import settings
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, rule
from onnx_harness import onnx_model, onnx_module, relu_model, value_info

import mnrt
from mnrt.compiler import GraphBuilder
from mnrt.compiler.models import MODELS
from mnrt.compiler.options import OptionError, resolve
from mnrt.host.device import open_indices
from mnrt.replay.diff import diff
from mnrt.replay.executor import COMMAND_NAMES


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
    for ref in ("O9", "x" * 300, str(tmp_path / ("x" * 300))):  # too long: was an OSError
        with pytest.raises(OptionError, match="neither a preset"):
            resolve({"option_json": ref})


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
        "fuse_rolls",
        "merge_scale_shifts",
        "fold_scale_shift",
        "fuse_silu",
        "fuse_gelu",
        "fuse_layernorm",
        "fuse_scale_shift",
        "fuse_epilogues",
        "float_dtype",
        "common_subexpressions",
        "narrow_where_it_pays",
        "half_where_it_pays",
        "products_write_float",
        "schedule",
        "mapping",
        "time_slice",
        "layout",
        "elide_copies",
        "chain_room",
        "lower",
        "light binary",
        "onnx export",
    ]
    assert report["perf"]["gemm"]["count"] == 2 and report["total"]["device_time_s"] > 0
    scheduled = next(p for p in report["phases"] if p["name"] == "schedule")["account"]
    assert scheduled["scheduler"] == "spill_opt" and scheduled["modelled_time_s"] > 0
    assert report["memory"]["peak_live_bytes"] > 0 and report["memory"]["buffers"] > 0
    assert "@dram layout=((" in (cg / "l3ir.txt").read_text()  # row-major in MN-Core notation
    assert json.loads((cg / "layout_plan.json").read_text())["planner"] == "lpz"
    assert resolve({"option_json": str(cg / "option.json")})["float_dtype"] == "mixed"
    assert mnrt.replay(cg / "model.mnlb").passed
    loaded = ctx.load_codegen_dir(cg)
    np.testing.assert_array_equal(loaded({"x": x})["y"].cpu(), compiled({"x": x})["y"].cpu())


@pytest.mark.parametrize("plan", ["{", "[" * 100_000 + "]" * 100_000])
def test_a_codegen_dir_whose_layout_plan_is_not_json_does_not_load(ctx, tmp_path, plan):
    # Nested too deeply, json raised RecursionError, which load_codegen_dir let through.
    rng = np.random.default_rng(5)
    cg = tmp_path / "cg"
    ctx.compile(mlp(rng), {"x": rng.standard_normal((4, 8)).astype(np.float32)}, codegen_dir=cg)
    (cg / "layout_plan.json").write_text(plan)
    with pytest.raises(mnrt.InvalidArgumentError, match="layout_plan.json is not readable JSON"):
        ctx.load_codegen_dir(cg)


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
        "debug_03_mapping.txt",
        "debug_04_time_slice.txt",
        "debug_05_layout.txt",
        "debug_06_chain_room.txt",
    ]
    ctx.compile(b, {"x": x}, codegen_dir=tmp_path / "cg2", options={"option_json": "O2"})
    assert not list((tmp_path / "cg2").glob("debug_*.txt"))


def test_a_registered_value_the_compile_cannot_bind_is_an_error(ctx):
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
    # w becomes half under mixed: a copy of it would never see updates, so it is an error
    # (it only warned), naming the value, both dtypes and how to register it.
    with pytest.raises(
        mnrt.DTypeError,
        match=r"'fc' \(float_dtype=mixed\) cannot bind registered value 'w': it is float, "
        r"the graph's parameter is half; .*dtype='half'",
    ):
        ctx.compile(b, x, options={"float_dtype": "mixed"})
    ctx.register_param("w", w, dtype="half")
    assert "w" in ctx.compile(b, x, options={"float_dtype": "mixed"}).shared


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


X23 = np.ones((2, 3), np.float32)


def test_compile_unused_param_at_O0(ctx):
    b = GraphBuilder("g")
    x = b.input("x", (2, 3))
    b.param("w", np.zeros(4, np.float32))  # no kernel reads it: no program slot
    b.output(b.relu(x), "y")
    # KeyError 'w' at context.py:229 (self.lowered.bindings[name])
    f = ctx.compile(b, {"x": X23}, options={"option_json": "O0"})
    assert f({"x": X23})["y"].cpu().shape == (2, 3)


def test_compile_param_as_output(ctx):
    b = GraphBuilder("g")
    x = b.input("x", (2, 3))
    b.output(b.param("w", np.zeros((2, 3), np.float32)), "w_out")
    b.output(b.relu(x), "y")
    with pytest.raises(mnrt.InvalidArgumentError, match="'w_out' .* not computed by any node"):
        ctx.compile(b, {"x": X23})


def test_compile_output_that_is_an_input_message(ctx):
    b = GraphBuilder("g")
    b.output(b.input("x", (2, 3)))
    with pytest.raises(mnrt.MnrtError) as e:
        ctx.compile(b, {"x": X23})
    # says "create_program takes a non-empty list of mnrt.Kernel, got ()": an API the user
    # never called
    assert "create_program" not in str(e.value)


@pytest.mark.parametrize("device", [1, 2.5, {"a": 1}])
def test_context_with_non_mndevice(device):
    with pytest.raises(mnrt.MnrtError):  # AttributeError: no attribute 'index' (context.py:571)
        mnrt.Context(device)


def test_context_with_device_string_message():
    with pytest.raises(mnrt.MnrtError) as e:
        mnrt.Context("mncore2:0")
    # "no emulated device <built-in method index of str object at 0x...>"
    assert "built-in method" not in str(e.value)


def test_register_param_of_what_is_not_a_numeric_array_names_the_registered_value(ctx):
    with pytest.raises(mnrt.InvalidArgumentError, match="registered value 'r' is not an array"):
        ctx.register_param("r", [[1.0], [1.0, 2.0]])
    with pytest.raises(mnrt.InvalidArgumentError, match="registered value 'r' is str of dtype"):
        ctx.register_param("r", "nope")


def test_register_param_none_name_breaks_later_lookups():
    with mnrt.Context(mnrt.MNDevice("mncore2:auto")) as c:
        try:
            c.register_param(None, np.ones(3, np.float32))  # accepted, buffer 'buffer0'
        except mnrt.MnrtError:
            return
        with pytest.raises(mnrt.MnrtError):  # TypeError in ", ".join (context.py:592)
            c.get_registered_value_proxy("other")


def test_get_registered_value_proxy_unhashable(ctx):
    with pytest.raises(mnrt.MnrtError):  # TypeError: unhashable type: 'list'
        ctx.get_registered_value_proxy(["w"])


@pytest.mark.parametrize("inputs", [[1, 2], "x", 5])
def test_call_with_non_mapping(ctx, inputs):
    b, inp = MODELS["mlp"]()
    f = ctx.compile(b, inp)
    with pytest.raises(mnrt.MnrtError):  # TypeError/ValueError from dict(inputs) (context.py:279)
        f(inputs)


def test_a_call_with_integers_for_a_float_input_names_the_dtype_to_cast_to(ctx):
    b, inp = MODELS["mlp"]()
    f = ctx.compile(b, inp)
    with pytest.raises(mnrt.InvalidArgumentError, match=r"input 'x' is int32, .*astype\(np\."):
        f({"x": inp["x"].astype(np.int32)})  # was the queue's DTypeError, naming its buffer


def test_an_input_of_another_shape_than_compiled_names_the_input_and_the_fix(ctx, tmp_path):
    """A model of symbolic dimensions compiles for its example's shape; a call or a proxy of
    another was the queue's ShapeError, naming the internal buffer ('g.x') and suggesting a
    reshape."""
    helper = onnx_module().helper
    relu = helper.make_node("Relu", ["x"], ["y"])
    model = onnx_model([relu], [value_info("x", ["N", 3])], [value_info("y", ["N", 3])])
    f = ctx.compile(model, {"x": np.ones((2, 3), np.float32)})
    other = np.ones((4, 3), np.float32)
    message = r"input 'x' has shape \(4, 3\), the model takes \(2, 3\) .*compile again"
    with pytest.raises(mnrt.ShapeError, match=message):
        f({"x": other})
    with pytest.raises(mnrt.ShapeError, match=message):
        f.save_binary(tmp_path / "m.mnlb", {"x": other})
    with pytest.raises(mnrt.ShapeError, match=r"has shape \(4, 3\), the model takes \(2, 3\)"):
        f.allocate_input_proxy("x").load_from(other)
    assert f({"x": -np.ones((2, 3), np.float32)})["y"].cpu().tolist() == [[0.0] * 3] * 2


def test_load_from_ragged(ctx):
    b, inp = MODELS["mlp"]()
    p = ctx.compile(b, inp).allocate_input_proxy("x")
    with pytest.raises(mnrt.MnrtError):  # ValueError (context.py:107)
        p.load_from([[1.0], [1.0, 2.0]])


def test_arguments_of_a_wrong_type_are_argument_errors(ctx, tmp_path):
    """Each was a TypeError, ValueError or AttributeError from deep inside."""
    b, inp = MODELS["mlp"]()
    f = ctx.compile(b, inp)
    name = next(iter(inp))
    cases = [
        (lambda: f.allocate_input_proxy(np.ones(2)), "no input"),
        (lambda: f.reference(None), "reference inputs must be a dict"),
        (lambda: f.reference({}), "reference inputs must be exactly"),
        (lambda: f.save_binary(tmp_path / "a.mnlb", inputs=5), "save_binary inputs must be a dict"),
        (
            lambda: f.save_binary(tmp_path / "a.mnlb", inputs="x"),
            "save_binary inputs must be a dict",
        ),
        (lambda: f.write_codegen_dir(None), "codegen_dir takes a path"),
        (lambda: f.write_codegen_dir(tmp_path / "cg", "phases"), "phases must be a list"),
        (lambda: ctx.load_codegen_dir(None), "load_codegen_dir takes a path"),
        (lambda: ctx.load_codegen_dir(""), "an empty path"),
        (lambda: f.allocate_input_proxy(name).load_from(inp[name], np.ones(2)), "clone must be"),
    ]
    for call, message in cases:
        with pytest.raises(mnrt.InvalidArgumentError, match=message):
            call()
    assert not (tmp_path / "a.mnlb").exists() and not (tmp_path / "cg").exists()
    assert f.reference(inp)["probs"].shape == f(inp)["probs"].shape
    f.write_codegen_dir(bytes(tmp_path / "cg"))  # a bytes path, no phases
    loaded = ctx.load_codegen_dir(bytes(tmp_path / "cg"))
    np.testing.assert_array_equal(loaded(inp)["probs"].cpu(), f(inp)["probs"].cpu())


def test_save_binary_path_with_nul(ctx, tmp_path):
    b, inp = MODELS["mlp"]()
    f = ctx.compile(b, inp)
    with pytest.raises(mnrt.MnrtError):  # ValueError: embedded null byte (format/files.py:25)
        f.save_binary(str(tmp_path / "x\x00.mnlb"))


@pytest.mark.parametrize("how", ["compiled", "cached", "pipelined"])
def test_save_binary_never_replaces_the_model_it_was_compiled_from(ctx, tmp_path, how):
    """A compile given the model's path remembers it: save_binary over that file (by any
    spelling of it) is refused and the model keeps its bytes; other paths are written."""
    helper = onnx_module().helper
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])]
    model = tmp_path / "relu.onnx"  # two nodes: a pipeline of two stages
    onnx_module().save(
        onnx_model(nodes, [value_info("x", [2, 3])], [value_info("y", [2, 3])]), model
    )
    kept = model.read_bytes()
    inputs = {"x": np.ones((2, 3), np.float32)}
    kwargs = {
        "compiled": {},
        "cached": {"cache_options": mnrt.CacheOptions(tmp_path / "cache")},
        "pipelined": {"options": {"mpmd": {"devices": [1, 2], "microbatches": 1}}},
    }[how]
    if how == "cached":  # the second compile is the cache's hit
        ctx.compile(str(model), inputs, **kwargs).close()
    f = ctx.compile(str(model), inputs, **kwargs)
    try:
        for spelling in (model, str(tmp_path / "." / "relu.onnx")):
            with pytest.raises(mnrt.InvalidArgumentError, match="the model this function was"):
                f.save_binary(spelling)
            assert model.read_bytes() == kept
        f.save_binary(tmp_path / "relu.mnlb")
        assert mnrt.replay(mnrt.LightBinary.load(tmp_path / "relu.mnlb")).passed
    finally:
        f.close()


@pytest.mark.parametrize("spec", ["mncore2: 1", "mncore2:\u0663", "mncore2:-1", "mncore2:1.0"])
def test_a_device_index_is_plain_digits(spec):
    with pytest.raises(mnrt.InvalidArgumentError, match="index must be 'auto' or a number"):
        mnrt.MNDevice(spec)


def test_a_registered_value_of_another_shape_is_said_to_differ_in_shape():
    b, inputs = MODELS["mlp"]()
    with mnrt.Context() as own:  # registered values stay with their context
        own.register_param("fc0.w", np.zeros((3, 3), np.float32))
        with pytest.warns(UserWarning, match=r"'fc0.w' \(registered \[3, 3\], the model's"):
            own.compile(b, inputs)


BAD_INPUTS = {
    "a list": ([np.zeros((2, 3), np.float32)], "must be a dict of input name -> array"),
    "ragged": ({"x": [[1.0, 2.0, 3.0], [4.0]]}, "input 'x' is not an array"),
    "a string": ({"x": "hello"}, "input 'x' is str of dtype <U5; pass a numeric"),
    "a non-str name": (
        {"x": np.zeros((2, 3), np.float32), 0: 1},
        "example inputs 0 are not inputs of the ONNX model",
    ),
    # compiled, then failed in save_binary's reference run with the queue's DTypeError
    "integers for a float input": (
        {"x": np.zeros((2, 3), np.int64)},
        r"input 'x' is int64, the model takes float \(float32\); cast it with .astype",
    ),
    "bools for a float input": ({"x": np.zeros((2, 3), bool)}, "input 'x' is bool"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_compile_inputs(ctx, case):
    inputs, message = BAD_INPUTS[case]
    with pytest.raises(mnrt.InvalidArgumentError, match=message):
        ctx.compile(relu_model(), inputs)


BAD_OPTIONS = {
    "not a dict": (["float_dtype"], "options must be a dict"),
    "fractional integer": ({"sram_budget": 1.7}, "sram_budget=1.7: expected an integer"),
    "bool for an integer": ({"sram_budget": True}, "sram_budget=True: expected an integer"),
    "budget beyond the chip": ({"sram_budget": 2**40}, "more than the chip's"),
    "annealing that never ends": (
        {"scheduler": "anneal", "sa_expected_run_iters": 10**12},
        "at most 1000000 annealing steps",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
def test_bad_option_values(ctx, case):
    options, message = BAD_OPTIONS[case]
    with pytest.raises(mnrt.InvalidArgumentError, match=message):
        ctx.compile(relu_model(), {"x": np.zeros((2, 3), np.float32)}, options=options)


def test_option_json_args_must_be_a_list(ctx, tmp_path):
    path = tmp_path / "o.json"
    path.write_text('{"args": 5}')
    with pytest.raises(mnrt.InvalidArgumentError, match="args must be a list"):
        ctx.compile(
            relu_model(), {"x": np.zeros((2, 3), np.float32)}, options={"option_json": str(path)}
        )


def test_output_paths_that_cannot_be_written(ctx, tmp_path):
    a_file = tmp_path / "f"
    a_file.write_text("x")
    x = {"x": np.zeros((2, 3), np.float32)}
    with pytest.raises(mnrt.InvalidArgumentError, match="codegen_dir .*cannot create it"):
        ctx.compile(relu_model(), x, codegen_dir=a_file)
    with pytest.raises(mnrt.InvalidArgumentError, match="codegen_dir takes a directory path"):
        ctx.compile(relu_model(), x, codegen_dir=5)
    with pytest.raises(mnrt.InvalidArgumentError, match="cache directory .*cannot create it"):
        ctx.compile(relu_model(), x, cache_options=mnrt.CacheOptions(a_file))
    with pytest.raises(mnrt.InvalidArgumentError, match=r"takes mnrt.CacheOptions\(directory\)"):
        ctx.compile(relu_model(), x, cache_options=str(tmp_path))
    with pytest.raises(mnrt.InvalidArgumentError, match="out_onnx .*cannot write it"):
        ctx.compile(relu_model(), x, options={"out_onnx": str(tmp_path)})


def test_a_call_owns_its_inputs_the_caller_may_refill_them_at_once(ctx, monkeypatch):
    compiled = ctx.compile(small_mlp(np.random.default_rng(0)), {"x": mlp_input()})
    written = []
    write = ctx.queue.enqueue_write_buffer
    monkeypatch.setattr(
        ctx.queue,
        "enqueue_write_buffer",
        lambda buf, data: (written.append(data), write(buf, data)),
    )
    x = mlp_input(1)
    compiled({"x": x})
    # The write runs on the queue's thread later: it must not read the caller's array.
    assert len(written) == 1 and not np.shares_memory(written[0], x)


def test_save_binary_with_a_double_registered_param_keeps_it(ctx, tmp_path):
    b = small_mlp(np.random.default_rng(1))
    shared = ctx.register_param("w0", b.graph.values["w0"].data, dtype="double")
    compiled = ctx.compile(b, {"x": mlp_input()}, options={"float_dtype": "double"})
    assert compiled.lowered.bindings["w0"] is shared.buffer
    compiled.save_binary(tmp_path / "m.mnlb")  # its reference must not free the shared buffer
    assert shared.buffer.is_allocated
    assert mnrt.replay(tmp_path / "m.mnlb").passed
    compiled({"x": mlp_input()})["y"].cpu()


def test_goldens_use_the_current_value_of_a_registered_param(ctx, tmp_path):
    b = small_mlp(np.random.default_rng(2))
    shared = ctx.register_param("w0", b.graph.values["w0"].data)
    compiled = ctx.compile(b, {"x": mlp_input()})
    before = compiled({"x": mlp_input()})["y"].cpu()
    shared.load_from(2 * b.graph.values["w0"].data)
    assert not np.allclose(compiled({"x": mlp_input()})["y"].cpu(), before)
    compiled.save_binary(tmp_path / "m.mnlb")
    report = mnrt.replay(tmp_path / "m.mnlb")
    assert report.passed, report.summary()


def test_contexts_dropped_without_close_release_their_devices():
    # Before: each Context kept its device open for good, so the ninth failed with
    # "all 8 emulated devices are open", even after gc.collect().
    for _ in range(1000):
        mnrt.Context()
    assert open_indices() == set()  # released as each was dropped, not by the collector


def test_compiling_one_model_after_another_in_one_process_releases_each_device():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    for _ in range(12):  # more than the 8 devices
        ctx = mnrt.Context(mnrt.MNDevice("mncore2:auto"))
        compiled = ctx.compile(mlp(rng), {"x": x})
        compiled({"x": x})
        del ctx  # the compiled function still refers to it: the device stays open
        assert compiled.ctx.device.is_open
        assert compiled({"x": x})["y"].cpu().shape == (4, 3)
        compiled = None
        assert open_indices() == set()


def test_context_and_mndevice_close_and_with_blocks_release_the_device():
    with mnrt.Context(mnrt.MNDevice("mncore2:5")) as ctx:
        assert open_indices() == {5}
    assert not ctx.device.is_open and open_indices() == set()
    ctx.close()  # twice is harmless
    with mnrt.MNDevice("mncore2:auto") as device:
        first, second = mnrt.Context(device), mnrt.Context(device)
        assert open_indices() == {first.device.index, second.device.index}
    assert open_indices() == set()
    assert not first.device.is_open and not second.device.is_open
    again = mnrt.Context(mnrt.MNDevice("mncore2:5"))  # the index is free again
    again.close()
    assert open_indices() == set()
    # Used after close, it says so in its own terms (not "open the device again").
    x = np.ones((4, 8), np.float32)
    for use in (
        lambda: again.compile(mlp(np.random.default_rng(0)), {"x": x}),
        lambda: again.register_param("w", x),
        lambda: again.load_codegen_dir("anywhere"),
    ):
        with pytest.raises(mnrt.DeviceClosedError, match="this Context was closed"):
            use()


def test_a_calls_outputs_keep_the_device_open_until_read():
    # The function and its Context are dropped as soon as the call returns: the proxies
    # it gave keep them (and the device) until the read, then release them.
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    y = mnrt.Context().compile(mlp(rng), {"x": x})({"x": x})["y"]
    gc.collect()
    assert y.cpu().shape == (4, 3)
    del y
    assert open_indices() == set()


def _used(ctx) -> tuple[int, int]:
    info = ctx.device.memory_info()
    return info["used_bytes"], info["buffers"]


def test_a_closed_compiled_function_frees_its_memory_and_refuses_calls(ctx, tmp_path):
    b = mlp(np.random.default_rng(3))
    shared = ctx.register_param("w0", b.graph.values["w0"].data)
    x = {"x": np.ones((4, 8), np.float32)}
    before = _used(ctx)
    with ctx.compile(b, x) as compiled:
        assert compiled.lowered.bindings["w0"] is shared.buffer
        y = compiled(x)["y"]
        assert _used(ctx)[1] > before[1]
    assert _used(ctx) == before  # the registered value it bound stays the context's
    assert shared.buffer.is_allocated
    for call in (
        lambda: compiled(x),
        lambda: compiled.save_binary(tmp_path / "m.mnlb"),
        lambda: compiled.allocate_input_proxy("x"),
    ):
        with pytest.raises(mnrt.UseAfterFreeError, match="'mlp' was closed.*compile the model"):
            call()
    with pytest.raises(mnrt.UseAfterFreeError):  # an output proxy of a call before the close
        y.cpu()
    compiled.close()  # twice is harmless
    assert not (tmp_path / "m.mnlb").exists()


def test_compiled_functions_dropped_without_close_free_their_memory_at_the_next_compile(ctx):
    # Before: every function kept its buffers until the context closed (VGG-19 compiled
    # five times in one context held five copies of its weights, even after gc.collect()).
    rng = np.random.default_rng(4)
    x = {"x": rng.standard_normal((4, 8)).astype(np.float32)}
    used = []
    for _ in range(4):
        compiled = ctx.compile(mlp(rng), x)
        compiled(x)  # dropped with its run still queued: the free waits for it
        used.append(_used(ctx))
        compiled = None
        gc.collect()
    assert used == used[:1] * 4
    last = ctx.compile(mlp(rng), x)
    last.close()
    assert _used(ctx) == (0, 0)


def test_a_function_dropped_during_a_capture_is_freed_after_it_not_in_it(ctx):
    rng = np.random.default_rng(5)
    x = {"x": rng.standard_normal((4, 8)).astype(np.float32)}
    kept = ctx.compile(mlp(rng), x)
    one = _used(ctx)
    dropped = ctx.compile(mlp(rng), x)
    mnrt.begin_capture()
    dropped(x)
    dropped = None
    gc.collect()
    kept(x)["y"].cpu()  # a call: the free would be recorded in the capture, so it waits
    binary = mnrt.end_capture()
    assert "deallocate_buffer" not in {COMMAND_NAMES[c.cmdType] for c in binary.commands}
    assert _used(ctx) > one
    kept(x)
    assert _used(ctx) == one


def test_a_compile_that_runs_out_of_memory_keeps_no_buffer(ctx):
    filler = ctx.device.create_buffer((ctx.device.memory_info()["free_bytes"] - 512,), "uint8")
    before = _used(ctx)
    with pytest.raises(mnrt.OutOfMemoryError):
        ctx.compile(mlp(np.random.default_rng(6)), {"x": np.ones((4, 8), np.float32)})
    assert _used(ctx) == before
    filler.deallocate()


def test_a_compile_whose_codegen_dir_fails_keeps_no_buffer(ctx, tmp_path):
    a_file = tmp_path / "f"
    a_file.write_text("x")
    with pytest.raises(mnrt.InvalidArgumentError, match="codegen_dir"):
        ctx.compile(relu_model(), {"x": np.zeros((2, 3), np.float32)}, codegen_dir=a_file)
    assert _used(ctx) == (0, 0)


class CompiledMemory(RuleBasedStateMachine):
    """Any sequence of compiles, calls (plain or inside a capture), closes and drops: after
    a compile or a plain call, the device holds exactly the buffers of the functions still
    open; inside a capture nothing is freed (a free would be recorded). The bundle holds
    numbers, not functions (hypothesis keeps what a bundle held)."""

    def __init__(self) -> None:
        super().__init__()
        self.ctx = mnrt.Context(mnrt.MNDevice("mncore2:auto"))
        self.rng = np.random.default_rng(0)
        self.functions: dict = {}  # number -> function, until dropped
        self.numbering = itertools.count()
        self.closed: set[int] = set()

    numbers = Bundle("numbers")

    def _held(self) -> int:
        return sum(
            f.lowered.distinct_buffers for n, f in self.functions.items() if n not in self.closed
        )

    def _calls(self, n: int) -> None:
        if n in self.closed:
            with pytest.raises(mnrt.UseAfterFreeError):
                self.functions[n]({"x": mlp_input()})
        else:
            self.functions[n]({"x": mlp_input()})["y"].cpu()

    @rule(target=numbers)
    def compile(self):
        n = next(self.numbering)
        self.functions[n] = self.ctx.compile(mlp(self.rng), {"x": mlp_input()})
        assert _used(self.ctx)[1] == self._held()
        return n

    @rule(n=numbers)
    def call(self, n):
        self._calls(n)
        if n not in self.closed:  # a closed function refuses before anything else
            assert _used(self.ctx)[1] == self._held()

    @rule(n=numbers)
    def call_in_a_capture(self, n):
        before = _used(self.ctx)[1]
        mnrt.begin_capture()
        try:
            self._calls(n)
        finally:
            mnrt.end_capture()
        assert _used(self.ctx)[1] == before

    @rule(n=numbers)
    def close(self, n):
        self.functions[n].close()
        self.closed.add(n)
        assert _used(self.ctx)[1] == self._held()

    @rule(n=consumes(numbers))
    def drop(self, n):
        del self.functions[n]
        self.closed.discard(n)
        gc.collect()
        assert _used(self.ctx)[1] >= self._held()

    def teardown(self) -> None:
        self.functions.clear()
        self.ctx.close()


CompiledMemory.TestCase.settings = settings(max_examples=25, stateful_step_count=12, deadline=None)
test_compiled_memory = CompiledMemory.TestCase


@pytest.mark.parametrize("model", sorted(MODELS))
def test_a_loaded_codegen_dir_saves_the_binary_its_compile_saved(ctx, tmp_path, model):
    """The reference of a loaded compile is its optimised graph run in double: fused chains
    too, which were made for half or float inputs (save_binary raised a DTypeError)."""
    b, inputs = MODELS[model]()
    compiled = ctx.compile(b, inputs, codegen_dir=tmp_path / "cg", options={"option_json": "O3"})
    assert "chain" in {n.op for n in compiled.graph.nodes}
    compiled.save_binary(tmp_path / "a.mnlb")
    loaded = ctx.load_codegen_dir(tmp_path / "cg")
    accuracy = loaded.save_binary_and_check(tmp_path / "b.mnlb")
    assert accuracy["reference"] == "float64 graph" and all(
        o["passed"] for o in accuracy["outputs"].values()
    )
    a, b = (mnrt.LightBinary.load(tmp_path / f"{n}.mnlb") for n in "ab")
    assert diff(a, b)["equal"]


def test_a_loaded_compile_whose_mappings_do_not_fit_double_saves_its_binary(ctx, tmp_path):
    """A mapping chosen for a float conv can need more local memory than a PE has once its
    operands are double (this one: 64 KiB of 32): the loaded graph's float64 reference maps
    its kernels again (it raised KernelAttributeError, as VGG-19 did at every preset)."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("conv")
    x = b.input("x", (1, 256, 56, 56))
    w = b.param("w", (rng.standard_normal((256, 256, 3, 3)) / 30).astype(np.float32))
    b.output(b.node("conv2d", x, w, padding=[1, 1, 1, 1]), "y")
    inputs = {"x": rng.standard_normal((1, 256, 56, 56)).astype(np.float32)}
    compiled = ctx.compile(b, inputs, codegen_dir=tmp_path / "cg", options={"option_json": "O1"})
    compiled.save_binary(tmp_path / "a.mnlb")
    accuracy = ctx.load_codegen_dir(tmp_path / "cg").save_binary_and_check(tmp_path / "b.mnlb")
    assert accuracy["outputs"]["y"]["passed"]
    a, b = (mnrt.LightBinary.load(tmp_path / f"{n}.mnlb") for n in "ab")
    assert diff(a, b)["equal"]


def test_warnings_name_the_line_of_the_users_code(ctx, tmp_path):
    """Each path into a warning (compile, write_codegen_dir, a loaded function's
    save_binary) names the caller's line, not one of mnrt's, nor none ("sys:1")."""
    b = GraphBuilder("wide")
    x = b.input("x", (4,), "double")
    b.output(b.node("mul", x, b.param("c", np.full(4, 1e300))), "y")
    with pytest.warns(UserWarning, match="beyond float's range") as caught:
        ctx.compile(b, {"x": np.ones(4)}, options={"float_dtype": "float"})
    assert {w.filename for w in caught} == {__file__}
    b = GraphBuilder("big")
    x = b.input("x", (4,))
    b.output(b.node("mul", x, b.param("c", np.full(4, 1e10, np.float32))), "y")
    compiled = ctx.compile(b, {"x": np.ones(4, np.float32)}, options={"float_dtype": "half"})
    with pytest.warns(UserWarning, match="half's largest magnitude") as caught:
        compiled.write_codegen_dir(tmp_path / "cg")
    assert {w.filename for w in caught} == {__file__}
    with pytest.warns(UserWarning, match="half's largest magnitude") as caught:
        ctx.load_codegen_dir(tmp_path / "cg").save_binary(tmp_path / "b.mnlb")
    assert {w.filename for w in caught} == {__file__}
