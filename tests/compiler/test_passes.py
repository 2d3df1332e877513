"""Graph passes: each keeps results and does what it says to the graph."""

from __future__ import annotations

import json

import numpy as np
import pytest
from binaries import preact_block
from graph_harness import run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.compiler import GraphBuilder
from mnrt.compiler.cast_motion import cancel_round_trip_casts
from mnrt.compiler.chain_fusion import fuse_chains
from mnrt.compiler.node_cost import graph_cost, node_cost
from mnrt.compiler.passes import (
    apply_float_dtype,
    common_subexpressions,
    dead_code,
    fold_constants,
    fold_scale_shift,
    fuse_epilogues,
    fuse_scale_shift,
    merge_scale_shifts,
)
from mnrt.compiler.patterns import fuse_gelu, fuse_layernorm, fuse_rolls, fuse_silu


def ops(graph):
    return [n.op for n in graph.nodes]


def test_dead_code_and_common_subexpressions(dev):
    b = GraphBuilder("g")
    x = b.input("x", (4,), "float")
    b.exp(x)  # unused
    y = b.add(b.tanh(x), b.tanh(x))  # the same tanh twice
    b.output(y, "y")
    g = b.build()
    g2 = common_subexpressions(dead_code(g))
    assert ops(g) == ["exp", "tanh", "tanh", "add"] and ops(g2) == ["tanh", "add"]
    x_val = np.linspace(-1, 1, 4).astype(np.float32)
    np.testing.assert_array_equal(run(g2, dev, {"x": x_val})["y"], run(g, dev, {"x": x_val})["y"])


def test_fold_constants_precomputes_weight_transforms(dev):
    rng = np.random.default_rng(0)
    b = GraphBuilder("g")
    x = b.input("x", (2, 3), "float")
    w = b.param("w", rng.standard_normal((4, 3)).astype(np.float32))
    b.output(b.gemm(x, b.transpose(w)), "y")  # transpose of a weight: a constant
    g = b.build()
    folded = fold_constants(g)
    assert ops(folded) == ["gemm"]
    x_val = rng.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(
        run(folded, dev, {"x": x_val})["y"], run(g, dev, {"x": x_val})["y"]
    )


