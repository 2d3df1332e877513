"""onnxruntime's com.microsoft quantized ops, the QOperator format's elementwise, pooling,
concatenation and Gemm ops that onnxruntime's quantization tool writes beside ONNX's own
QLinearConv and QLinearMatMul: QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu,
QLinearSoftmax, QLinearGlobalAveragePool, QLinearAveragePool, QLinearConcat, QLinearWhere
and QGemm. (QLinearReduceMean is left out: onnxruntime's CPU provider has no kernel for it.)

Their spec is little more than quantize(f(dequantize(x))), so onnxruntime's CPU kernels are
the reference, and their arithmetic is followed step by step where the device kernels can
take the same steps: results then differ from onnxruntime's only where a float32 step of
another order (an FMA, a sum in another order) rounds onto the other side of a .5 boundary.
- QLinearAdd: the zero points' part c_zp - (ra * a_zp + rb * b_zp) with ra = a_scale / c_scale
  and rb = b_scale / c_scale, plus a * ra, plus b * rb, in float32, rounded once (onnxruntime's
  SSE2 order; its AVX2 kernel fuses the last two steps into FMAs, which rounds differently
  about once in 10**5 results).
- QLinearMul: the exact int32 product (a - a_zp) * (b - b_zp), times a_scale * b_scale / c_scale,
  plus c_zp, rounded.
- QLinearSigmoid and QLinearLeakyRelu, and the requantizing of QLinearConcat's and
  QLinearWhere's inputs: a table of quantize(f(dequantize(v))) for the 256 values v of the
  type, gathered at x, as onnxruntime builds it. The table is 256 elements of device work,
  which the compiler folds when the scales and zero points are constants.
- QLinearSoftmax: Softmax of the dequantized x, times floor(1 / y_scale) (onnxruntime's
  factor: 256 for the tool's y_scale of 1/256, and not 1 / y_scale for other scales),
  rounded, plus y_zp. The opset attribute picks the Softmax semantics, not the model's opset.
- QLinearGlobalAveragePool (and a QLinearAveragePool whose one window covers the input):
  exact int32 sums of x - x_zp, times x_scale / (y_scale * n), rounded, plus y_zp.
- QLinearAveragePool: AveragePool of the dequantized x, then round(y / y_scale + y_zp).
- QGemm: an int32 gemm plus the int32 C, requantized as QLinearMatMul is, by
  alpha * a_scale * b_scale / y_scale; a float32 result where y_zero_point is left out.
Rounding is half to even and saturation the cast's. Scales are float32 and one value each
(QGemm's b_scale one per column too); zero points are of the quantized type, 0 where left out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Converter, Ctx, Invalid, axis_index
from . import pool, unary
from .common import optional_input
from .quantize import (
    centred,
    check_8bit,
    per_column,
    quantize_rounded,
    quantize_to,
    requantize,
    same_type,
)


def _one(cx: Ctx, name: str, what: str) -> Symbol:
    """A per-tensor scale or zero point, one value (onnxruntime takes a scalar or a
    one-element vector; a per-channel parameter here would be a different op)."""
    shape = cx.shape(name)
    if math.prod(shape) != 1:
        raise Invalid(f"{what} '{name}' of shape {shape} must hold one value: these ops "
                      "quantize per tensor")  # fmt: skip
    return cx.reshape(cx.sym(name), ())


def _scale(cx: Ctx, name: str, what: str) -> Symbol:
    if cx.dtype_name(name) != "float":
        raise Invalid(f"{what} '{name}' is {cx.dtype_name(name)}: scales are float32")
    return _one(cx, name, what)


def _zero_point(cx: Ctx, name: str | None, x: str, what: str) -> Symbol | None:
    same_type(cx, x, name, what)
    return _one(cx, name, what) if name is not None else None


def _as_float(cx: Ctx, zp: Symbol | None) -> Symbol:
    """A zero point as float32, 0 where it is left out."""
    return cx.param(np.float32(0)) if zp is None else cx.op("cast", zp, to="float")


def _dequantized(cx: Ctx, x: Symbol, scale: Symbol, zp: Symbol | None) -> Symbol:
    """(x - zp) * scale in float32; the difference is exact, so the product is rounded once,
    as onnxruntime's scale * (x - zp) is."""
    y = cx.op("cast", x, to="float")
    if zp is not None:
        y = cx.op("sub", y, cx.op("cast", zp, to="float"))
    return cx.op("mul", y, scale)


