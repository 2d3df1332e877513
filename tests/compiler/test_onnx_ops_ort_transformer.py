"""onnxruntime's fused transformer ops (com.microsoft Gelu, BiasGelu, FastGelu, QuickGelu,
SkipLayerNormalization, SkipSimplifiedLayerNormalization, and SimplifiedLayerNormalization
of ONNX's domain) against onnxruntime's CPU provider: 3-D and 2-D inputs, each optional
input given and left out, the optional outputs asked for, malformed nodes refused naming
the node. MatMulNBits (weight-only quantized MatMul) of 2-, 4- and 8-bit weights with
and without zero points and bias. Then a small BERT-like model made of the fused ops,
compiled and compared.

Tolerances are float32 rounding (rtol 1e-5, atol 1e-5): both sides compute the same
float32 formulas, in other orders."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper
from onnx_one_node import node_model, run_both

import mnrt
from mnrt.compiler.onnx import InvalidModelError, UnsupportedModelError

RNG = np.random.default_rng(31)
MS = "com.microsoft"
SHAPES = [(2, 5, 64), (3, 64)]


def _f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


def _compare(ctx, model, feeds: dict) -> None:
    got, want = run_both(ctx, model, feeds)
    assert set(got) == set(want)
    for name, w in want.items():
        assert got[name].shape == w.shape, (name, got[name].shape, w.shape)
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5, err_msg=name)


def _check(ctx, op: str, values: dict, domain: str = MS, outputs=("y",), **attrs) -> None:
    """The first value a graph input, the rest initializers."""
    first = next(iter(values))
    model = node_model(op, values, {first}, 17, domain=domain, outputs=outputs, **attrs)
    _compare(ctx, model, {first: values[first]})


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    "op, bias, attrs",
    [("Gelu", False, {}), ("BiasGelu", True, {}), ("FastGelu", False, {}),
     ("FastGelu", True, {}), ("QuickGelu", False, {}), ("QuickGelu", False, {"alpha": 1.0}),
     ("QuickGelu", False, {"alpha": 0.5})],
)  # fmt: skip
def test_gelus(ctx, op, bias, attrs, shape):
    values = {"x": _f32(*shape, scale=3.0)}
    if bias:
        values["bias"] = _f32(shape[-1])
    _check(ctx, op, values, **attrs)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("beta, bias", [(True, True), (False, False), (True, False), (False, True)])
@pytest.mark.parametrize(
    "outputs", [("y",), ("y", "mean", "inv_std_var", "sum"), ("y", "", "", "sum")]
)
def test_skip_layer_norm(ctx, shape, beta, bias, outputs):
    h = shape[-1]
    values = {"input": _f32(*shape), "skip": _f32(*shape), "gamma": _f32(h),
              "beta": _f32(h) if beta else None, "bias": _f32(h) if bias else None}  # fmt: skip
    _check(ctx, "SkipLayerNormalization", values, outputs=outputs, epsilon=1e-5)


@pytest.mark.parametrize("skip_shape", [(1, 5, 64), (5, 64)])
def test_skip_layer_norm_broadcast_skip(ctx, skip_shape):
    """onnxruntime's (1, S, H) and (S, H) skips for a (B, S, H) input, default epsilon."""
    values = {"input": _f32(2, 5, 64), "skip": _f32(*skip_shape), "gamma": _f32(64)}
    _check(ctx, "SkipLayerNormalization", values, outputs=("y", "mean", "inv_std_var", "sum"))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("outputs", [("y",), ("y", "", "inv_std_var", "sum")])
def test_skip_simplified_layer_norm(ctx, shape, bias, outputs):
    h = shape[-1]
    values = {"input": _f32(*shape), "skip": _f32(*shape), "gamma": _f32(h),
              "bias": _f32(h) if bias else None}  # fmt: skip
    _check(ctx, "SkipSimplifiedLayerNormalization", values, outputs=outputs, epsilon=1e-6)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("outputs", [("y",), ("y", "inv_std_var")])
def test_simplified_layer_norm(ctx, shape, outputs):
    """An onnxruntime-only op of ONNX's own domain; default epsilon."""
    values = {"x": _f32(*shape), "scale": _f32(shape[-1])}
    _check(ctx, "SimplifiedLayerNormalization", values, domain="", outputs=outputs)


