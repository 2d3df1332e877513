"""The ONNX frontend's transformer ops: Attention, LinearAttention, FlexAttention,
RotaryEmbedding, RMSNormalization and SwiGLU, against ONNX's node cases (generated from the
installed wheel) and hand-built models checked with ONNX's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import onnx_suite  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import mnrt  # noqa: E402
from mnrt.compiler.onnx import InvalidModelError, UnsupportedModelError  # noqa: E402

F, F16, I64, B = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.BOOL
RNG = np.random.default_rng(0)

# Float16 cases are computed in float, as float_dtype='float' computes every float16 model;
# ONNX's expected outputs round every step of the attention to float16 (including its
# inputs' scaling by sqrt(scale)) and differ from the exact result by up to about one
# float16 ulp, more than the cases' rtol of 1e-3 allows where Y is small. They are checked
# against the exact result at the case's tolerances, and against ONNX's own within
# float16's epsilon at the output's scale.
F16_EPS = float(np.finfo(np.float16).eps)
# Bfloat16 cases run in bfloat16 (float_dtype leaves it as the model has it), rounding at
# each kernel's output as ONNX's reference rounds at each of its numpy steps; the cases'
# rtol of 1e-3 is finer than bfloat16 resolves (one step: 2**-8 to 2**-7 of a value). They
# are checked against the exact result and ONNX's own within one step at the output's scale.
BF16_STEP = 2.0**-7


@pytest.fixture(scope="module")
def ctx():
    with mnrt.Context(mnrt.MNDevice("mncore2:auto")) as c:
        yield c


def node_cases(module: str) -> list:
    """The node cases (not their _expanded function bodies) of one case module of
    onnx.backend.test.case.node."""
    return [c for c in onnx_suite.module_cases(module) if "_expanded" not in c.name]


def run(ctx, model, feeds: dict[str, np.ndarray], precision: str = "float") -> list[np.ndarray]:
    compiled = ctx.compile(model, feeds, options={"float_dtype": precision})
    got = compiled(feeds)
    return [got[o.name].cpu() for o in model.graph.output]


def differences(case, got: list[np.ndarray], expected: list) -> list[str]:
    """Each output that differs from the case's in shape or beyond its rtol/atol (NaN
    matching NaN); float outputs come back in float32, as float_dtype='float' computes."""
    bad = []
    for name, g, w in zip([o.name for o in case.model.graph.output], got, expected, strict=True):
        w = np.asarray(w)
        if g.shape != w.shape or g.dtype != np.float32:
            bad.append(f"{name}: {g.dtype}{g.shape}, expected {w.dtype}{w.shape}")
        elif not np.allclose(g, w.astype(np.float64), rtol=case.rtol, atol=case.atol,
                             equal_nan=True):  # fmt: skip
            bad.append(f"{name}: max abs error {np.nanmax(np.abs(g - w.astype(np.float64)))}")
    return bad


def bfloat16_differences(case, feeds: dict, got: list[np.ndarray], expected: list) -> list[str]:
    """Each output of a bfloat16 case farther than one bfloat16 step at its scale from the
    exact result (ONNX's reference evaluator on its inputs widened to float64) or from
    ONNX's bfloat16 expected output."""
    wide = {k: v.astype(np.float64) if v.dtype.name == "bfloat16" else v for k, v in feeds.items()}
    exact = ReferenceEvaluator(case.model).run(None, wide)
    bad = []
    for name, g, e, w in zip([o.name for o in case.model.graph.output], got, exact, expected,
                             strict=True):  # fmt: skip
        for what, want in (("the exact result", e), ("ONNX's bfloat16", w)):
            want = np.asarray(want, np.float64)
            step = BF16_STEP * max(1.0, float(np.nanmax(np.abs(want), initial=0.0)))
            if not np.allclose(g, want, rtol=0, atol=step, equal_nan=True):
                bad.append(f"{name}: max abs error {np.nanmax(np.abs(g - want))} from {what}")
    return bad


def float16_differences(case, feeds: dict, got: list[np.ndarray], expected: list) -> list[str]:
    """A float16 case's `differences` from the exact result (ONNX's reference evaluator on
    its inputs widened to float64), and each output farther from ONNX's float16 expected
    one than float16's epsilon at its scale."""
    wide = {k: v.astype(np.float64) if v.dtype == np.float16 else v for k, v in feeds.items()}
    bad = differences(case, got, ReferenceEvaluator(case.model).run(None, wide))
    for name, g, w in zip([o.name for o in case.model.graph.output], got, expected, strict=True):
        w = np.asarray(w, np.float64)
        scale = max(1.0, float(np.nanmax(np.abs(w), initial=0.0)))
        if not np.allclose(g, w, rtol=0, atol=F16_EPS * scale, equal_nan=True):
            bad.append(f"{name}: max abs error {np.nanmax(np.abs(g - w))} from ONNX's float16")
    return bad


MODULES = ["attention", "linear_attention", "flexattention", "rotaryembedding", "rmsnormalization",
           "swiglu"]  # fmt: skip


@pytest.mark.parametrize("module", MODULES)
def test_node_cases_pass_or_are_refused_by_name(ctx, module):
    failures, passed = [], 0
    for case in node_cases(module):
        graph = case.model.graph
        inits = {i.name for i in graph.initializer}
        names = [i.name for i in graph.input if i.name not in inits]
        try:
            for inputs, expected in case.data_sets:
                feeds = dict(zip(names, (onnx_suite.array(x) for x in inputs)))
                got = run(ctx, case.model, feeds)
                dtypes = {np.asarray(x).dtype.name for x in feeds.values()}
                if "float16" in dtypes:
                    bad = float16_differences(case, feeds, got, expected)
                elif "bfloat16" in dtypes:
                    bad = bfloat16_differences(case, feeds, got, expected)
                else:
                    bad = differences(case, got, expected)
                if bad:
                    failures.append(f"{case.name}: wrong: {bad}")
                    break
            else:
                passed += 1
        except mnrt.MnrtError as e:
            failures.append(f"{case.name}: refused: {e}")
    assert not failures, "\n".join(failures)
    assert passed > 0


def make_model(nodes, inputs, outputs, opset=24):
    graph = helper.make_graph(nodes, "t", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def check(ctx, model, feeds, rtol=1e-5, atol=1e-6):
    expected = ReferenceEvaluator(model).run(None, feeds)
    got = run(ctx, model, feeds)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
    return got


def test_attention_3d_gqa_causal_with_cache_and_every_output(ctx):
    node = helper.make_node(
        "Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "present_k", "present_v", "qk"],
        is_causal=1, q_num_heads=6, kv_num_heads=2, softcap=4.0, qk_matmul_output_mode=2,
    )  # fmt: skip
    model = make_model(
        [node],
        [vi("q", F, (2, 3, 48)), vi("k", F, (2, 3, 16)), vi("v", F, (2, 3, 10)),
         vi("pk", F, (2, 2, 5, 8)), vi("pv", F, (2, 2, 5, 5))],
        [vi("y", F, None), vi("present_k", F, None), vi("present_v", F, None), vi("qk", F, None)],
    )  # fmt: skip
    feeds = {"q": randn(2, 3, 48), "k": randn(2, 3, 16), "v": randn(2, 3, 10),
             "pk": randn(2, 2, 5, 8), "pv": randn(2, 2, 5, 5)}  # fmt: skip
    y, pk, pv, qk = check(ctx, model, feeds)
    assert y.shape == (2, 3, 30) and pk.shape == (2, 2, 8, 8) and pv.shape == (2, 2, 8, 5)
    assert np.isneginf(qk[0, 0, 0, 6:]).all()  # the causal frontier is past the cache


def test_attention_nonpad_kv_seqlen_is_read_at_each_call(ctx):
    """The padding and the causal offset come from the input's values at run time: a second
    call with other lengths gives the reference's answer for those."""
    node = helper.make_node("Attention", ["q", "k", "v", "", "", "", "n"], ["y"], is_causal=1)
    model = make_model(
        [node],
        [vi("q", F, (2, 2, 2, 4)), vi("k", F, (2, 2, 5, 4)), vi("v", F, (2, 2, 5, 4)),
         vi("n", I64, (2,))],
        [vi("y", F, None)],
    )  # fmt: skip
    feeds = {"q": randn(2, 2, 2, 4), "k": randn(2, 2, 5, 4), "v": randn(2, 2, 5, 4)}
    compiled = ctx.compile(model, {**feeds, "n": np.array([5, 3])},
                           options={"float_dtype": "float"})  # fmt: skip
    for lengths in ([5, 3], [2, 4], [1, 5]):
        n = np.array(lengths, np.int64)
        want = ReferenceEvaluator(model).run(None, {**feeds, "n": n})[0]
        got = compiled({**feeds, "n": n})["y"].cpu()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_attention_fully_masked_rows_are_zero_not_nan(ctx):
    node = helper.make_node("Attention", ["q", "k", "v", "m"], ["y", "", "", "p"],
                            qk_matmul_output_mode=3)  # fmt: skip
    model = make_model(
        [node],
        [vi("q", F, (1, 1, 3, 4)), vi("k", F, (1, 1, 3, 4)), vi("v", F, (1, 1, 3, 4)),
         vi("m", B, (3, 2))],
        [vi("y", F, None), vi("p", F, None)],
    )  # fmt: skip
    mask = np.array([[True, False], [False, False], [True, True]])  # padded to 3 keys
    feeds = {"q": randn(1, 1, 3, 4), "k": randn(1, 1, 3, 4), "v": randn(1, 1, 3, 4), "m": mask}
    y, p = check(ctx, model, feeds)
    assert (y[0, 0, 1] == 0).all() and (p[0, 0, 1] == 0).all()
    np.testing.assert_allclose(p[0, 0, 0], [1, 0, 0])


@pytest.mark.parametrize(
    ("dtype", "attrs", "mask", "reason"),
    [
        (F, {"softcap": 2.0}, None, "mode 0 with softcap"),
        (F, {}, TensorProto.INT32, "attn_mask of int32"),
        (F, {"scale": -1.0}, None, "scale=-1.0"),
    ],
)
def test_attention_refusals_name_what_is_unsupported(dtype, attrs, mask, reason):
    inputs = [vi(n, dtype, (1, 2, 3, 4)) for n in "qkv"]
    if mask is not None:
        inputs.append(vi("m", mask, (3, 3)))
    node = helper.make_node("Attention", ["q", "k", "v", *(["m"] if mask else [])],
                            ["y", "", "", "qk"], **attrs)  # fmt: skip
    model = make_model([node], inputs, [vi("y", dtype, None), vi("qk", dtype, None)])
    with pytest.raises(UnsupportedModelError, match=reason):
        mnrt.compiler.from_onnx(model)


def test_linear_attention_state_carries_over_between_calls(ctx):
    """gated_delta with grouped query heads: two calls of 3 steps, the second fed the first's
    present_state, give the reference's result for all 6 steps at once."""

    def model(t):
        node = helper.make_node(
            "LinearAttention", ["q", "k", "v", "s0", "g", "beta"], ["y", "s"],
            q_num_heads=4, kv_num_heads=2, update_rule="gated_delta",
        )  # fmt: skip
        return make_model(
            [node],
            [vi("q", F, (1, t, 12)), vi("k", F, (1, t, 6)), vi("v", F, (1, t, 10)),
             vi("s0", F, (1, 2, 3, 5)), vi("g", F, (1, t, 6)), vi("beta", F, (1, t, 2))],
            [vi("y", F, None), vi("s", F, None)],
            opset=27,
        )  # fmt: skip

    seq = {"q": randn(1, 6, 12), "k": randn(1, 6, 6) / 2, "v": randn(1, 6, 10),
           "g": -np.abs(randn(1, 6, 6)), "beta": np.abs(randn(1, 6, 2)) / 4}  # fmt: skip
    s0 = randn(1, 2, 3, 5)
    y_all, s_all = ReferenceEvaluator(model(6)).run(None, {**seq, "s0": s0})
    compiled = ctx.compile(model(3), {**{k: a[:, :3] for k, a in seq.items()}, "s0": s0},
                           options={"float_dtype": "float"})  # fmt: skip
    state, ys = s0, []
    for half in (slice(0, 3), slice(3, 6)):
        got = compiled({**{k: a[:, half] for k, a in seq.items()}, "s0": state})
        ys.append(got["y"].cpu())
        state = got["s"].cpu()
    np.testing.assert_allclose(np.concatenate(ys, axis=1), y_all, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(state, s_all, rtol=1e-5, atol=1e-5)


def _attention(inputs=(), shapes=(), **attrs):
    names = ["q", "k", "v", *inputs]
    base = [(1, 1, 2, 8), (1, 1, 2, 8), (1, 1, 2, 8)]
    values = [vi(n, F if n != "n" else I64, s) for n, s in zip(names, [*base, *shapes])]
    node = helper.make_node("Attention", [n if n != "_" else "" for n in names], ["y"], **attrs)
    return make_model([node], [v for v in values if v.name != "_"], [vi("y", F, None)])


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        (lambda: _attention(q_num_heads=2), "q_num_heads=2 but the 4-D input has 1 heads"),
        (lambda: _attention(["m"], [(2, 5)]), r"attn_mask of shape \(2, 5\) does not fit"),
        (lambda: _attention(["_", "pk", "pv"], [(), (1, 1, 3, 4), (1, 1, 3, 8)]),
         r"past_key \(1, 1, 3, 4\) and past_value"),
        (lambda: _attention(softmax_precision=6), "softmax_precision=6 is not a floating"),
        (lambda: _attention(["_", "pk", "pv", "n"], [(), (1, 1, 3, 8), (1, 1, 3, 8), (1,)]),
         "nonpad_kv_seqlen cannot be combined"),
    ],
)  # fmt: skip
def test_attention_that_breaks_the_spec_is_invalid_by_name(model, reason):
    with pytest.raises(InvalidModelError, match=reason):
        mnrt.compiler.from_onnx(model())


def test_rotary_embedding_3d_interleaved_partial_with_positions(ctx):
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"],
                            num_heads=2, interleaved=1, rotary_embedding_dim=4)  # fmt: skip
    model = make_model(
        [node],
        [vi("x", F, (2, 3, 12)), vi("cos", F, (8, 2)), vi("sin", F, (8, 2)),
         vi("pos", I64, (2, 3))],
        [vi("y", F, None)],
        opset=23,
    )  # fmt: skip
    angles = np.arange(8)[:, None] * np.array([1.0, 0.1])
    feeds = {"x": randn(2, 3, 12), "cos": np.cos(angles).astype(np.float32),
             "sin": np.sin(angles).astype(np.float32),
             "pos": np.array([[0, 1, 2], [5, 6, 7]])}  # fmt: skip
    y = check(ctx, model, feeds)[0]
    # the last two features of each head are not rotated
    np.testing.assert_array_equal(y.reshape(2, 3, 2, 6)[..., 4:],
                                  feeds["x"].reshape(2, 3, 2, 6)[..., 4:])  # fmt: skip