def _rounded(cx: Ctx, y: Symbol, to: str) -> Symbol:
    """y, its zero point already added (onnxruntime's elementwise kernels add it before
    rounding), rounded half to even and saturated to `to`."""
    return cx.op("cast", cx.op("round", y), to=to)


# --- lookup tables: QLinearSigmoid, QLinearLeakyRelu, requantizing ---------------------------


def _through_table(cx: Ctx, x: str, fn: Callable[[Symbol], Symbol], scale: Symbol,
                   zp: Symbol | None, y_scale: Symbol, y_zp: Symbol | None) -> Symbol:  # fmt: skip
    """quantize(fn(dequantize(x))) as onnxruntime computes it: a table of the 256 values it
    takes, gathered at x. The table lists the type's values in the order of their bit
    patterns, so an int8 x indexes it as it is (a negative index counts from the end)."""
    t = cx.dtype_name(x)
    values = cx.param(np.arange(256, dtype=np.uint8).view(t))
    table = quantize_to(cx, fn(_dequantized(cx, values, scale, zp)), y_scale, y_zp, t)
    return cx.op("gather", table, cx.op("cast", cx.sym(x), to="int32"), axis=0)


def _float_op(cx: Ctx, convert: Converter, op_type: str, x: Symbol, at: Attrs) -> Symbol:
    """The float ONNX op's own converter applied to a dequantized value: a stand-in node of
    `op_type` reads x under a fresh name, with this node's attributes (LeakyRelu's alpha,
    AveragePool's window), so the quantized op computes what the float one would."""
    from onnx import helper

    name = cx.fresh(f"{op_type}_x")
    cx.syms[name] = x
    (y,) = convert(cx, helper.make_node(op_type, [name], [cx.fresh(f"{op_type}_y")]), at)
    return y


def _unary_operands(cx: Ctx, node: Any) -> tuple[str, Symbol, Symbol | None, Symbol,
                                                 Symbol | None]:  # fmt: skip
    """The five inputs in the order every one-operand op has them (X, X_scale, X_zero_point,
    Y_scale, Y_zero_point; lower case in Softmax and the pools), checked alike."""
    x = node.input[0]
    check_8bit(cx, [x], node.op_type)
    return (x, _scale(cx, node.input[1], "X_scale"),
            _zero_point(cx, optional_input(node, 2), x, "X_zero_point"),
            _scale(cx, node.input[3], "Y_scale"),
            _zero_point(cx, optional_input(node, 4), x, "Y_zero_point"))  # fmt: skip


def qlinear_sigmoid(cx: Ctx, node: Any, at: Attrs) -> list:
    x, scale, zp, y_scale, y_zp = _unary_operands(cx, node)
    return [_through_table(cx, x, lambda v: cx.op("sigmoid", v), scale, zp, y_scale, y_zp)]


def qlinear_leaky_relu(cx: Ctx, node: Any, at: Attrs) -> list:
    x, scale, zp, y_scale, y_zp = _unary_operands(cx, node)

    def leaky_relu(v: Symbol) -> Symbol:
        return _float_op(cx, unary.leaky_relu, "LeakyRelu", v, at)

    return [_through_table(cx, x, leaky_relu, scale, zp, y_scale, y_zp)]


def _known(cx: Ctx, name: str | None) -> float | None:
    """A scale's or zero point's value where the import knows it (a left-out zero point
    is 0), else None."""
    if name is None:
        return 0.0
    return float(np.asarray(cx.consts[name]).reshape(-1)[0]) if cx.is_const(name) else None


