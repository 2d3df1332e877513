"""float_dtype (MLSDK's precision option): mixed gives GEMM and conv half operands and the
rest float, double folds and computes in double, goldens hold at every precision, and the
casts it inserts cancel only where exact."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from graph_harness import mlp_input
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_compile_fuzz import conv_graphs, graphs

import mnrt
from mnrt.compiler import GraphBuilder, goldens, lower, models
from mnrt.compiler.cast_motion import cancel_round_trip_casts
from mnrt.compiler.goldens import accuracy_tolerance
from mnrt.compiler.passes import apply_float_dtype


def scale_shift_model() -> GraphBuilder:
    """A GEMM followed by a per-channel scale and shift, which O2 folds into its weights."""
    rng = np.random.default_rng(9)
    b = GraphBuilder("ss")
    x = b.input("x", (4, 8), "float")
    h = b.gemm(x, b.param("w", rng.standard_normal((8, 6)).astype(np.float32)))
    h = b.mul(h, b.param("s", rng.standard_normal(6).astype(np.float32)))
    b.output(b.add(h, b.param("t", rng.standard_normal(6).astype(np.float32))), "y")
    return b


@pytest.mark.parametrize("preset", ["O1", "O2"])
def test_double_precision_folds_in_double(ctx, tmp_path, preset):
    b = scale_shift_model()
    rng = np.random.default_rng(3)
    v = b.param("v", rng.random(6).astype(np.float32))
    e = b.param("e", np.full(6, 1e-5, np.float32))
    b.graph.outputs.append(b.div(b.graph.outputs[0], b.sqrt(b.add(v, e))))  # folds at O1
    compiled = ctx.compile(
        b, {"x": mlp_input()}, options={"option_json": preset, "float_dtype": "double"}
    )
    compiled.save_binary(tmp_path / "m.mnlb")
    report = mnrt.replay(tmp_path / "m.mnlb")
    assert report.passed, report.summary()


def _shared_bias_graph():
    """A GEMM whose bias a float kernel reads too (a weight tied to two uses)."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("tied")
    x = b.input("x", (2, 4))
    w = b.param("w", rng.standard_normal((4, 4)).astype(np.float32))
    bias = b.param("b", (rng.standard_normal(4) + 1 / 3).astype(np.float32))
    b.output(b.add(b.gemm(x, w, bias), bias), "y")
    b.output(b.relu(w), "z")
    return b, {"x": rng.standard_normal((2, 4)).astype(np.float32)}


def test_mixed_gives_gemm_a_half_copy_of_a_parameter_float_kernels_read_too(ctx):
    builder, inputs = _shared_bias_graph()
    g = apply_float_dtype(builder.build(), "mixed")
    gemm = next(n for n in g.nodes if n.op == "gemm")
    assert all(g.values[n].dtype is mnrt.half for n in gemm.inputs)
    # The float kernels and the graph's outputs still read the float parameters.
    assert g.values["b"].dtype is g.values["w"].dtype is g.values["z"].dtype is mnrt.float32
    for preset in ("O1", "O2"):
        options = {"option_json": preset, "float_dtype": "mixed"}
        compiled = ctx.compile(builder, inputs, options=options)
        got = {k: v.cpu() for k, v in compiled(inputs).items()}
        want = compiled.reference(inputs)
        np.testing.assert_array_equal(got["z"], want["z"])  # relu of a float weight: exact
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-2, atol=1e-2)


def test_mixed_makes_a_double_model_float_with_half_gemms(ctx):
    b = GraphBuilder("double_mlp")
    x = b.input("x", (2, 4), dtype="double")
    w = b.param("w", np.arange(12.0).reshape(4, 3) / 10)  # float64 weights
    b.output(b.relu(b.gemm(x, w)), "y")
    g = apply_float_dtype(b.build(), "mixed")
    gemm = next(n for n in g.nodes if n.op == "gemm")
    assert all(g.values[n].dtype is mnrt.half for n in gemm.inputs)
    assert {v.dtype for v in g.values.values()} == {mnrt.half, mnrt.float32}
    x_val = np.linspace(-1, 1, 8).reshape(2, 4)
    compiled = ctx.compile(b, {"x": x_val}, options={"float_dtype": "mixed"})
    got = compiled({"x": x_val})["y"].cpu()
    np.testing.assert_allclose(got, np.maximum(x_val @ (np.arange(12.0).reshape(4, 3) / 10), 0),
                               rtol=1e-2, atol=1e-2)  # fmt: skip