def test_simplified_layer_norm_axis(ctx):
    """Normalised over axis..end: a scale and an inv_std_var of (1, 1)-kept trailing axes."""
    values = {"x": _f32(2, 5, 64), "scale": _f32(5, 64)}
    _check(ctx, "SimplifiedLayerNormalization", values, domain="",
           outputs=("y", "inv_std_var"), axis=1, epsilon=1e-4)  # fmt: skip


def _node(op: str, values: dict, domain: str = MS, outputs=("y",)):
    first = next(iter(values))
    model = node_model(op, values, {first}, 17, domain=domain, outputs=outputs)
    model.graph.node[0].name = "fused0"
    return model


@pytest.mark.parametrize(
    "op, values, outputs, error, match",
    [
        ("SkipLayerNormalization", {"input": _f32(2, 5, 64), "skip": _f32(2, 5, 64),
         "gamma": _f32(32)}, ("y",), InvalidModelError, r"fused0.*gamma.*\(32,\)"),
        ("SkipLayerNormalization", {"input": _f32(2, 5, 64), "skip": _f32(2, 5, 64),
         "gamma": _f32(64), "beta": _f32(1, 64)}, ("y",), InvalidModelError, r"fused0.*beta"),
        ("SkipLayerNormalization", {"input": _f32(2, 5, 64), "skip": _f32(3, 5, 64),
         "gamma": _f32(64)}, ("y",), InvalidModelError, r"fused0.*skip of shape \(3, 5, 64\)"),
        ("SkipLayerNormalization", {"input": _f32(5, 64), "skip": _f32(2, 5, 64),
         "gamma": _f32(64)}, ("y",), InvalidModelError, r"fused0.*skip of shape"),
        ("SkipSimplifiedLayerNormalization", {"input": _f32(3, 64), "skip": _f32(3, 64),
         "gamma": _f32(63)}, ("y",), InvalidModelError, r"fused0.*gamma"),
        ("SkipSimplifiedLayerNormalization", {"input": _f32(3, 64), "skip": _f32(3, 64),
         "gamma": _f32(64)}, ("y", "mean"), UnsupportedModelError, r"fused0.*mean"),
        ("FastGelu", {"x": _f32(3, 64), "bias": _f32(3, 64)}, ("y",), InvalidModelError,
         r"fused0.*bias"),
        ("BiasGelu", {"x": _f32(3, 64), "bias": _f32(32)}, ("y",), InvalidModelError,
         r"fused0.*bias"),
    ],
)  # fmt: skip
def test_malformed_nodes_are_refused(op, values, outputs, error, match):
    with pytest.raises(error, match=match):
        mnrt.compiler.from_onnx(_node(op, values, outputs=outputs))


def test_matmul_nbits_of_a_misshapen_weight_is_refused():
    values = {"A": _f32(3, 64), **_nbits(64, 48, 4, 32, None)}
    values["B"] = values["B"][:, :1]
    model = node_model("MatMulNBits", values, {"A"}, 17, domain=MS, K=64, N=48, bits=4,
                       block_size=32)  # fmt: skip
    model.graph.node[0].name = "fused0"
    with pytest.raises(InvalidModelError, match=r"fused0.*B of uint8 \(48, 1, 16\)"):
        mnrt.compiler.from_onnx(model)


def test_the_ops_are_registered_where_onnxruntime_has_them():
    ops = set(mnrt.compiler.onnx.supported_ops())
    fused = ["BiasGelu", "FastGelu", "QuickGelu", "SkipLayerNormalization",
             "SkipSimplifiedLayerNormalization", "MatMulNBits"]  # fmt: skip
    assert {f"{MS}:{n}" for n in [*fused, "Gelu"]} <= ops
    assert not set(fused) & ops
    assert "SimplifiedLayerNormalization" in ops