def _requantized(cx: Ctx, x: str, params: tuple[str, str | None],
                 into: tuple[str, str | None]) -> Symbol:  # fmt: skip
    """x, quantized by params (scale, zero point), in the quantization `into`: x itself
    where both are the same constants (onnxruntime copies it then), else through a table."""
    known = [_known(cx, n) for n in (*params, *into)]
    if None not in known and known[:2] == known[2:]:
        return cx.sym(x)
    scale, zp = _scale(cx, params[0], "scale"), _zero_point(cx, params[1], x, "zero point")
    y_scale = _scale(cx, into[0], "output scale")
    y_zp = _zero_point(cx, into[1], x, "output zero point")
    return _through_table(cx, x, lambda v: v, scale, zp, y_scale, y_zp)


def qlinear_concat(cx: Ctx, node: Any, at: Attrs) -> list:
    """Y_scale, Y_zero_point, then a (tensor, scale, zero point) triple per input."""
    axis = at.get("axis")
    if axis is None:
        raise Invalid("QLinearConcat needs its axis attribute")
    ins = list(node.input)
    if len(ins) < 5 or (len(ins) - 2) % 3:
        raise Invalid(f"its {len(ins)} inputs must be Y_scale, Y_zero_point, then one "
                      "(tensor, scale, zero point) triple per input")  # fmt: skip
    xs = ins[2::3]
    check_8bit(cx, xs, "QLinearConcat")
    for x in xs[1:]:
        same_type(cx, xs[0], x, "input")
    into = (ins[0], ins[1] or None)
    same_type(cx, xs[0], into[1], "Y_zero_point")
    parts = [_requantized(cx, x, (s, z or None), into) for x, s, z in
             zip(xs, ins[3::3], ins[4::3])]  # fmt: skip
    return [cx.op("concat", *parts, axis=int(axis))]


def qlinear_where(cx: Ctx, node: Any, at: Attrs) -> list:
    """condition, X, x_scale, x_zero_point, Y, y_scale, y_zero_point, z_scale, z_zero_point:
    X and Y are requantized into Z's quantization, then selected."""
    cond, x, y = node.input[0], node.input[1], node.input[4]
    if cx.dtype_name(cond) != "bool":
        raise Invalid(f"condition '{cond}' is {cx.dtype_name(cond)}, not bool")
    check_8bit(cx, [x, y], "QLinearWhere")
    same_type(cx, x, y, "Y")
    into = (node.input[7], optional_input(node, 8))
    same_type(cx, x, into[1], "z_zero_point")
    xq = _requantized(cx, x, (node.input[2], optional_input(node, 3)), into)
    yq = _requantized(cx, y, (node.input[5], optional_input(node, 6)), into)
    return [cx.op("where", cx.sym(cond), xq, yq)]


# --- QLinearAdd, QLinearMul ------------------------------------------------------------------


def _binary_operands(cx: Ctx, node: Any) -> tuple:
    """A, B and the three (scale, zero point) pairs of A, B and C."""
    a, b = node.input[0], node.input[3]
    check_8bit(cx, [a, b], node.op_type)
    same_type(cx, a, b, "B")
    pairs = [(_scale(cx, node.input[i], f"{n}_scale"),
              _zero_point(cx, optional_input(node, i + 1), a, f"{n}_zero_point"))
             for i, n in ((1, "A"), (4, "B"), (6, "C"))]  # fmt: skip
    return a, b, pairs


def qlinear_add(cx: Ctx, node: Any, at: Attrs) -> list:
    """In onnxruntime's (SSE2) order, so that its float32 roundings are the same ones: the
    zero points' part first, then a's, then b's, the output zero point inside the sum."""
    a, b, ((sa, za), (sb, zb), (sc, zc)) = _binary_operands(cx, node)
    ra, rb = cx.op("div", sa, sc), cx.op("div", sb, sc)
    shift = cx.op("add", cx.op("mul", ra, _as_float(cx, za)), cx.op("mul", rb, _as_float(cx, zb)))
    y = cx.op("sub", _as_float(cx, zc), shift)
    y = cx.op("add", y, cx.op("mul", cx.op("cast", cx.sym(a), to="float"), ra))
    y = cx.op("add", y, cx.op("mul", cx.op("cast", cx.sym(b), to="float"), rb))
    return [_rounded(cx, y, cx.dtype_name(a))]