def test_batchnorm_style_scale_and_shift_fold_into_conv_and_gemm(dev):
    rng = np.random.default_rng(1)
    b = GraphBuilder("bn")
    x = b.input("x", (1, 3, 8, 8), "float")
    y = b.conv2d(x, b.param("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)))
    y = b.mul(y, b.param("scale", rng.standard_normal((4, 1, 1)).astype(np.float32)))
    y = b.add(y, b.param("shift", rng.standard_normal((1, 4, 1, 1)).astype(np.float32)))
    flat = b.reshape(y, shape=(1, 4 * 6 * 6))
    z = b.gemm(flat, b.param("fc", rng.standard_normal((144, 5)).astype(np.float32)))
    z = b.add(z, b.param("fc_b", rng.standard_normal(5).astype(np.float32)))
    b.output(z, "z")
    g = b.build()
    folded = fold_scale_shift(g)
    assert ops(folded) == ["conv2d", "reshape", "gemm"]
    x_val = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(
        run(folded, dev, {"x": x_val})["z"], run(g, dev, {"x": x_val})["z"], rtol=1e-4, atol=1e-4
    )


def _affine_run(b, x, steps, rng):
    """x through `steps` ("mul" or "add", each by a parameter of shape (4, 1, 1) or a
    scalar), a parameter drawn from rng for each."""
    for i, (op, per_channel) in enumerate(steps):
        shape = (4, 1, 1) if per_channel else ()
        data = rng.uniform(0.5, 2.0, shape) * rng.choice([-1, 1], shape)
        p = b.param(f"p{len(b.graph.values)}", np.asarray(data, np.float32))
        x = getattr(b, op)(*((p, x) if i % 2 else (x, p)))
    return x


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(st.tuples(st.sampled_from(["mul", "add"]), st.booleans()), max_size=6),
    seed=st.integers(0, 2**16),
)
def test_a_run_of_scales_and_shifts_becomes_one_mul_and_one_add(dev, steps, seed):
    """A BatchNormalization (mul, add) then a Caffe2 Scale layer (Mul, Add), as the model
    zoo's DenseNet-121 writes each of its 121 norms, is x * S + T: two kernels, not four,
    rounded twice rather than once a step (so the result agrees within a few ulps of the
    largest value the steps make, not bitwise)."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("bn")
    x = b.input("x", (1, 4, 3, 3), "float")
    b.output(b.relu(_affine_run(b, b.relu(x), steps, rng)), "y")
    g = b.build()
    merged = merge_scale_shifts(g)
    kinds = [op for op, _ in steps]
    want = ["mul"] * ("mul" in kinds) + ["add"] * ("add" in kinds)
    if kinds in (["mul"], ["add"], ["mul", "add"]):
        want = kinds
    assert ops(merged) == ["relu", *want, "relu"]
    x_val = rng.standard_normal((1, 4, 3, 3)).astype(np.float32)
    got, expected = run(merged, dev, {"x": x_val})["y"], run(g, dev, {"x": x_val})["y"]
    # every intermediate is at most 4**len(steps) in magnitude; each rounding errs by 2**-24
    bound = 4.0 ** len(steps) * (len(steps) + 2) * 2.0**-23
    np.testing.assert_allclose(got, expected, rtol=0, atol=bound)


def test_a_scale_or_shift_read_elsewhere_ends_the_run(dev):
    rng = np.random.default_rng(6)
    b = GraphBuilder("bn")
    x = b.relu(b.input("x", (1, 4, 3, 3), "float"))
    h = _affine_run(b, x, [("mul", True), ("add", True)], rng)
    h = b.output(h, "h")  # the BatchNormalization's result is an output too
    b.output(_affine_run(b, h, [("mul", True), ("add", False), ("mul", False)], rng), "y")
    merged = merge_scale_shifts(b.build())
    assert ops(merged) == ["relu", "mul", "add", "mul", "add"]
    x_val = rng.standard_normal((1, 4, 3, 3)).astype(np.float32)
    got, want = run(merged, dev, {"x": x_val}), run(b.build(), dev, {"x": x_val})
    np.testing.assert_array_equal(got["h"], want["h"])
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6, atol=1e-6)


def test_scales_whose_product_leaves_the_dtype_are_not_merged():
    """1e30 * 1e30 is not a float32: x * 1e30 * 1e30 of x = 1e-40 is, and merging would
    make it infinite. Nor does a scale that flushes to zero merge."""
    for first, second in ((1e30, 1e30), (1e-30, 1e-30)):
        b = GraphBuilder("g")
        x = b.input("x", (4,), "float")
        a, c = (b.param(n, np.array(v, np.float32)) for n, v in (("a", first), ("c", second)))
        y = b.mul(b.mul(x, a), c)
        b.output(y, "y")
        assert ops(merge_scale_shifts(b.build())) == ["mul", "mul"]


def test_a_run_that_gives_x_back_is_one_multiplication_by_one(dev):
    """x * 2 * 0.5 + 1 - 1 is x: the run's result still has one kernel making it."""
    b = GraphBuilder("g")
    x = b.input("x", (4,), "float")
    y = x
    for i, (op, v) in enumerate((("mul", 2.0), ("mul", 0.5), ("add", 1.0), ("add", -1.0))):
        y = getattr(b, op)(y, b.param(f"p{i}", np.array(v, np.float32)))
    b.output(y, "y")
    merged = merge_scale_shifts(b.build())
    assert ops(merged) == ["mul"] and merged.values[merged.nodes[0].inputs[1]].data == 1.0
    x_val = np.array([1.5, -0.25, 3.0, 0.0], np.float32)
    np.testing.assert_array_equal(run(merged, dev, {"x": x_val})["y"], x_val)


def test_o1_folds_a_batch_norm_and_a_scale_layer_into_the_conv_before_them(dev):
    """The compiler's default, as onnxruntime's basic level does: conv, BatchNormalization,
    Mul, Add, Relu compile to two kernels; the norm ahead of the next conv (no matrix kernel
    before it) to one scale_shift, as onnxruntime runs it as one BatchNormalization."""
    rng = np.random.default_rng(7)
    b = GraphBuilder("densenet_layer")
    x = b.input("x", (1, 4, 6, 6), "float")
    h = b.relu(_affine_run(b, b.relu(x), [("mul", True), ("add", True)] * 2, rng))
    h = b.conv2d(h, b.param("w", rng.standard_normal((4, 4, 1, 1)).astype(np.float32)))
    h = _affine_run(b, h, [("mul", True), ("add", True), ("mul", True), ("add", True)], rng)
    b.output(b.relu(h), "y")
    inputs = {"x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32)}
    with mnrt.Context() as ctx:
        o0 = ctx.compile(b, inputs, options={"option_json": "O0", "float_dtype": "float"})
        o1 = ctx.compile(b, inputs, options={"option_json": "O1"})
        norm = ["mul", "add"] * 2
        kernels = [op for op in ops(o0.graph) if op != "relayout"]
        assert kernels == ["relu", *norm, "relu", "conv2d", *norm, "relu"]
        assert ops(o1.graph) == ["relu", "scale_shift", "relu", "conv2d", "relu"]
        o0_s, o1_s = (c.lowered.program.plan(c.lowered.bindings).modelled.time_s for c in (o0, o1))
        assert o1_s < o0_s
        np.testing.assert_allclose(
            o1(inputs)["y"].cpu(), o0(inputs)["y"].cpu(), rtol=1e-5, atol=1e-5
        )


@pytest.mark.parametrize("dtype", ["float", "half"])
@pytest.mark.parametrize("swapped", [False, True])
def test_a_scale_then_a_shift_by_parameters_is_one_scale_shift(dev, dtype, swapped):
    """Either operand order; in float32 the same two roundings as the mul and the add, so
    the same bits; in half one rounding where they made two, so within one of its ulps."""
    rng = np.random.default_rng(11)
    b = GraphBuilder("bn")
    x = b.input("x", (2, 4, 3, 3), "float")
    scale = b.param("s", rng.uniform(-2, 2, (4, 1, 1)).astype(np.float32))
    shift = b.param("t", rng.uniform(-2, 2, (4, 1, 1)).astype(np.float32))
    h = b.mul(scale, x) if swapped else b.mul(x, scale)
    b.output(b.relu(b.add(shift, h) if swapped else b.add(h, shift)), "y")
    g = apply_float_dtype(b.build(), dtype)
    fused = fuse_scale_shift(g)
    assert [op for op in ops(fused) if op != "cast"] == ["scale_shift", "relu"]
    (node,) = (n for n in fused.nodes if n.op == "scale_shift")
    assert node.inputs[1:] == ["s", "t"]
    inputs = {"x": rng.standard_normal((2, 4, 3, 3)).astype(np.float32)}
    got, want = run(fused, dev, inputs)["y"], run(g, dev, inputs)["y"]
    if dtype == "float":
        assert got.tobytes() == want.tobytes()
    else:
        stored = {k: g.values[k].data.astype(np.float64) for k in ("s", "t")}
        x_half = run(apply_float_dtype(_identity(), "half"), dev, inputs)["y"]
        exact = np.maximum(x_half * stored["s"] + stored["t"], 0)
        err, err_apart = np.abs(got - exact), np.abs(want - exact)
        assert err.max() <= err_apart.max() and err.mean() < err_apart.mean()
        np.testing.assert_allclose(got, want, rtol=2**-8, atol=0)


def _identity():
    """x through a relu that changes nothing of it: its rounding to half, alone."""
    b = GraphBuilder("x")
    x = b.input("x", (2, 4, 3, 3), "float")
    b.output(b.add(x, b.param("zero", np.zeros((), np.float32))), "y")
    return b.build()


@pytest.mark.parametrize(
    "case", ["product read again", "product an output", "shift not a parameter", "add first"]
)
def test_a_scale_and_shift_that_are_not_one_pass_stay_apart(case):
    rng = np.random.default_rng(12)
    b = GraphBuilder("bn")
    x = b.input("x", (1, 4, 3, 3), "float")
    scale = b.param("s", rng.uniform(-2, 2, (4, 1, 1)).astype(np.float32))
    shift = b.param("t", rng.uniform(-2, 2, (4, 1, 1)).astype(np.float32))
    if case == "add first":
        b.output(b.mul(b.add(x, shift), scale), "y")
    else:
        h = b.mul(x, scale)
        b.output(b.add(h, x if case == "shift not a parameter" else shift), "y")
        if case == "product read again":
            b.output(b.relu(h), "z")
        elif case == "product an output":
            b.output(h, "h")
    g = b.build()
    assert fuse_scale_shift(g).dump() == g.dump()


def test_a_bias_written_before_the_product_folds_too(dev):
    """Exporters write a Linear's bias first, Add(bias, MatMul(x, w)) (Swin-T: 48 such adds,
    each a kernel of its own); add and mul are exactly commutative, so the fold takes the
    product from either side. An add of two products folds neither."""
    rng = np.random.default_rng(5)
    b = GraphBuilder("lin")
    x = b.input("x", (2, 7, 8), "float")
    h = b.gemm(x, b.param("w", rng.standard_normal((8, 6)).astype(np.float32)))
    h = b.add(b.param("bias", rng.standard_normal(6).astype(np.float32)), h)
    h = b.mul(b.param("scale", rng.standard_normal(6).astype(np.float32)), h)
    u = b.gemm(h, b.param("u", rng.standard_normal((6, 6)).astype(np.float32)))
    v = b.gemm(h, b.param("v", rng.standard_normal((6, 6)).astype(np.float32)))
    b.output(b.add(u, v), "y")
    g = b.build()
    folded = fold_scale_shift(g)
    assert ops(folded) == ["gemm", "gemm", "gemm", "add"]
    assert len(folded.nodes[0].inputs) == 3  # the bias is the gemm's c
    x_val = rng.standard_normal((2, 7, 8)).astype(np.float32)
    np.testing.assert_allclose(
        run(folded, dev, {"x": x_val})["y"], run(g, dev, {"x": x_val})["y"], rtol=1e-5, atol=1e-5
    )


def test_activations_fuse_into_the_matrix_kernel_that_feeds_them(dev):
    rng = np.random.default_rng(3)
    b = GraphBuilder("ep")
    x = b.input("x", (1, 3, 8, 8), "float")
    y = b.silu(b.conv2d(x, b.param("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32))))
    flat = b.reshape(y, shape=(1, 144))
    h = b.gemm(flat, b.param("fc", rng.standard_normal((144, 6)).astype(np.float32)))
    z = b.gelu(h)
    b.output(b.add(b.relu(h), z), "z")  # h has two uses: neither activation may fuse
    g2 = b.gemm(z, b.param("fc2", rng.standard_normal((6, 5)).astype(np.float32)))
    b.output(b.tanh(g2), "t")
    g = b.build()
    fused = fuse_epilogues(g)
    assert ops(fused) == ["conv2d", "reshape", "gemm", "gelu", "relu", "add", "gemm"]
    epilogues = [n.attrs.get("epilogue") for n in fused.nodes if n.op in ("conv2d", "gemm")]
    assert epilogues == ["silu", "none", "tanh"]
    assert fused.outputs == g.outputs
    x_val = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    want, got = run(g, dev, {"x": x_val}), run(fused, dev, {"x": x_val})
    for name in g.outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("act", ["relu", "sigmoid"])
def test_an_activation_fuses_into_the_scale_shift_before_it(dev, act):
    """A pre-activation norm and its activation: one pass over x, bitwise the two kernels'
    result in float32; the activation of a scale_shift result read twice stays apart."""
    rng = np.random.default_rng(4)
    b = GraphBuilder("preact")
    x = b.input("x", (1, 4, 5, 5), "float")
    params = [rng.uniform(-2, 2, (4, 1, 1)).astype(np.float32) for _ in range(4)]
    s, t, s2, t2 = (b.param(f"p{i}", p) for i, p in enumerate(params))
    b.output(getattr(b, act)(b.scale_shift(x, s, t)), "y")
    twice = b.scale_shift(x, s2, t2)
    b.output(b.add(getattr(b, act)(twice), twice), "z")
    g = b.build()
    fused = fuse_epilogues(g)
    assert ops(fused) == ["scale_shift", "scale_shift", act, "add"]
    assert [n.attrs.get("epilogue", "none") for n in fused.nodes[:2]] == [act, "none"]
    inputs = {"x": rng.standard_normal((1, 4, 5, 5)).astype(np.float32)}
    want, got = run(g, dev, inputs), run(fused, dev, inputs)
    for name in g.outputs:
        assert got[name].tobytes() == want[name].tobytes()
    modelled = [sum(node_cost(h, n).time_s for n in h.nodes) for h in (g, fused)]
    assert modelled[1] < modelled[0]


def test_a_scale_or_shift_after_a_scale_shift_is_not_folded_as_into_a_conv():
    """Its epilogue makes it a kernel that absorbs an activation, not one with weights."""
    rng = np.random.default_rng(5)
    b = GraphBuilder("g")
    x = b.input("x", (1, 4, 5, 5), "float")
    s, t, u = (b.param(n, rng.uniform(-2, 2, (5,)).astype(np.float32)) for n in "stu")
    b.output(b.mul(b.scale_shift(x, s, t), u), "y")
    g = b.build()
    assert fold_scale_shift(g).dump() == g.dump()


def test_tanh_approximate_gelu_is_not_fused():
    b = GraphBuilder("ep")
    x = b.input("x", (2, 3), "float")
    w = b.param("w", np.ones((3, 3), np.float32))
    b.output(b.gelu(b.gemm(x, w), approximate="tanh"), "y")
    assert ops(fuse_epilogues(b.build())) == ["gemm", "gelu"]


def test_presets_run_different_pipelines():
    rng = np.random.default_rng(2)
    b = GraphBuilder("p")
    x = b.input("x", (2, 3), "float")
    w = b.param("w", rng.standard_normal((3, 3)).astype(np.float32))
    b.exp(x)
    b.output(b.gemm(x, b.transpose(w)), "y")
    inputs = {"x": rng.standard_normal((2, 3)).astype(np.float32)}
    with mnrt.Context() as ctx:
        o0 = ctx.compile(b, inputs, options={"option_json": "O0"})
        o2 = ctx.compile(b, inputs, options={"option_json": "O2", "float_dtype": "float"})
        kernels = [op for op in ops(o0.graph) if op != "relayout"]  # O0: legacy layout switches
        assert kernels == ["exp", "transpose", "gemm"] and ops(o2.graph) == ["gemm"]
        np.testing.assert_allclose(o0(inputs)["y"].cpu(), o2(inputs)["y"].cpu(), rtol=1e-6)


def test_a_scale_after_a_fused_activation_does_not_fold_into_the_weights():
    b = GraphBuilder("g")
    x = b.input("x", (2, 3), "float")
    y = b.gemm(x, b.param("w", np.ones((3, 4), np.float32)), epilogue="relu")
    b.output(b.mul(y, b.param("s", np.full(4, -1.0, np.float32))), "y")
    assert ops(fold_scale_shift(b.build())) == ["gemm", "mul"]


@pytest.mark.parametrize("gate_first", [False, True])
def test_x_times_its_sigmoid_is_one_silu_kernel_of_the_same_bits(dev, gate_first):
    """SiLU as PyTorch exports it (Sigmoid, Mul): two kernels, and the Mul's second read of
    x kept a mixed compile's widening out of every chain (EfficientNet-B0)."""
    b = GraphBuilder("g")
    x = b.input("x", (4, 16), "float")
    h = b.tanh(x)
    gate = b.sigmoid(h)
    b.output(b.mul(gate, h) if gate_first else b.mul(h, gate), "y")
    graph = b.build()
    fused = fuse_silu(graph)
    assert ops(fused) == ["tanh", "silu"]
    xs = np.random.default_rng(8).standard_normal((4, 16)).astype(np.float32) * 4
    got, want = run(fused, dev, {"x": xs})["y"], run(graph, dev, {"x": xs})["y"]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def _gelu_as_exported(b: GraphBuilder, x: str, form: str, root: float = np.sqrt(2.0)) -> str:
    """GELU of x as torch.onnx writes nn.GELU() ("erf": x * (erf(x / root) + 1) * 0.5), as
    transformers write it ("half_first": x * 0.5 * (1 + erf(x / root))), or GPT-2's tanh
    form ("tanh": x * 0.5 * (tanh(sqrt(2 / pi) * (x + x**3 * 0.044715)) + 1))."""

    def const(name, v):
        return b.param(f"gelu_{name}{len(b.graph.values)}", np.array(v, np.float32))

    if form == "tanh":
        cubed = b.mul(b.pow(x, const("three", 3.0)), const("k", 0.044715))
        inner = b.mul(b.add(x, cubed), const("c", np.sqrt(2.0 / np.pi)))
        return b.mul(b.mul(x, const("half", 0.5)), b.add(b.tanh(inner), const("one", 1.0)))
    term = b.erf(b.div(x, const("root", root)))
    if form == "half_first":
        return b.mul(b.mul(x, const("half", 0.5)), b.add(const("one", 1.0), term))
    return b.mul(b.mul(x, b.add(term, const("one", 1.0))), const("half", 0.5))


@pytest.mark.parametrize("form", ["erf", "half_first", "tanh"])
def test_gelu_as_exported_is_one_gelu_kernel_of_the_same_bits(dev, form):
    """Five to eight kernels (two chains or more at O3: x is read two or three times) become
    the one `gelu` kernel, which a gemm takes as its epilogue in the erf form: the MLPs of
    Swin-T, BERT, ViT and GPT-2."""
    b = GraphBuilder("g")
    x = b.input("x", (4, 16), "float")
    h = b.tanh(x)
    b.output(_gelu_as_exported(b, h, form), "y")
    graph = b.build()
    fused = fuse_gelu(graph)
    assert ops(fused) == ["tanh", "gelu"]
    assert fused.nodes[1].attrs.get("approximate", "none") == ("tanh" if form == "tanh" else "none")
    xs = np.random.default_rng(9).standard_normal((4, 16)).astype(np.float32) * 3
    got, want = run(fused, dev, {"x": xs})["y"], run(graph, dev, {"x": xs})["y"]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert ops(fuse_epilogues(fuse_gelu(_linear_gelu()))) == ["gemm"]


def _linear_gelu():
    rng = np.random.default_rng(10)
    b = GraphBuilder("mlp")
    x = b.input("x", (2, 5, 8), "float")
    h = b.gemm(x, b.param("w", rng.standard_normal((8, 6)).astype(np.float32)))
    b.output(_gelu_as_exported(b, h, "erf"), "y")
    return b.build()


def test_a_double_gelu_is_one_kernel_only_with_double_constants(dev):
    """In double, the kernel divides by double's sqrt(2): a model's float32 constant widened
    to double is another divisor, so that graph keeps its own kernels."""
    for root, fused in ((np.sqrt(2.0), True), (np.float64(np.float32(np.sqrt(2.0))), False)):
        b = GraphBuilder("g")
        x = b.input("x", (64,), "double")
        const = {"root": root, "one": 1.0, "half": 0.5}
        p = {k: b.param(k, np.array(v, np.float64)) for k, v in const.items()}
        term = b.add(b.erf(b.div(x, p["root"])), p["one"])
        b.output(b.mul(b.mul(x, term), p["half"]), "y")
        graph = b.build()
        assert ("gelu" in ops(fuse_gelu(graph))) is fused
        if fused:
            xs = {"x": np.random.default_rng(11).standard_normal(64) * 3}
            got, want = run(fuse_gelu(graph), dev, xs)["y"], run(graph, dev, xs)["y"]
            np.testing.assert_array_equal(got, want)


def test_a_gelu_that_is_not_quite_one_is_kept():
    """Its erf's argument scaled by another constant, an intermediate read elsewhere, or
    the halving of another value: each computes something else than gelu(x)."""
    b = GraphBuilder("g")
    x, other = b.input("x", (4,), "float"), b.input("o", (4,), "float")
    b.output(_gelu_as_exported(b, x, "erf", root=1.5), "scaled")
    term = b.erf(b.div(x, b.param("root", np.array(np.sqrt(2.0), np.float32))))
    b.output(b.mul(b.mul(x, b.add(term, b.param("one", np.array(1.0, np.float32)))),
                   b.param("half", np.array(0.5, np.float32))), "y")  # fmt: skip
    b.output(term, "erf")
    term2 = b.erf(b.div(x, b.param("root2", np.array(np.sqrt(2.0), np.float32))))
    b.output(b.mul(b.mul(other, b.param("half2", np.array(0.5, np.float32))),
                   b.add(b.param("one2", np.array(1.0, np.float32)), term2)), "z")  # fmt: skip
    graph = b.build()
    assert "gelu" not in ops(fuse_gelu(graph))


def _layernorm_as_exported(b: GraphBuilder, x: str, axes=(-1,), scale=None, bias=None) -> str:
    """LayerNormalization as exporters wrote it before opset 17: ReduceMean, Sub, Pow,
    ReduceMean, Add, Sqrt, Div, then Mul by `scale` and Add of `bias` where given."""

    def const(name, v):
        return b.param(f"ln_{name}{len(b.graph.values)}", np.array(v, np.float32))

    centred = b.sub(x, b.mean(x, axes=axes, keepdims=True))
    variance = b.mean(b.pow(centred, const("two", 2.0)), axes=axes, keepdims=True)
    y = b.div(centred, b.sqrt(b.add(variance, const("eps", 1e-5))))
    y = b.mul(y, const("scale", scale)) if scale is not None else y
    return b.add(const("bias", bias), y) if bias is not None else y


@pytest.mark.parametrize("params", ["none", "scale", "both"])
def test_layernorm_as_exported_is_one_layernorm_kernel_of_the_same_bits(dev, params):
    """Before opset 17 exporters wrote LayerNormalization out in nine ops; the centred x
    is read twice, so it took two chains at O3 (BERT's and GPT-2's older exports: two a
    layer)."""
    rng = np.random.default_rng(13)
    b = GraphBuilder("g")
    x = b.input("x", (3, 5, 16), "float")
    h = b.tanh(x)
    scale = rng.standard_normal(16) if params != "none" else None
    bias = rng.standard_normal(16) if params == "both" else None
    b.output(_layernorm_as_exported(b, h, scale=scale, bias=bias), "y")
    graph = b.build()
    fused = fuse_layernorm(graph)
    assert ops(fused) == ["tanh", "layernorm"]
    assert len(fused.nodes[1].inputs) == {"none": 1, "scale": 2, "both": 3}[params]
    xs = {"x": rng.standard_normal((3, 5, 16)).astype(np.float32) * 3}
    got, want = run(fused, dev, xs)["y"], run(graph, dev, xs)["y"]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_a_layernorm_that_is_not_quite_one_is_kept():
    """Over a leading axis, with the centred x read elsewhere too, or squared by 3."""
    b = GraphBuilder("g")
    x = b.input("x", (4, 8), "float")
    b.output(_layernorm_as_exported(b, x, axes=(0,)), "leading")
    centred = b.sub(x, b.mean(x, axes=(-1,), keepdims=True))
    variance = b.mean(b.pow(centred, b.param("two", np.array(2.0, np.float32))), axes=(-1,),
                      keepdims=True)  # fmt: skip
    eps = b.param("eps", np.array(1e-5, np.float32))
    b.output(b.div(centred, b.sqrt(b.add(variance, eps))), "y")
    b.output(b.relu(centred), "centred")
    cubed = b.sub(x, b.mean(x, axes=(-1,), keepdims=True))
    spread = b.mean(b.pow(cubed, b.param("three", np.array(3.0, np.float32))), axes=(-1,),
                    keepdims=True)  # fmt: skip
    b.output(b.div(cubed, b.sqrt(b.add(spread, eps))), "z")
    graph = b.build()
    assert "layernorm" not in ops(fuse_layernorm(graph))


def _rolled(b: GraphBuilder, x: str, k: int, axis: int, n: int) -> str:
    """torch.roll(x, n - k, axis) as its ONNX export writes it: concat(x[k:], x[:k])."""
    tail = b.slice(x, starts=(k,), ends=(2**62,), axes=(axis,))
    return b.concat(tail, b.slice(x, starts=(0,), ends=(k - n,), axes=(axis,)), axis=axis)


def test_torch_roll_as_exported_is_one_roll_kernel_of_the_same_bits(dev):
    """Swin Transformer's shifted windows: torch.roll along H, then W, each two slices and
    a concat in ONNX (six kernels); one roll along both. Ends given past the axis or from
    its end, as exporters write them, count."""
    b = GraphBuilder("g")
    x = b.input("x", (2, 6, 5, 3), "float")
    h = _rolled(b, b.tanh(x), 2, 1, 6)
    b.output(b.relu(_rolled(b, h, 4, -2, 5)), "y")
    graph = b.build()
    fused = fuse_rolls(graph)
    assert ops(fused) == ["tanh", "roll", "relu"]
    assert fused.nodes[1].attrs["shifts"] == (4, 1) and fused.nodes[1].attrs["axes"] == (1, 2)
    xs = {"x": np.random.default_rng(12).standard_normal((2, 6, 5, 3)).astype(np.float32)}
    got, want = run(fused, dev, xs)["y"], run(graph, dev, xs)["y"]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, np.maximum(np.roll(np.tanh(xs["x"]), (4, 1), (1, 2)), 0))


def test_concatenated_slices_that_are_no_roll_are_kept():
    b = GraphBuilder("g")
    x = b.input("x", (6, 4), "float")
    b.output(
        b.concat(b.slice(x, starts=(2,), ends=(6,)), b.slice(x, starts=(0,), ends=(1,)), axis=0),
        "gap",
    )  # x[2:], x[:1]: a row left out
    b.output(
        b.concat(b.slice(x, starts=(0,), ends=(2,)), b.slice(x, starts=(2,), ends=(6,)), axis=0),
        "in_order",
    )  # x[:2], x[2:]: x itself
    b.output(
        b.concat(
            b.slice(x, starts=(2, 0), ends=(6, 3), axes=(0, 1)),
            b.slice(x, starts=(0, 0), ends=(2, 3), axes=(0, 1)),
            axis=0,
        ),
        "narrow",
    )
    read = b.slice(x, starts=(3,), ends=(6,))
    b.output(b.concat(read, b.slice(x, starts=(0,), ends=(3,)), axis=0), "shared")
    b.output(read, "read")  # the slice is read elsewhere too
    pieces = [b.slice(x, starts=(4,), ends=(6,)), b.slice(x, starts=(0,), ends=(4,))]
    b.output(b.concat(*pieces, b.slice(x, starts=(0,), ends=(1,)), axis=0), "three")
    graph = b.build()
    assert "roll" not in ops(fuse_rolls(graph))


def test_a_sigmoid_read_elsewhere_or_times_another_value_is_kept():
    b = GraphBuilder("g")
    x, other = b.input("x", (4,), "float"), b.input("o", (4,), "float")
    gate = b.sigmoid(x)
    b.output(b.mul(x, gate), "y")
    b.output(gate, "g")  # the sigmoid is an output too
    b.output(b.mul(other, b.sigmoid(x)), "z")  # not x's own sigmoid
    graph = common_subexpressions(b.build())
    assert ops(fuse_silu(graph)) == ops(graph)


def test_a_conv_and_its_silu_are_one_kernel_from_o2_on(ctx):
    """EfficientNet's conv, BatchNormalization and SiLU: one conv2d with a silu epilogue."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(9)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "t", "m", "v"], ["n"]),
        helper.make_node("Sigmoid", ["n"], ["g"]),
        helper.make_node("Mul", ["n", "g"], ["y"]),
    ]
    inits = {
        "w": rng.standard_normal((4, 3, 3, 3)),
        "s": rng.random(4) + 0.5,
        "t": rng.standard_normal(4),
        "m": rng.standard_normal(4),
        "v": rng.random(4) + 0.5,
    }
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    outputs = {}
    for preset in ("O1", "O2"):
        compiled = ctx.compile(
            model, {"x": x}, options={"option_json": preset, "float_dtype": "float"}
        )
        outputs[preset] = compiled({"x": x})["y"].cpu()
        if preset == "O2":
            (conv,) = compiled.graph.nodes
            assert conv.op == "conv2d" and conv.attrs["epilogue"] == "silu"
    np.testing.assert_allclose(outputs["O2"], outputs["O1"], rtol=1e-5, atol=1e-6)


def _tail_graph(extra_output: bool = False, second_reader: bool = False):
    """x -> conv2d -> cast -> max_pool2d -> global_avg_pool2d -> reshape -> softmax, as mixed
    precision leaves a CNN's tail; optionally the pooled value is also a graph output or
    also read by an exp."""
    rng = np.random.default_rng(5)
    b = GraphBuilder("tail")
    x = b.input("x", (2, 3, 8, 8), "half")
    h = b.conv2d(x, b.param("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "half"))
    h = b.max_pool2d(b.cast(h, to="float"), kernel=(2, 2))
    if extra_output:
        h = b.output(h, "pooled")
    elif second_reader:
        b.output(b.exp(h), "side")
    h = b.reshape(b.global_avg_pool2d(h), shape=(2, 4))
    b.output(b.softmax(h), "probs")
    x_val = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    return b.build(), {"x": x_val}


def test_fuse_chains_merges_a_run_of_vector_kernels_into_one_launch(dev):
    g, inputs = _tail_graph()
    fused = fuse_chains(g)
    assert ops(fused) == ["conv2d", "chain"]
    assert fused.dump().splitlines()[-2:] == [
        "  %probs: float[2x4] @dram = chain(%conv2d_0) {steps='["
        '{"op":"cast","attrs":{"to":"float"}},{"op":"max_pool2d","attrs":{"kernel":[2,2]}},'
        '{"op":"global_avg_pool2d"},{"op":"reshape","attrs":{"shape":[2,4]}},'
        '{"op":"softmax"}]' + "', x_dtype='half', operand_dtypes='', widen='', tap=-1, lm_room=-1}",
        "  return %probs",
    ]
    assert fused.nodes[-1].name == "cast1+max_pool2d2+global_avg_pool2d3+reshape4+softmax5"
    want, got = run(g, dev, inputs), run(fused, dev, inputs)
    assert got["probs"].tobytes() == want["probs"].tobytes()


def test_a_value_read_elsewhere_too_is_the_tap_of_the_chain_that_goes_on(dev):
    """The pooled value is a graph output, or read by an exp too: the chain that makes it
    writes it out as its second output (its tap) and goes on to the softmax (with the exp,
    its first reader, where the exp reads it), instead of ending there."""
    for kwargs in ({"extra_output": True}, {"second_reader": True}):
        g, inputs = _tail_graph(**kwargs)
        fused = fuse_chains(g)
        chains = [n for n in fused.nodes if n.op == "chain"]
        pooled = "pooled" if "extra_output" in kwargs else chains[0].outputs[1]
        steps = [[s["op"] for s in json.loads(c.attrs["steps"])] for c in chains]
        if "extra_output" in kwargs:
            assert ops(fused) == ["conv2d", "chain"]
            assert steps == [["cast", "max_pool2d", "global_avg_pool2d", "reshape", "softmax"]]
        else:
            assert ops(fused) == ["conv2d", "chain", "chain"]
            assert steps == [
                ["cast", "max_pool2d", "exp"],
                ["global_avg_pool2d", "reshape", "softmax"],
            ]
            assert chains[1].inputs == [pooled]
        assert chains[0].attrs["tap"] == 1 and chains[0].outputs[1] == pooled
        assert fused.outputs == g.outputs
        want, got = run(g, dev, inputs), run(fused, dev, inputs)
        for name in g.outputs:
            assert got[name].tobytes() == want[name].tobytes()


def test_a_mixed_residual_block_rounds_its_result_for_the_next_convs_in_its_own_chain(dev):
    """Two basic residual blocks at O3, mixed: each block's result is read in float by the
    next block's skip add and, rounded to half, by its conv. That rounding was a kernel of
    its own (ResNet-50: 13 of 92 kernels, 10% of the modelled kernel time); now the chain
    that ends the block writes the float result out and goes on to round it."""
    rng = np.random.default_rng(9)
    b = GraphBuilder("res")
    h = b.relu(b.input("x", (1, 8, 6, 6), "float"))
    for i in range(2):
        w = b.param(f"w{i}", rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2)
        h = b.relu(b.add(b.conv2d(h, w, padding=(1, 1, 1, 1)), h))
    b.output(b.conv2d(h, b.param("w2", rng.standard_normal((4, 8, 1, 1)).astype(np.float32))), "y")
    mixed = cancel_round_trip_casts(common_subexpressions(apply_float_dtype(b.build(), "mixed")))
    fused = fuse_chains(mixed)
    assert ops(fused) == ["chain", "conv2d", "chain", "conv2d", "chain", "conv2d", "cast"]
    taps = [n for n in fused.nodes if n.op == "chain" and n.attrs["tap"] != -1]
    # the input's relu and the first block's end (the second's only the last conv reads)
    assert len(taps) == 2
    for node in taps:
        written = [fused.values[n].dtype.name for n in node.outputs]
        assert written == ["half", "float"] and json.loads(node.attrs["steps"])[-1]["op"] == "cast"
    xs = {"x": rng.standard_normal((1, 8, 6, 6)).astype(np.float32)}
    assert run(fused, dev, xs)["y"].tobytes() == run(mixed, dev, xs)["y"].tobytes()


def test_a_half_skip_connection_is_widened_by_the_chain_that_adds_it(dev):
    """Inverted residual blocks (MobileNet v2's) at O3, mixed: the conv before them gives a
    half result that the first block's convs read as it is and its skip add reads widened.
    That widening was a cast kernel of its own (MobileNet v2: 5 of 105 kernels); now the
    chain that adds it widens it as it loads it. (The second block's skip is the first
    block's float result, its chain's tap.)"""
    rng = np.random.default_rng(10)
    b = GraphBuilder("inverted")
    h = b.conv2d(b.input("x", (1, 4, 6, 6), "float"), b.param("w", _w(rng, 8, 4)))
    for i in range(2):
        wide = b.relu(b.conv2d(h, b.param(f"e{i}", _w(rng, 16, 8))))
        h = b.add(b.conv2d(wide, b.param(f"p{i}", _w(rng, 8, 16))), h)
    b.output(h, "y")
    mixed = cancel_round_trip_casts(common_subexpressions(apply_float_dtype(b.build(), "mixed")))
    widening = [n for n in mixed.nodes if n.op == "cast" and n.attrs["to"] == "float"]
    fused = fuse_chains(mixed)
    assert not [n for n in fused.nodes if n.op == "cast" and n.attrs["to"] == "float"]
    assert len(widening) == 5  # each conv's result
    loads = [n for n in fused.nodes if n.op == "chain" and n.attrs["widen"].strip(",")]
    (load,) = loads
    assert [fused.values[n].dtype.name for n in load.inputs[1:]] == ["half"]
    assert load.attrs["widen"] == ",float"  # x as given, the skip widened
    xs = {"x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32)}
    assert run(fused, dev, xs)["y"].tobytes() == run(mixed, dev, xs)["y"].tobytes()


def test_a_join_continues_the_run_that_saves_a_launch_not_a_lone_widening(dev):
    """Masked attention scores at O3, mixed: a half product, widened, plus a mask (a where
    of a bool input), then softmax. The add reads two runs' ends, the widening's and the
    mask's, and continues one. Continuing the widening left the mask a kernel of its own;
    continuing the mask leaves the widening, which the chain then loads widened: one
    launch fewer (HF GPT-2 at O3 mixed: 30 kernels, 61.0 us modelled, now 28, 57.0 us)."""
    rng = np.random.default_rng(3)
    b = GraphBuilder("attention")
    q = b.input("q", (16, 8), "float")
    keep = b.input("keep", (16, 16), "bool")
    k = b.param("k", rng.standard_normal((8, 16)).astype(np.float32))
    low = b.param("low", np.full(1, -1e4, np.float32))
    mask = b.where(keep, b.param("zero", np.zeros(1, np.float32)), low)
    b.output(b.softmax(b.add(b.gemm(q, k), mask)), "y")
    mixed = cancel_round_trip_casts(common_subexpressions(apply_float_dtype(b.build(), "mixed")))
    fused = fuse_chains(mixed)
    assert ops(fused) == ["cast", "gemm", "chain"]  # q rounded to half, the product, the rest
    chain = fused.nodes[-1]
    assert [s["op"] for s in json.loads(chain.attrs["steps"])] == ["where", "add", "softmax"]
    assert chain.attrs["widen"] == ",,,float"  # keep, zero, low as given; the scores widened
    assert graph_cost(fused).time_s < graph_cost(mixed).time_s
    xs = {
        "q": rng.standard_normal((16, 8)).astype(np.float32),
        "keep": np.tril(np.ones((16, 16), bool)),
    }
    assert run(fused, dev, xs)["y"].tobytes() == run(mixed, dev, xs)["y"].tobytes()


def test_a_widening_read_twice_is_no_tap_of_the_chain_that_reads_it(dev):
    """A hardswish of a half conv's widened result, then squeeze-excite (MobileNet v3's
    block at O3, mixed): the widening is read twice, by the hardswish's first step and its
    last. Taken into the hardswish's run as its tap, it used the run's one tap, so the
    pooling after the hardswish, whose result the excite scaling reads too, began a chain
    of its own. The widening stays out of the run (the chain loads it widened) and the
    hardswish's result is the tap: one launch fewer (torchvision's MobileNet v3 small at O3
    mixed: 91 kernels, 193.8 us modelled; now 83, 177.8 us, below O3 float's 188.9 us)."""
    rng = np.random.default_rng(4)
    b = GraphBuilder("hardswish")

    def conv(h, name):
        return b.conv2d(h, b.param(name, rng.standard_normal((8, 8, 1, 1)).astype(np.float32)))

    def k(name, value):
        return b.param(name, np.full(1, value, np.float32))

    c = conv(b.input("x", (1, 8, 4, 4), "float"), "w")
    gate = b.add(b.mul(c, k("sixth", 1 / 6)), k("half", 0.5))
    h = b.mul(c, b.minimum(b.maximum(gate, k("zero", 0.0)), k("one", 1.0)))
    squeeze = conv(b.global_avg_pool2d(h), "v")
    b.output(b.mul(h, b.sigmoid(squeeze)), "y")
    mixed = cancel_round_trip_casts(common_subexpressions(apply_float_dtype(b.build(), "mixed")))
    fused = fuse_chains(mixed)
    assert ops(fused) == ["cast", "conv2d", "chain", "conv2d", "chain"]
    hardswish = fused.nodes[2]
    steps = [s["op"] for s in json.loads(hardswish.attrs["steps"])]
    assert steps == ["mul", "add", "maximum", "minimum", "mul", "global_avg_pool2d", "cast"]
    assert hardswish.attrs["tap"] == 4 and hardswish.attrs["widen"] == "float,,,,"
    xs = {"x": rng.standard_normal((1, 8, 4, 4)).astype(np.float32)}
    assert run(fused, dev, xs)["y"].tobytes() == run(mixed, dev, xs)["y"].tobytes()


def _w(rng: np.random.Generator, out: int, into: int) -> np.ndarray:
    return (rng.standard_normal((out, into, 1, 1)) / np.sqrt(into)).astype(np.float32)


def test_a_value_a_later_step_of_its_chain_reads_again_is_no_tap(dev):
    """h = relu(x) read by an exp and again by the add after it: a chain of all three would
    read its own tap, so the chain that makes h ends with it (a lone relu stays a kernel) and
    the next takes it as its input."""
    b = GraphBuilder("again")
    x = b.input("x", (4, 8), "float")
    h = b.relu(b.neg(x))
    b.output(b.add(b.exp(h), h), "y")
    g = b.build()
    fused = fuse_chains(g)
    assert ops(fused) == ["chain", "chain"]
    assert all("tap" not in n.attrs or n.attrs["tap"] == -1 for n in fused.nodes)
    assert [len(n.outputs) for n in fused.nodes] == [1, 1]
    inputs = {"x": np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)}
    assert run(fused, dev, inputs)["y"].tobytes() == run(g, dev, inputs)["y"].tobytes()


def test_a_step_may_take_the_chains_input_again_and_a_value_read_twice_ends_a_run(dev):
    b = GraphBuilder("g")
    x = b.input("x", (4, 8), "float")
    h = b.add(b.relu(x), x)  # relu, then an add of it and the chain's own input
    h = b.tanh(b.mul(h, h))  # h read twice by one mul: a run of its own starts there
    b.output(h, "y")
    g = b.build()
    fused = fuse_chains(g)
    assert ops(fused) == ["chain", "chain"]
    assert [json.loads(n.attrs["steps"]) for n in fused.nodes] == [
        [{"op": "relu"}, {"op": "add", "with": [0]}],
        [{"op": "mul", "with": [0]}, {"op": "tanh"}],
    ]
    assert [n.inputs for n in fused.nodes] == [["x"], [fused.nodes[0].outputs[0]]]
    inputs = {x: np.linspace(-2, 2, 32, dtype=np.float32).reshape(4, 8)}
    assert run(fused, dev, inputs)["y"].tobytes() == run(g, dev, inputs)["y"].tobytes()
    b = GraphBuilder("g")
    x = b.input("x", (4, 8), "float")
    b.output(b.exp(b.neg(b.add(b.tanh(b.relu(x)), x))), "y")
    once = fuse_chains(b.build())
    assert ops(once) == ["chain"]
    assert fuse_chains(once).dump() == once.dump()  # a chain is never a step of another


@pytest.mark.parametrize("float_dtype", ["float", "mixed", "half"])
def test_batch_norm_then_relu_and_a_residual_add_become_chains_with_operands(float_dtype):
    """DenseNet's pre-activation (BatchNormalization, a scale_shift by per-channel
    parameters with the Relu after it its epilogue) and a residual block's end (an add of
    the skip connection, then Relu) each fuse into one chain whose operands are the
    parameters or the skip, and then both into one with the conv between them (its prologue
    and epilogue); the results are bitwise those of the kernels one by one (at mixed, one
    rounding from O2's, whose conv stores its float result), and the modelled time less.
    (128 channels: at mixed, O2 runs a conv this size in half, a smaller one in float: see
    compiler/precision.py.)"""
    g, inputs = preact_block((2, 128, 14, 14))
    with mnrt.Context() as ctx:
        per = {
            p: ctx.compile(g, inputs, options={"option_json": p, "float_dtype": float_dtype})
            for p in ("O2", "O3")
        }
        chains = [n for n in per["O3"].graph.nodes if n.op == "chain"]
        steps = [[s["op"] for s in json.loads(n.attrs["steps"])] for n in chains]
        kernels = [[op for op in s if op != "cast"] for s in steps]
        assert kernels == [["scale_shift", "conv2d", "add", "relu"]]  # the ReLU its epilogue
        assert len(chains[0].inputs) == 5  # x, scale, shift, the conv's weight, the skip
        want, got = per["O2"](inputs)["y"].cpu(), per["O3"](inputs)["y"].cpu()
        if float_dtype == "mixed":
            # O2's conv stores its float accumulator (products_write_float), which the
            # chain rounds to half as the conv kernel alone at O3 would: one rounding apart
            np.testing.assert_allclose(got, want, rtol=2**-9, atol=2**-9 * np.abs(want).max())
        else:
            assert got.tobytes() == want.tobytes()
        time = {
            p: c.lowered.program.plan(c.lowered.bindings).modelled.time_s for p, c in per.items()
        }
        assert time["O3"] < time["O2"]


def test_o3_and_o4_fuse_chains_and_the_lower_presets_do_not():
    g, inputs = _tail_graph()
    with mnrt.Context() as ctx:
        per = {
            p: ctx.compile(g, inputs, options={"option_json": p, "float_dtype": "float"})
            for p in ("O2", "O3", "O4")
        }
        assert "chain" not in ops(per["O2"].graph)
        assert ops(per["O3"].graph) == ops(per["O4"].graph) == ["conv2d", "chain"]
        want = per["O2"](inputs)["probs"].cpu()
        for p in ("O3", "O4"):
            assert per[p](inputs)["probs"].cpu().tobytes() == want.tobytes()


def test_a_run_longer_than_a_chain_holds_becomes_several_chains(dev):
    from mnrt.device.kernels.chain import MAX_STEPS

    b = GraphBuilder("long")
    h = x = b.input("x", (3, 5), "float")
    for i in range(MAX_STEPS + 6):
        h = b.tanh(h) if i % 2 else b.neg(h)
    b.output(h, "y")
    g = b.build()
    fused = fuse_chains(g)
    assert ops(fused) == ["chain", "chain"]
    assert [len(json.loads(n.attrs["steps"])) for n in fused.nodes] == [MAX_STEPS, 6]
    inputs = {x: np.linspace(-2, 2, 15, dtype=np.float32).reshape(3, 5)}
    assert run(fused, dev, inputs)["y"].tobytes() == run(g, dev, inputs)["y"].tobytes()


@st.composite
def _vector_dags(draw):
    """Random DAGs of vector kernels (unary, and joins of two values or of a value and a
    parameter broadcast along a row or a column), a GEMM now and then, and outputs along
    the way: what fuse_chains meets in real models, at random."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    n = draw(st.sampled_from([3, 8]))
    b = GraphBuilder("dag")
    vals = [b.input("x", (n, n), "float")]
    params: dict[int, str] = {}

    def param(k: int) -> str:  # made when first read: a parameter nothing reads is not lowered
        if k not in params:
            shape = [(n, 1), (1, n), (n, n)][k]
            params[k] = b.param(f"p{k}", rng.uniform(0.5, 1.5, shape).astype(np.float32))
        return params[k]

    unary = (b.tanh, b.relu, b.neg, b.exp, b.sigmoid)
    binary = (b.add, b.mul, b.sub, b.maximum)
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["unary", "join", "param", "param", "gemm"]))
        a = vals[draw(st.integers(0, len(vals) - 1))]
        if kind == "unary":
            v = draw(st.sampled_from(unary))(a)
        elif kind == "gemm":
            v = b.gemm(a, param(2))
        else:
            other = (
                vals[draw(st.integers(0, len(vals) - 1))]
                if kind == "join"
                else param(draw(st.integers(0, 2)))
            )
            p, q = (a, other) if draw(st.booleans()) else (other, a)
            v = draw(st.sampled_from(binary))(p, q)
        vals.append(v)
    b.output(vals[-1], "y")
    if len(vals) > 3 and draw(st.booleans()):
        b.output(vals[len(vals) // 2], "z")
    x = rng.standard_normal((n, n)).astype(np.float32)
    return b.build(), {"x": x}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_vector_dags(), st.sampled_from(["float", "mixed"]))
def test_fuse_chains_on_random_graphs_keeps_every_result_bitwise(case, float_dtype):
    """Mixed: the GEMMs in half, casts into and out of each, which runs start or end."""
    graph, inputs = case
    if float_dtype == "mixed":
        graph = cancel_round_trip_casts(apply_float_dtype(graph, "mixed"))
    fused = fuse_chains(graph)
    fused.verify()
    assert fused.outputs == graph.outputs
    assert fuse_chains(fused).dump() == fused.dump()
    with mnrt.open_device("auto") as dev:
        want, got = run(graph, dev, inputs), run(fused, dev, inputs)
    for name in graph.outputs:
        assert got[name].tobytes() == want[name].tobytes(), name
