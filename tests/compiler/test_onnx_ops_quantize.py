"""ONNX converters of quantized ops (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv) against ONNX's reference evaluator,
integer outputs exactly: every quantized type, per tensor, per axis and blocked, zero points
absent and present, values on .5 boundaries and past the type's range, scales and zero points
as initializers and as graph inputs. Then small models that onnxruntime's own quantization
tool writes (QDQ, QOperator, dynamic), compiled and compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper
from onnx_one_node import (
    check,
    image_model,
    images,
    node_model,
    one_node_model,
    onnxruntime_outputs,
    output_step,
    quantized_by_onnxruntime,
    run,
    run_both,
)

import mnrt

RNG = np.random.default_rng(11)
ZERO_POINT = {np.int8: 3, np.uint8: 128, np.int16: -1000, np.uint16: 30000}
QTYPES = list(ZERO_POINT)


def _ticks(shape, qtype) -> np.ndarray:
    """Whole and half quotients over twice the type's range: ties round to even, and the
    far ones saturate (half away from zero, or a zero point ignored, changes many)."""
    info = np.iinfo(qtype)
    span = int(info.max) - int(info.min)
    whole = RNG.integers(-span, span, shape)
    return (whole + 0.5 * RNG.integers(0, 2, shape)).astype(np.float32)


def _split(values: dict, as_inputs: bool) -> tuple[dict, dict]:
    """Scale and zero point as graph inputs, or as initializers."""
    return (values, {}) if as_inputs else ({}, values)


# --- QuantizeLinear -------------------------------------------------------------------------


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("with_zp", [True, False])
@pytest.mark.parametrize("as_inputs", [False, True])
def test_quantize_per_tensor(ctx, qtype, with_zp, as_inputs):
    x = _ticks((5, 8), qtype) * np.float32(0.25)  # x / 0.25 is exact: the ticks themselves
    params = {"s": np.array(0.25, np.float32)}
    attrs = {}
    if with_zp:
        params["zp"] = np.array(ZERO_POINT[qtype], qtype)
    elif qtype is not np.uint8:  # without a zero point, output_dtype names the type
        attrs["output_dtype"] = helper.np_dtype_to_tensor_dtype(np.dtype(qtype))
    ins, inits = _split(params, as_inputs)
    model = one_node_model("QuantizeLinear", {"x": x, **ins}, ["y"], inits, **attrs)
    (y,) = check(ctx, model, {"x": x, **ins})
    assert y.dtype == qtype


def test_quantize_rounds_half_to_even_and_saturates(ctx):
    q = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 124.5, 125.5, -131.5, -130.5, 1e6, -1e6])
    x = (q * 0.5).astype(np.float32)
    model = one_node_model("QuantizeLinear", {"x": x}, ["y"], {"s": np.float32(0.5),
                           "zp": np.int8(3)})  # fmt: skip
    (y,) = run(ctx, model, {"x": x})
    np.testing.assert_array_equal(y, [1, 1, 3, 3, 5, 5, 127, 127, -128, -127, 127, -128])


def test_quantize_without_zero_point_is_uint8(ctx):
    x = np.array([-1.0, 0.5, 1.5, 2.5, 300.0], np.float32)
    (y,) = check(ctx, one_node_model("QuantizeLinear", {"x": x}, ["y"], {"s": np.float32(1)}),
                 {"x": x})  # fmt: skip
    np.testing.assert_array_equal(y, np.array([0, 0, 2, 2, 255], np.uint8))


def test_quantize_by_an_inexact_scale(ctx):
    x = RNG.standard_normal((4, 6)).astype(np.float32) * 3
    check(ctx, one_node_model("QuantizeLinear", {"x": x}, ["y"],
                              {"s": np.float32(0.0173), "zp": np.int8(-7)}), {"x": x})  # fmt: skip


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("as_inputs", [False, True])
def test_quantize_per_axis(ctx, qtype, axis, as_inputs):
    shape = (2, 3, 4)
    n = shape[axis]
    scale = np.float32(2.0) ** -np.arange(n, dtype=np.float32)
    zp = (ZERO_POINT[qtype] + np.arange(n) * 5).astype(qtype)
    view = [1] * 3
    view[axis] = n
    x = _ticks(shape, qtype) * scale.reshape(view)
    ins, inits = _split({"s": scale, "zp": zp}, as_inputs)
    model = one_node_model("QuantizeLinear", {"x": x, **ins}, ["y"], inits, axis=axis)
    check(ctx, model, {"x": x, **ins})


@pytest.mark.parametrize("shape,axis,block", [((3, 4), 1, 2), ((2, 5), 1, 2), ((4, 3), 0, 3)])
@pytest.mark.parametrize("with_zp", [True, False])
def test_quantize_blocked(ctx, shape, axis, block, with_zp):
    sshape = list(shape)
    sshape[axis] = -(-shape[axis] // block)
    scale = (np.float32(2.0) ** -RNG.integers(0, 4, sshape)).astype(np.float32)
    x = _ticks(shape, np.int16) * np.repeat(scale, block, axis=axis).take(
        range(shape[axis]), axis=axis)  # fmt: skip
    inits = {"s": scale}
    if with_zp:
        inits["zp"] = RNG.integers(-500, 500, sshape).astype(np.int16)
    attrs = {"axis": axis, "block_size": block}
    if not with_zp:
        attrs["output_dtype"] = TensorProto.INT16
    check(ctx, one_node_model("QuantizeLinear", {"x": x}, ["y"], inits, **attrs), {"x": x})


@pytest.mark.parametrize("opset", [23, 25])
def test_quantize_int32_and_by_precision(ctx, opset):
    """int32 x (divided in the scale's float type), and a float16 scale divided in float32
    by the precision attribute."""
    x = _ticks((12,), np.int16).astype(np.int32) * 2
    inits = {"s": np.float32(4), "zp": np.int8(1)}
    model = one_node_model("QuantizeLinear", {"x": x}, ["y"], inits, opset=opset)
    check(ctx, model, {"x": x})
    xf = _ticks((12,), np.uint8) * np.float32(0.5)
    model = one_node_model("QuantizeLinear", {"x": xf}, ["y"], {"s": np.float16(0.5)},
                           opset=opset, precision=TensorProto.FLOAT)  # fmt: skip
    check(ctx, model, {"x": xf})


def test_quantize_by_an_int32_scale_is_refused(ctx):
    x = np.arange(4, dtype=np.int32)
    model = one_node_model("QuantizeLinear", {"x": x}, ["y"], {"s": np.int32(2)}, opset=25)
    with pytest.raises(mnrt.MnrtError, match="precision=FLOAT"):
        run(ctx, model, {"x": x})


@pytest.mark.parametrize(
    "scale,attrs,match",
    [
        (np.ones(3, np.float32), {"axis": 1}, "per axis"),
        (np.ones((2, 3), np.float32), {"axis": 1, "block_size": 2}, "block"),
    ],
)
def test_quantize_of_a_wrong_scale_shape_is_invalid(ctx, scale, attrs, match):
    x = np.zeros((2, 4), np.float32)
    model = one_node_model("QuantizeLinear", {"x": x}, ["y"], {"s": scale}, **attrs)
    with pytest.raises(mnrt.MnrtError, match=match):
        run(ctx, model, {"x": x})


def test_quantize_to_float8_is_refused(ctx):
    x = np.zeros(4, np.float32)
    model = one_node_model("QuantizeLinear", {"x": x}, ["y"], {"s": np.float32(1)})
    model.graph.node[0].input.append("zp")
    model.graph.input.append(helper.make_tensor_value_info("zp", TensorProto.FLOAT8E4M3FN, []))
    with pytest.raises(mnrt.MnrtError, match="float8e4m3fn has no device dtype"):
        run(ctx, model, {"x": x})


# --- DequantizeLinear -----------------------------------------------------------------------


def _quantized(shape, qtype) -> np.ndarray:
    info = np.iinfo(qtype)
    return RNG.integers(int(info.min), int(info.max), shape, endpoint=True).astype(qtype)


@pytest.mark.parametrize("qtype", [*QTYPES, np.int32])
@pytest.mark.parametrize("mode", ["tensor", "axis", "blocked"])
@pytest.mark.parametrize("as_inputs", [False, True])
def test_dequantize(ctx, qtype, mode, as_inputs):
    shape = (2, 6, 3)
    sshape = {"tensor": (), "axis": (6,), "blocked": (2, 2, 3)}[mode]
    params = {"s": RNG.uniform(0.01, 2, sshape).astype(np.float32)}
    if qtype is not np.int32:  # int32 has no zero point
        params["zp"] = _quantized(sshape, qtype)
    attrs = {"axis": 1, **({"block_size": 3} if mode == "blocked" else {})}
    x = _quantized(shape, qtype)
    ins, inits = _split(params, as_inputs)
    model = one_node_model("DequantizeLinear", {"x": x, **ins}, ["y"], inits, **attrs)
    check(ctx, model, {"x": x, **ins}, rtol=0, atol=0)  # one rounding, the reference's


def test_dequantize_without_zero_point_and_with_output_dtype(ctx):
    x = _quantized((7,), np.uint8)
    model = one_node_model("DequantizeLinear", {"x": x}, ["y"], {"s": np.float32(0.3)},
                           opset=23, output_dtype=TensorProto.FLOAT)  # fmt: skip
    check(ctx, model, {"x": x}, rtol=0, atol=0)


@pytest.mark.parametrize("blocked", [False, True])
def test_dequantized_constants_are_weights_a_convtranspose_takes(ctx, blocked):
    """A QDQ model's weights are DequantizeLinear of initializers. ONNX's reference evaluator,
    which folds constants, has no DequantizeLinear before opset 19, so at opset 17 they were
    device values and ConvTranspose, which needs its weights at import time, was refused.
    They are dequantized on the host now, as the device would, and run as any weights."""
    import onnxruntime as ort

    w = RNG.integers(-128, 128, (4, 3, 2, 2)).astype(np.int8)
    scale = RNG.uniform(0.01, 0.1, (4, 2, 2, 2) if blocked else 3).astype(np.float32)
    zp = np.zeros(scale.shape, np.int8) + np.int8(-3)
    attrs = {"axis": 1, "block_size": 2} if blocked else {"axis": 1}
    opset = 21 if blocked else 17
    nodes = [helper.make_node("DequantizeLinear", ["wq", "s", "zp"], ["w"], **attrs),
             helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])]  # fmt: skip
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
        [helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(a, n) for n, a in (("wq", w), ("s", scale), ("zp", zp))],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    x = {"x": RNG.standard_normal((1, 4, 5, 5)).astype(np.float32)}
    compiled = ctx.compile(model, x, options={"float_dtype": "float"})
    assert "cast" not in [k.op for k in compiled.lowered.program.kernels]
    want = ort.InferenceSession(model.SerializeToString()).run(None, x)[0]
    np.testing.assert_allclose(compiled(x)["y"].cpu(), want, rtol=1e-5, atol=1e-5)


def test_a_dequantized_scalar_constant_is_an_operand(ctx):
    """A 0-d result computed on the host is a numpy scalar, which the import took for a
    device value (a GraphError naming np.float32(...))."""
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    nodes = [helper.make_node("DequantizeLinear", ["q", "s"], ["c"]),
             helper.make_node("Add", ["x", "c"], ["y"])]  # fmt: skip
    inits = [numpy_helper.from_array(np.array(7, np.uint8), "q"),
             numpy_helper.from_array(np.array(0.25, np.float32), "s")]  # fmt: skip
    vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph(nodes, "g", [vi], [helper.make_empty_tensor_value_info("y")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = ctx.compile(model, {"x": x}, options={"float_dtype": "float"})
    np.testing.assert_array_equal(compiled({"x": x})["y"].cpu(), x + np.float32(1.75))


# --- DynamicQuantizeLinear ------------------------------------------------------------------


@pytest.mark.parametrize(
    "x",
    [
        RNG.standard_normal((3, 5)).astype(np.float32),
        RNG.uniform(1, 4, 6).astype(np.float32),  # min above 0: the range still holds 0
        -RNG.uniform(1, 4, 6).astype(np.float32),
        np.zeros(4, np.float32),  # scale 1/255
        # scale 1, zero point 2.5 -> 2, quotients .5 -> even
        np.array([-2.5, 252.5, 0.5, 1.5, 2.5, -1.5], np.float32),
        # scale 1.5, zero point 85, x / scale on .5
        np.array([-127.5, 255.0, 3.75, 2.25, -3.75], np.float32),
    ],
)
def test_dynamic_quantize(ctx, x):
    model = one_node_model("DynamicQuantizeLinear", {"x": x}, ["y", "scale", "zp"], opset=11)
    check(ctx, model, {"x": x}, rtol=0, atol=0)


# --- MatMulInteger, QLinearMatMul ------------------------------------------------------------


@pytest.mark.parametrize("ta,tb", [(np.uint8, np.uint8), (np.int8, np.int8), (np.uint8, np.int8)])
@pytest.mark.parametrize("zps", ["none", "tensor", "row_column"])
@pytest.mark.parametrize("as_inputs", [False, True])
def test_matmul_integer(ctx, ta, tb, zps, as_inputs):
    # K = 600 of values near 255: sums pass 2**24, where float32 is no longer exact
    a = _quantized((4, 600), ta)
    b = _quantized((600, 5), tb)
    params = {}
    if zps == "tensor":
        params = {"azp": _quantized((), ta), "bzp": _quantized((), tb)}
    elif zps == "row_column":
        params = {"azp": _quantized((4, 1), ta), "bzp": _quantized((5,), tb)}
    ins, inits = _split(params, as_inputs)
    model = one_node_model("MatMulInteger", {"a": a, "b": b, **ins}, ["y"], inits, opset=10)
    check(ctx, model, {"a": a, "b": b, **ins})


def test_matmul_integer_accumulates_past_float32(ctx):
    a = np.full((1, 600), 255, np.uint8)
    b = np.full((600, 1), 255, np.uint8)
    b[0, 0] = 254  # 255 * 255 * 600 - 255 is odd, beyond 2**24: float32 cannot hold it
    (y,) = check(ctx, one_node_model("MatMulInteger", {"a": a, "b": b}, ["y"], opset=10),
                 {"a": a, "b": b})  # fmt: skip
    assert y[0, 0] == 255 * 255 * 600 - 255


@pytest.mark.parametrize("sa,sb", [((2, 3, 4), (2, 4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4, 3)),
                                   ((3, 4), (4,))])  # fmt: skip
def test_matmul_integer_batched_and_vectors(ctx, sa, sb):
    a, b = _quantized(sa, np.int8), _quantized(sb, np.uint8)
    model = one_node_model("MatMulInteger", {"a": a, "b": b}, ["y"],
                           {"azp": np.int8(-5), "bzp": np.uint8(100)}, opset=10)  # fmt: skip
    check(ctx, model, {"a": a, "b": b})


def test_matmul_integer_vector_zero_point_of_a_is_per_row(ctx):
    """The spec's reading of a zero point [M] of an [M, K] a (the reference evaluator
    broadcasts it along K instead, so it is checked against numpy)."""
    a, b = _quantized((3, 4), np.uint8), _quantized((4, 2), np.uint8)
    zp = np.array([1, 50, 200], np.uint8)
    model = one_node_model("MatMulInteger", {"a": a, "b": b}, ["y"], {"azp": zp}, opset=10)
    (y,) = run(ctx, model, {"a": a, "b": b})
    np.testing.assert_array_equal(y, (a.astype(np.int32) - zp[:, None]) @ b.astype(np.int32))


def _centre(shape, qtype) -> np.ndarray:
    """Zero points near the middle of the type, so that products spread both ways."""
    middle = 128 if qtype is np.uint8 else 0
    return (middle + RNG.integers(-3, 4, shape)).astype(qtype)


def _odd_or_even(qtype, odd: bool) -> np.ndarray:
    return np.asarray(_quantized((), qtype) // 2 * 2 + odd, qtype)


def check_requantized(ctx, model, feeds, odd: bool) -> list[np.ndarray]:
    """QLinearMatMul and QLinearConv by the spec: round(acc * scale), then + y_zero_point,
    as onnxruntime computes them. ONNX's reference evaluator adds the zero point before
    rounding, which differs on .5 boundaries when it is odd: such cases are checked against
    onnxruntime, the others against the reference."""
    if not odd:
        return check(ctx, model, feeds)
    want = list(onnxruntime_outputs(model, feeds).values())
    got = run(ctx, model, feeds)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    return got


def _qlinear_matmul(ta, tb, per_column: bool, as_inputs: bool, odd: bool, sa=(8, 40),
                    sb=(40, 6)):  # fmt: skip
    n = sb[-1]
    a_zp, b_zp = _centre((), ta), _centre((n,) if per_column else (), tb)
    # Near the zero points, with a_scale * b_scale / y_scale = 1/2 or 1/4: a quarter to a
    # half of the results fall on .5; a's first rows at its extremes against a column of
    # b's of +8 saturate both ways.
    a = (a_zp + RNG.integers(-8, 9, sa)).astype(ta)
    a[..., 0, :], a[..., 1, :] = np.iinfo(ta).max, np.iinfo(ta).min
    b = (b_zp + RNG.integers(-8, 9, sb)).astype(tb)
    b[..., 0] = b_zp.reshape(-1)[0] + 8
    values = {
        "a": a,
        "a_s": np.float32(0.5),
        "a_zp": a_zp,
        "b": b,
        "b_s": np.float32(2.0) ** -RNG.integers(0, 2, n if per_column else ()).astype(np.float32),
        "b_zp": b_zp,
        "y_s": np.float32(1.0),
        "y_zp": _odd_or_even(ta, odd),
    }
    values = {k: np.asarray(v, np.float32 if k.endswith("_s") else None) for k, v in values.items()}
    inputs = set(values) if as_inputs else {"a", "b"}
    model = node_model("QLinearMatMul", values, inputs, 21)
    return model, {k: values[k] for k in inputs}


@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("as_inputs", [False, True])
@pytest.mark.parametrize("odd", [False, True])
def test_qlinear_matmul(ctx, qtype, per_column, as_inputs, odd):
    model, feeds = _qlinear_matmul(qtype, qtype, per_column, as_inputs, odd)
    (y,) = check_requantized(ctx, model, feeds, odd)
    info = np.iinfo(qtype)
    assert 0 < np.isin(y, [info.min, info.max]).mean() < 1  # some saturate, not all


def test_qlinear_matmul_batched(ctx):
    model, feeds = _qlinear_matmul(np.uint8, np.int8, False, False, True, (2, 3, 8), (2, 8, 4))
    check_requantized(ctx, model, feeds, True)


# --- ConvInteger, QLinearConv ----------------------------------------------------------------


@pytest.mark.parametrize(
    "xshape,wshape,attrs",
    [
        ((1, 3, 5, 5), (4, 3, 3, 3), {}),
        ((2, 4, 7, 6), (6, 2, 3, 2), {"pads": [1, 0, 2, 1], "strides": [2, 1], "group": 2}),
        ((1, 2, 9, 9), (3, 2, 3, 3), {"dilations": [2, 3], "auto_pad": "SAME_UPPER"}),
        ((1, 2, 9), (3, 2, 4), {"pads": [2, 1], "strides": [2]}),
        ((1, 2, 4, 5, 5), (2, 2, 2, 3, 2), {"pads": [1, 0, 1, 0, 1, 1]}),
    ],
)
@pytest.mark.parametrize("tx,tw", [(np.uint8, np.int8), (np.int8, np.uint8)])
def test_conv_integer(ctx, xshape, wshape, attrs, tx, tw):
    x, w = _quantized(xshape, tx), _quantized(wshape, tw)
    # ONNX's reference takes a per-channel w zero point for 2-D convolutions only
    wzp = _quantized((wshape[0],) if len(wshape) == 4 else (), tw)
    inits = {"w": w, "xzp": _quantized((), tx), "wzp": wzp}
    model = one_node_model("ConvInteger", {"x": x}, ["y"], inits, opset=10, **attrs)
    check(ctx, model, {"x": x})


def test_conv_integer_exact_past_float32_and_without_zero_points(ctx):
    """K = 72 * 9 products near 255 * 255: sums past 2**24, which a float32 conv would round."""
    x = RNG.integers(200, 256, (1, 72, 4, 4)).astype(np.uint8)
    w = RNG.integers(200, 256, (2, 72, 3, 3)).astype(np.uint8)
    model = one_node_model("ConvInteger", {"x": x, "w": w}, ["y"], opset=10)
    (y,) = check(ctx, model, {"x": x, "w": w})
    assert y.max() > 2**24 and (y % 2).any()


@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("odd", [False, True])
def test_qlinear_conv(ctx, qtype, per_channel, bias, odd):
    x, w = _quantized((1, 4, 6, 6), qtype), RNG.integers(-8, 9, (4, 2, 3, 3)).astype(np.int8)
    m = (4,) if per_channel else ()
    # x_scale * w_scale / y_scale = 1/8 or 1/16: results on .5 boundaries, some saturating
    values = {
        "x": x, "xs": np.float32(0.5), "xzp": _quantized((), qtype),
        "w": w, "ws": (np.float32(2.0) ** -RNG.integers(2, 4, m)).astype(np.float32),
        "wzp": np.zeros(m, np.int8), "ys": np.float32(1.0), "yzp": _odd_or_even(qtype, odd),
        **({"b": RNG.integers(-3000, 3000, 4).astype(np.int32)} if bias else {}),
    }  # fmt: skip
    values = {k: np.asarray(v) for k, v in values.items()}
    model = node_model("QLinearConv", values, {"x"}, 10, pads=[1, 1, 1, 1], group=2)
    check_requantized(ctx, model, {"x": x}, odd)


# --- models quantized by onnxruntime ----------------------------------------------------------


def _float_cnn():
    """Conv, Relu, MaxPool, Reshape, MatMul, Add: a float model to quantize."""
    w1 = (RNG.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    w2 = (RNG.standard_normal((64, 10)) * 0.2).astype(np.float32)
    inits = {"w1": w1, "b1": RNG.standard_normal(4).astype(np.float32) * 0.1, "w2": w2,
             "shape": np.array([2, -1], np.int64)}  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["p", "shape"], ["f"]),
        helper.make_node("MatMul", ["f", "w2"], ["m"]),
        helper.make_node("Add", ["m", "b2"], ["y"]),
    ]
    inits["b2"] = RNG.standard_normal(10).astype(np.float32) * 0.1
    return image_model("cnn", nodes, inits)


def _quantized_model(tmp_path, how: str):
    """The float CNN quantized by onnxruntime's tool: static QDQ or QOperator (calibrated on
    four random batches, weights per channel), or dynamic."""
    import onnx
    from onnxruntime import quantization as q

    model = _float_cnn()
    if how != "dynamic":
        batches = [{"x": x} for x in images(RNG, 4)]
        return quantized_by_onnxruntime(model, tmp_path, batches, how == "qoperator",
                                        per_channel=True)  # fmt: skip
    src, dst = tmp_path / "float.onnx", tmp_path / f"{how}.onnx"
    onnx.save(model, src)
    q.quantize_dynamic(src, dst, weight_type=q.QuantType.QUInt8)
    return onnx.load(dst)


def _with_outputs(model, op_types: set[str]):
    """The model with the outputs of its nodes of `op_types` made graph outputs too."""
    for node in model.graph.node:
        if node.op_type in op_types:
            model.graph.output.extend(helper.make_empty_tensor_value_info(o)
                                      for o in node.output)  # fmt: skip
    return model


@pytest.mark.parametrize("how", ["qdq", "qoperator"])
def test_statically_quantized_cnn_matches_onnxruntime(ctx, tmp_path, how):
    """onnxruntime fuses the QDQ pattern into integer kernels that requantize in float32,
    mnrt runs it as written (DequantizeLinear, float Conv, QuantizeLinear): a result on a .5
    boundary may round the other way, one step of the output's quantization, so that is the
    tolerance; nearly all values must agree exactly."""
    model = _quantized_model(tmp_path, how)
    ops = {n.op_type for n in model.graph.node}
    qoperator = {"QLinearConv", "QLinearMatMul", "QLinearAdd"}  # Add: onnxruntime's own op
    assert (qoperator if how == "qoperator" else {"QuantizeLinear"}) <= ops
    step = output_step(model, "y")
    for x in images(RNG, 3):
        got, want = run_both(ctx, model, {"x": x})
        np.testing.assert_allclose(got["y"], want["y"], rtol=0, atol=step * 1.001)
        assert np.mean(got["y"] == want["y"]) >= 0.95


def test_dynamically_quantized_cnn_matches_onnxruntime(ctx, tmp_path):
    """quantize_dynamic's DynamicQuantizeLinear, ConvInteger and MatMulInteger: their integer
    outputs exactly; the float tail (Cast, Mul by the scales, Add) to float32 rounding."""
    model = _with_outputs(_quantized_model(tmp_path, "dynamic"),
                          {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger"})  # fmt: skip
    for x in images(RNG, 3):
        got, want = run_both(ctx, model, {"x": x})
        assert len(want) == 1 + 3 + 1 + 3 + 1
        for name, w in want.items():
            if w.dtype.kind in "iu":
                np.testing.assert_array_equal(got[name], w, err_msg=name)
            else:
                np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-6, err_msg=name)