def qlinear_mul(cx: Ctx, node: Any, at: Attrs) -> list:
    """The product of the centred values is exact in int32, so one float32 product and one
    sum (the output zero point, before rounding, as onnxruntime adds it) remain."""
    a, b, ((sa, za), (sb, zb), (sc, zc)) = _binary_operands(cx, node)
    product = cx.op("mul", centred(cx, a, za), centred(cx, b, zb))
    ratio = cx.op("div", cx.op("mul", sa, sb), sc)
    y = cx.op("add", cx.op("mul", cx.op("cast", product, to="float"), ratio), _as_float(cx, zc))
    return [_rounded(cx, y, cx.dtype_name(a))]


# --- QLinearSoftmax --------------------------------------------------------------------------


def qlinear_softmax(cx: Ctx, node: Any, at: Attrs) -> list:
    """Its opset attribute is that of the Softmax it replaces: below 13 the input is seen as
    2-D, split at axis, from 13 on softmax runs along axis. The axis defaults to -1 for every
    opset (the schema's default, which onnxruntime applies, not Softmax-1's 1)."""
    opset = at.get("opset")
    if opset is None:
        raise Invalid("QLinearSoftmax needs its opset attribute (the replaced Softmax's)")
    x, scale, zp, y_scale, y_zp = _unary_operands(cx, node)
    v = _dequantized(cx, cx.sym(x), scale, zp)
    shape = cx.shape(v)
    axis = int(at.get("axis", -1))
    if opset >= 13:
        p = cx.op("softmax", v, axis=axis)
    else:
        split = axis_index(axis, max(len(shape), 1))
        flat = (math.prod(shape[:split]), math.prod(shape[split:]))
        p = cx.reshape(cx.op("softmax", cx.reshape(v, flat), axis=-1), shape)
    steps = cx.op("floor", cx.op("div", cx.param(np.float32(1)), y_scale))
    return [quantize_rounded(cx, cx.op("round", cx.op("mul", p, steps)), y_zp, cx.dtype_name(x))]


# --- QLinearGlobalAveragePool, QLinearAveragePool --------------------------------------------


def _spatial_axes(cx: Ctx, x: str, channels_last: bool) -> list[int]:
    rank = len(cx.shape(x))
    if rank < 3:
        raise Invalid(f"x of shape {cx.shape(x)} must be N,C,spatial... (or N,spatial...,C "
                      "with channels_last=1), of rank 3 at least")  # fmt: skip
    return list(range(1, rank - 1)) if channels_last else list(range(2, rank))


def _global_average(cx: Ctx, x: str, params: tuple, channels_last: bool) -> Symbol:
    """onnxruntime's integer mean: the exact int32 sum of x - x_zp over the spatial axes,
    times x_scale / (y_scale * n) in float32, rounded, plus y_zp."""
    scale, zp, y_scale, y_zp = params
    axes = _spatial_axes(cx, x, channels_last)
    n = math.prod(cx.shape(x)[a] for a in axes)
    total = cx.op("sum", centred(cx, x, zp), axes=axes, keepdims=True)
    factor = cx.op("div", scale, cx.op("mul", y_scale, cx.param(np.float32(n))))
    mean = cx.op("round", cx.op("mul", cx.op("cast", total, to="float"), factor))
    return quantize_rounded(cx, mean, y_zp, cx.dtype_name(x))


def qlinear_global_average_pool(cx: Ctx, node: Any, at: Attrs) -> list:
    x, *params = _unary_operands(cx, node)
    return [_global_average(cx, x, tuple(params), bool(at.get("channels_last", 0)))]