def test_rms_normalization_with_a_broadcast_scale(ctx):
    node = helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=-2, epsilon=1e-3)
    model = make_model([node], [vi("x", F, (2, 3, 4)), vi("s", F, (1, 4))], [vi("y", F, None)],
                       opset=23)  # fmt: skip
    check(ctx, model, {"x": randn(2, 3, 4), "s": randn(1, 4)})


def test_rms_normalization_refuses_double_statistics():
    node = helper.make_node("RMSNormalization", ["x", "s"], ["y"], stash_type=11)
    model = make_model([node], [vi("x", F, (2, 4)), vi("s", F, (4,))], [vi("y", F, None)],
                       opset=23)  # fmt: skip
    with pytest.raises(UnsupportedModelError, match="stash_type=11"):
        mnrt.compiler.from_onnx(model)


def test_swiglu_with_alpha(ctx):
    node = helper.make_node("SwiGLU", ["a", "b"], ["y"], alpha=1.702)
    model = make_model([node], [vi("a", F, (3, 5)), vi("b", F, (3, 5))], [vi("y", F, None)],
                       opset=28)  # fmt: skip
    check(ctx, model, {"a": randn(3, 5), "b": randn(3, 5)})


def test_ops_are_looked_up_in_their_own_domain():
    """FlexAttention is found in ai.onnx.preview; an op of another domain is never taken
    for the ONNX op of the same name."""
    x = [vi(n, F, (1, 1, 2, 4)) for n in "qkv"]

    def model(domain, op, inputs, opset):
        node = helper.make_node(op, [i.name for i in inputs], ["y"], domain=domain)
        graph = helper.make_graph([node], "t", inputs, [vi("y", F, None)])
        ops = [helper.make_opsetid("", opset), helper.make_opsetid(domain, 1)]
        return helper.make_model(graph, opset_imports=ops, ir_version=10)

    mnrt.compiler.from_onnx(model("ai.onnx.preview", "FlexAttention", x, 26))
    with pytest.raises(UnsupportedModelError, match="op Relu is not supported"):
        mnrt.compiler.from_onnx(model("com.example", "Relu", x[:1], 18))
    with pytest.raises(UnsupportedModelError, match="op FlexAttention is not supported"):
        mnrt.compiler.from_onnx(model("com.example", "FlexAttention", x, 26))