@pytest.mark.parametrize("float_dtype", ["half", "double"])
def test_fill_makes_values_of_the_compiled_precision(ctx, float_dtype):
    b = GraphBuilder("fill")
    x = b.input("x", (2, 3))
    b.output(b.add(x, b.fill(shape=(2, 3), value=0.5)), "y")
    x_val = np.ones((2, 3), np.float32)
    compiled = ctx.compile(b, {"x": x_val}, options={"float_dtype": float_dtype})
    np.testing.assert_array_equal(compiled({"x": x_val})["y"].cpu(), np.full((2, 3), 1.5))


@pytest.mark.parametrize("float_dtype", ["float", "half", "double", "mixed"])
def test_range_and_eye_like_make_values_of_the_compiled_precision(ctx, float_dtype):
    """Their `dtype` names the precision of what they make, as fill's does."""
    b = GraphBuilder("gen")
    x = b.input("x", (5,), "double")
    b.output(b.add(x, b.range(start=0.0, limit=5.0, delta=1.0, dtype="double")), "y")
    b.output(b.eye_like(b.reshape(x, shape=(1, 5)), dtype="double"), "e")
    compiled = ctx.compile(b, {"x": np.ones(5)}, options={"float_dtype": float_dtype})
    out = compiled({"x": np.ones(5)})
    np.testing.assert_array_equal(out["y"].cpu(), np.arange(5.0) + 1)
    np.testing.assert_array_equal(out["e"].cpu(), np.eye(1, 5))


def test_save_binary_of_a_graph_with_fill_has_a_reference(ctx, tmp_path):
    """The goldens come from the graph run in double: its fill must be double too."""
    b = GraphBuilder("fill")
    x = b.input("x", (2, 3))
    b.output(b.add(x, b.fill(shape=(2, 3), value=0.5)), "y")
    compiled = ctx.compile(b, {"x": np.ones((2, 3), np.float32)})
    compiled.save_binary(tmp_path / "fill.mnlb")
    assert mnrt.replay(tmp_path / "fill.mnlb").passed


def _wide_gemm():
    """One GEMM over 1024 terms of unit-variance data: results around +-30, so the elements
    near zero are off, in half, by a fraction of 30 rather than of themselves."""
    rng = np.random.default_rng(1)
    b = GraphBuilder("wide")
    x = b.input("x", (16, 1024))
    b.output(b.gemm(x, b.param("w", rng.standard_normal((1024, 16)).astype(np.float32))), "y")
    return b, {"x": rng.standard_normal((16, 1024)).astype(np.float32)}


@pytest.mark.parametrize("float_dtype", ["mixed", "half"])
def test_save_binary_goldens_hold_for_large_results(ctx, tmp_path, float_dtype):
    builder, inputs = _wide_gemm()
    compiled = ctx.compile(builder, inputs, options={"float_dtype": float_dtype})
    compiled.save_binary(tmp_path / "wide.mnlb")
    assert mnrt.replay(tmp_path / "wide.mnlb").passed