def qlinear_average_pool(cx: Ctx, node: Any, at: Attrs) -> list:
    """AveragePool's converter pools the dequantized x (channels first); a window that
    covers the whole unpadded input is onnxruntime's integer global mean instead."""
    x, scale, zp, y_scale, y_zp = _unary_operands(cx, node)
    channels_last = bool(at.get("channels_last", 0))
    spatial = [cx.shape(x)[a] for a in _spatial_axes(cx, x, channels_last)]
    unpadded = at.get("auto_pad", "NOTSET") in ("NOTSET", "VALID") and not any(at.get("pads") or [])
    if list(at.get("kernel_shape") or []) == spatial and unpadded:
        at.get("strides"), at.get("ceil_mode"), at.get("count_include_pad")  # one window
        return [_global_average(cx, x, (scale, zp, y_scale, y_zp), channels_last)]
    v = _dequantized(cx, cx.sym(x), scale, zp)
    rank = len(cx.shape(v))
    if channels_last:
        v = cx.op("transpose", v, perm=[0, rank - 1, *range(1, rank - 1)])
    y = _float_op(cx, pool.pool("avg_pool2d"), "AveragePool", v, at)
    if channels_last:
        y = cx.op("transpose", y, perm=[0, *range(2, rank), 1])
    y = cx.op("add", cx.op("div", y, y_scale), _as_float(cx, y_zp))
    return [_rounded(cx, y, cx.dtype_name(x))]


# --- QGemm -----------------------------------------------------------------------------------


def qgemm(cx: Ctx, node: Any, at: Attrs) -> list:
    """A, a_scale, a_zero_point, B, b_scale, b_zero_point, C, y_scale, y_zero_point: the
    int32 product of the centred operands plus C (int32, of scale alpha * a_scale * b_scale),
    requantized by alpha * a_scale * b_scale / y_scale in onnxruntime's order; without
    y_zero_point the scaled float32 result (divided by y_scale where that is given)."""
    a, b = node.input[0], node.input[3]
    check_8bit(cx, [a, b], "QGemm")
    trans_a, trans_b = bool(at.get("transA", 0)), bool(at.get("transB", 0))
    sa, sb = cx.shape(a), cx.shape(b)
    if len(sa) != 2 or len(sb) != 2:
        raise Invalid(f"A of shape {sa} and B of shape {sb} must be matrices")
    n = sb[0] if trans_b else sb[1]
    a_zp = _zero_point(cx, optional_input(node, 2), a, "a_zero_point")
    b_zp = optional_input(node, 5)
    same_type(cx, b, b_zp, "b_zero_point")
    b_zp_col = per_column(cx, b_zp, n, "b_zero_point") if b_zp else None
    if b_zp_col is not None and trans_b and cx.shape(b_zp_col):
        b_zp_col = cx.reshape(b_zp_col, (n, 1))  # B is N x K: one zero point per row of it
    c = optional_input(node, 6)
    if c is not None and cx.dtype_name(c) != "int32":
        raise Invalid(f"C '{c}' is {cx.dtype_name(c)}: it is int32, quantized with "
                      "alpha * a_scale * b_scale")  # fmt: skip
    operands = [centred(cx, a, a_zp), centred(cx, b, b_zp_col)]
    acc = cx.op("gemm", *operands, *([cx.sym(c)] if c else []), trans_a=trans_a,
                trans_b=trans_b)  # fmt: skip
    a_scale = _scale(cx, node.input[1], "a_scale")
    alpha = float(at.get("alpha", 1.0))
    if alpha != 1.0:
        a_scale = cx.op("mul", cx.param(np.float32(alpha)), a_scale)
    if cx.dtype_name(node.input[4]) != "float":
        raise Invalid(f"b_scale '{node.input[4]}' is {cx.dtype_name(node.input[4])}: "
                      "scales are float32")  # fmt: skip
    b_scale = per_column(cx, node.input[4], n, "b_scale")
    y_scale = _scale(cx, node.input[7], "y_scale") if optional_input(node, 7) else None
    y_zp = optional_input(node, 8)
    if y_zp is None:
        scale = cx.op("mul", a_scale, b_scale)
        if y_scale is not None:
            scale = cx.op("div", scale, y_scale)
        return [cx.op("mul", cx.op("cast", acc, to="float"), scale)]
    check_8bit(cx, [y_zp], "QGemm")
    if y_scale is None:
        raise Invalid("y_zero_point is given without y_scale")
    to = cx.dtype_name(y_zp)
    return [requantize(cx, acc, [a_scale, b_scale, y_scale], _one(cx, y_zp, "y_zero_point"), to)]