def _bert_like() -> tuple:
    """Embeddings, a LayerNormalization and two feed-forward blocks, fused as onnxruntime's
    transformer optimizer fuses a BERT (built here by hand: its optimizer needs torch and
    sympy, which mnrt does not depend on): BiasGelu, then com.microsoft Gelu after its own
    Add, and FastGelu with its bias, each block closed by a SkipLayerNormalization whose
    bias is the second MatMul's."""
    vocab, hidden, ff = 30, 64, 128
    inits = {"emb": _f32(vocab, hidden, scale=0.5), "g0": 1 + _f32(hidden, scale=0.1),
             "b0": _f32(hidden, scale=0.1)}  # fmt: skip
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["e"]),
        helper.make_node("LayerNormalization", ["e", "g0", "b0"], ["x0"], epsilon=1e-12),
    ]
    acts = ["BiasGelu", "Gelu", "FastGelu"]
    for i, act in enumerate(acts):
        p = f"l{i}_"
        inits.update({p + "w1": _f32(hidden, ff, scale=1 / 8), p + "c1": _f32(ff, scale=0.1),
                      p + "w2": _f32(ff, hidden, scale=1 / 11),
                      p + "c2": _f32(hidden, scale=0.1), p + "g": 1 + _f32(hidden, scale=0.1),
                      p + "b": _f32(hidden, scale=0.1)})  # fmt: skip
        x = f"x{i}"
        nodes.append(helper.make_node("MatMul", [x, p + "w1"], [p + "m1"]))
        if act == "Gelu":
            nodes.append(helper.make_node("Add", [p + "m1", p + "c1"], [p + "a1"]))
            nodes.append(helper.make_node("Gelu", [p + "a1"], [p + "h"], domain=MS))
        else:
            nodes.append(helper.make_node(act, [p + "m1", p + "c1"], [p + "h"], domain=MS))
        nodes.append(helper.make_node("MatMul", [p + "h", p + "w2"], [p + "m2"]))
        nodes.append(helper.make_node(
            "SkipLayerNormalization", [p + "m2", x, p + "g", p + "b", p + "c2"],
            [f"x{i + 1}", "", "", p + "sum"], domain=MS, epsilon=1e-12))  # fmt: skip
    graph = helper.make_graph(
        nodes, "bert_like", [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 5])],
        [helper.make_tensor_value_info(f"x{len(acts)}", TensorProto.FLOAT, [2, 5, hidden]),
         helper.make_tensor_value_info(f"l{len(acts) - 1}_sum", TensorProto.FLOAT,
                                       [2, 5, hidden])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    )
    model.ir_version = 8
    return model, {"ids": RNG.integers(0, vocab, (2, 5)).astype(np.int64)}


def test_bert_like_model_of_fused_ops(ctx):
    model, feeds = _bert_like()
    ms_ops = {n.op_type for n in model.graph.node if n.domain == MS}
    assert ms_ops == {"BiasGelu", "Gelu", "FastGelu", "SkipLayerNormalization"}
    _compare(ctx, model, feeds)


def _nbits(k: int, n: int, bits: int, block: int, zp: str | None) -> dict:
    """Random B, scales and zero_points (packed uint8, float, or None) for MatMulNBits."""
    blocks = -(-k // block)
    q = RNG.integers(0, 1 << bits, (n, blocks, block * bits // 8, 8 // bits)).astype(np.uint8)
    packed = sum(q[..., j] << np.uint8(bits * j) for j in range(8 // bits)).astype(np.uint8)
    values = {"B": packed, "scales": np.abs(_f32(n, blocks, scale=0.05)) + 0.01}
    if zp == "packed":
        z = RNG.integers(0, 1 << bits, (n, -(-blocks * bits // 8) * 8 // bits)).astype(np.uint8)
        z = z.reshape(n, -1, 8 // bits)
        values["zero_points"] = sum(z[..., j] << np.uint8(bits * j)
                                    for j in range(8 // bits)).astype(np.uint8)  # fmt: skip
    elif zp == "float":
        values["zero_points"] = RNG.uniform(0, (1 << bits) - 1, (n, blocks)).astype(np.float32)
    else:
        values["zero_points"] = None
    return values


@pytest.mark.parametrize(
    "shape, k, bits, block, zp, bias",
    [((2, 5, 64), 64, 4, 32, "packed", True), ((3, 64), 64, 4, 32, None, False),
     ((3, 80), 80, 4, 32, "packed", False), ((2, 5, 64), 64, 4, 16, "float", True),
     ((3, 64), 64, 8, 32, "packed", True), ((3, 64), 64, 2, 32, None, True)],
)  # fmt: skip
def test_matmul_nbits(ctx, shape, k, bits, block, zp, bias):
    """K=80 leaves the last block of 32 part padding. accuracy_level 0: onnxruntime keeps A
    in float32 (level 4 would quantize it to int8, which mnrt does not)."""
    n = 48
    values = {"A": _f32(*shape), **_nbits(k, n, bits, block, zp), "g_idx": None,
              "bias": _f32(n) if bias else None}  # fmt: skip
    _check(ctx, "MatMulNBits", values, K=k, N=n, bits=bits, block_size=block)