def _flex_model(score_mod, extra_nodes=(), extra_outputs=()):
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain="ai.onnx.preview",
                            score_mod=score_mod)  # fmt: skip
    graph = helper.make_graph(
        [node, *extra_nodes], "t", [vi(n, F, (1, 2, 3, 4)) for n in "QKV"],
        [vi("Y", F, None), *extra_outputs],
    )  # fmt: skip
    ops = [helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)]
    return helper.make_model(graph, opset_imports=ops, ir_version=10)


def test_flex_attention_subgraph_names_shadow_the_outer_graph_only_inside_it(ctx):
    """score_mod's input is named Q and its constant K, like the outer graph's inputs: inside
    it they are its own values, after it the outer ones again (Identity(K) reads the input)."""
    bias = helper.make_tensor("K", F, [], [0.5])
    sub = helper.make_graph([helper.make_node("Mul", ["Q", "K"], ["out"])], "halve",
                            [vi("Q", F, None)], [vi("out", F, None)], [bias])  # fmt: skip
    model = _flex_model(sub, [helper.make_node("Identity", ["K"], ["k_out"])],
                        [vi("k_out", F, None)])  # fmt: skip
    feeds = {n: randn(1, 2, 3, 4) for n in "QKV"}
    _, k_out = check(ctx, model, feeds)
    np.testing.assert_array_equal(k_out, feeds["K"])


def test_flex_attention_subgraph_problems_are_named():
    sub = helper.make_graph([helper.make_node("RandomUniformLike", ["s"], ["out"])], "hard",
                            [vi("s", F, None)], [vi("out", F, None)])  # fmt: skip
    with pytest.raises(UnsupportedModelError, match="in its subgraph 'hard'.*RandomUniformLike"):
        mnrt.compiler.from_onnx(_flex_model(sub))