@pytest.mark.parametrize("float_dtype", ["mixed", "half"])
@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_save_binary_warns_of_a_result_ten_percent_off_its_reference(
    ctx, tmp_path, model, float_dtype
):
    """Softmax probabilities are all below 0.3: an absolute atol of 0.02 passed anything.
    The binary's goldens are the program's own results; the reference check warns."""
    builder, inputs = models.MODELS[model]()
    compiled = ctx.compile(builder, inputs, options={"float_dtype": float_dtype})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled.save_binary(tmp_path / "right.mnlb")
    assert mnrt.replay(tmp_path / "right.mnlb").passed
    reference = goldens.reference

    def off(compiled, feeds):
        source, expected = reference(compiled, feeds)
        return source, {k: 1.1 * v for k, v in expected.items()}

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(goldens, "reference", off)
        with pytest.warns(UserWarning, match="differs from the"):
            compiled.save_binary(tmp_path / "wrong.mnlb")


def _run(graph, dev, inputs):
    low = lower(graph, dev)
    q = dev.command_queue(0)
    for name, data in inputs.items():
        q.enqueue_write_buffer(low.bindings[name], data)
    q.enqueue_program(low.program, low.bindings)
    return {n: q.enqueue_read_buffer(low.bindings[n]) for n in graph.outputs}


def _casts(source: str, *chain: str):
    b = GraphBuilder("casts")
    h = x = b.input("x", (64,), source)
    for to in chain:
        h = b.cast(h, to=to)
    b.output(b.neg(h), "y")  # not returned directly: the last cast may go
    return b, x


@pytest.mark.parametrize(
    ("source", "chain", "kept"),
    [
        ("float", ("half", "float"), 2),  # a rounding to half
        ("double", ("float", "double"), 2),  # a rounding to float
        ("float16", ("half", "float16"), 2),  # 1-5-10 -> 1-6-9 loses a mantissa bit
        ("half", ("float16", "half"), 2),  # and 1-5-10 cannot hold half's range
        ("float", ("int32", "float"), 2),  # truncation
        ("half", ("float", "half"), 0),  # exact: widening then narrowing back
        ("float16", ("double", "float16"), 0),
        ("float", ("half", "float", "half", "float"), 2),  # the middle pair goes
    ],
)
def test_cancel_round_trip_casts_drops_only_exact_pairs(dev, source, chain, kept):
    builder, x = _casts(source, *chain)
    g = builder.build()
    lean = cancel_round_trip_casts(g)
    assert sum(n.op == "cast" for n in lean.nodes) == kept
    rng = np.random.default_rng(5)
    # Values that every format rounds differently: fractions, large and tiny magnitudes.
    data = rng.standard_normal(64) * 10.0 ** rng.integers(-6, 5, 64)
    host = g.values[x].dtype.host
    data = data.astype(host if host is not None else np.float32)
    got, want = _run(lean, dev, {x: data})["y"], _run(g, dev, {x: data})["y"]
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(graphs(), conv_graphs()))
def test_reduced_precision_compiles_agree(ctx, case):
    """O1 against O3 at mixed and at half: each is within the accuracy tolerances the
    compile checks against the double reference, and they agree with each other within the
    same tolerances. Epilogue fusion and scale/shift folding move a half rounding (2**-10 of
    what is rounded) across an activation or into the weights, and what is rounded can be
    larger than the output: a fixed 2**-7 of the output's size failed on two convolutions
    with a folded scale (0.0098 apart on outputs of about 1, each 0.005 from the
    reference)."""
    builder, inputs = case
    for float_dtype in ("mixed", "half"):
        results = []
        for preset in ("O1", "O3"):
            options = {"option_json": preset, "float_dtype": float_dtype}
            compiled = ctx.compile(builder, inputs, options=options)
            results.append({k: v.cpu() for k, v in compiled(inputs).items()})
            for name, want in compiled.reference(inputs).items():
                dtype = compiled.lowered.bindings[name].dtype
                rtol, atol = accuracy_tolerance(float_dtype, want, dtype)
                np.testing.assert_allclose(results[-1][name], want, rtol=rtol, atol=atol)
        for name, want in results[0].items():
            dtype = compiled.lowered.bindings[name].dtype
            rtol, atol = accuracy_tolerance(float_dtype, want, dtype)
            np.testing.assert_allclose(results[1][name], want, rtol=rtol, atol=atol)
