"""Quantized ops: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear (the QDQ
format), MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv (the QOperator format).

Integer products run as int32 gemms, as onnxruntime computes them: exact, and wrapping only
where the spec lets a 32-bit accumulation overflow. conv2d has no integer path, so the
integer convolutions gather their windows (im2col by slices) into one int32 gemm rather than
convolve in float32, which is exact only while every partial sum stays below 2**24. Scaling
and rounding happen in float32: rounding is the `round` kernel's (half to even), and the
saturation to the quantized type is the `cast` kernel's.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from ....device.dtypes import dtype as resolve_dtype
from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid, Unsupported, axis_index, device_dtype_name
from .common import Window, optional_input
from .linalg import product

# The integer types the device holds that the quantizing ops produce (float8, int4 and the
# like have no device dtype: the frontend refuses them as it reads the model's types).
_QUANTIZED = ("int8", "uint8", "int16", "uint16")
# What MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv take (8-bit only).
_EIGHT_BIT = ("int8", "uint8")


def _as(cx: Ctx, s: Symbol, to: str) -> Symbol:
    return s if cx.dtype(s).name == to else cx.op("cast", s, to=to)


def _float32(cx: Ctx, s: Symbol) -> Symbol:
    """s in float32, where sums of integers and rounded quotients stay exact below 2**24
    (float16 would not hold uint16's range); a double stays double."""
    return s if cx.dtype(s).name == "double" else _as(cx, s, "float")


def same_type(cx: Ctx, x: str, zp: str | None, what: str) -> str:
    """x's type, which its zero point (or another operand that must match it) shares: the
    requantizing arithmetic reads both as the one quantized type."""
    t = cx.dtype_name(x)
    if zp is not None and cx.dtype_name(zp) != t:
        raise Invalid(f"{what} '{zp}' is {cx.dtype_name(zp)}, but '{x}' is {t}: they must "
                      "have the same type")  # fmt: skip
    return t


# --- QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear ---------------------------------


def _placement(cx: Ctx, name: str, x_shape: tuple[int, ...], axis: int, block: int):
    """How a scale or zero point broadcasts over x: ("tensor", ()) one value; ("axis",
    shape) a vector along `axis`, reshaped to `shape`; ("block", ax) with `block > 0` one
    value per block of `block` elements along axis `ax`."""
    shape = cx.shape(name)
    if block < 0:
        raise Invalid(f"block_size {block} must be positive")
    if math.prod(shape) == 1 and (block == 0 or len(shape) != len(x_shape)):
        return "tensor", ()
    ax = axis_index(axis, len(x_shape))
    if block == 0:
        if len(shape) != 1 or shape[0] != x_shape[ax]:
            raise Invalid(f"'{name}' of shape {shape} must be a scalar or, per axis, a vector "
                          f"of x's length {x_shape[ax]} along axis {axis} (or give block_size "
                          "for blocked quantization)")  # fmt: skip
        return "axis", (shape[0], *[1] * (len(x_shape) - ax - 1))
    want = (*x_shape[:ax], -(-x_shape[ax] // block), *x_shape[ax + 1 :])
    if shape != want:
        raise Invalid(f"'{name}' of shape {shape} does not block x of shape {x_shape} by "
                      f"block_size {block} along axis {axis}: expected {want}")  # fmt: skip
    return "block", ax


def _along(cx: Ctx, name: str, x_shape: tuple[int, ...], axis: int, block: int) -> Symbol:
    """A scale or zero point made to broadcast over x (see `_placement`), a block's value
    repeated on the device by a gather."""
    kind, how = _placement(cx, name, x_shape, axis, block)
    s = cx.sym(name)
    if kind != "block":
        return cx.reshape(s, how)
    index = cx.param(np.arange(x_shape[how], dtype=np.int64) // block)
    return cx.op("gather", s, index, axis=how)


def _host_along(cx: Ctx, name: str, x_shape: tuple[int, ...], axis: int, block: int):
    """`_along` of a constant, on the host."""
    kind, how = _placement(cx, name, x_shape, axis, block)
    v = cx.const(name)
    if kind != "block":
        return v.reshape(how)
    return np.take(v, np.arange(x_shape[how]) // block, axis=how)


def quantize_to(cx: Ctx, x: Symbol, scale: Symbol, zp: Symbol | None, to: str) -> Symbol:
    """saturate(round_half_even(x / scale) + zp) as `to`; x and scale share the dtype the
    division is in. The sum is in float32, exact below 2**24 and saturated by the cast
    beyond that, so no clip is needed."""
    return quantize_rounded(cx, _float32(cx, cx.op("round", cx.op("div", x, scale))), zp, to)


def quantize_linear(cx: Ctx, node: Any, at: Attrs) -> list:
    """The division is in the scale's type, or in the `precision` attribute's (opset 23),
    as the spec says; `saturate` concerns only float8 targets, which the device lacks."""
    at.get("saturate")
    x_name, s_name, zp_name = node.input[0], node.input[1], optional_input(node, 2)
    to = device_dtype_name(at.get("output_dtype"), "output_dtype") if at.get("output_dtype") \
        else "uint8"  # fmt: skip
    if zp_name is not None:
        zp_type = cx.dtype_name(zp_name)
        if at.get("output_dtype") and zp_type != to:
            raise Invalid(f"output_dtype is {to} but y_zero_point '{zp_name}' is {zp_type}")
        to = zp_type
    if to not in _QUANTIZED:
        raise Unsupported(f"quantizing to {to}: the device's quantized types are "
                          f"{', '.join(_QUANTIZED)}")  # fmt: skip
    precision = (device_dtype_name(at.get("precision"), "precision") if at.get("precision")
                 else cx.dtype_name(s_name))  # fmt: skip
    if not resolve_dtype(precision).is_float:
        raise Unsupported(f"x / y_scale in {precision} (the scale's type, or precision) is "
                          "not a floating-point division; give precision=FLOAT")  # fmt: skip
    x = cx.sym(x_name)
    axis, block = int(at.get("axis", 1)), int(at.get("block_size", 0))
    scale = _as(cx, _along(cx, s_name, cx.shape(x), axis, block), precision)
    zp = _along(cx, zp_name, cx.shape(x), axis, block) if zp_name else None
    return [quantize_to(cx, _as(cx, x, precision), scale, zp, to)]


def dequantize_linear(cx: Ctx, node: Any, at: Attrs) -> list:
    """(x - zero point) * scale in float32, then rounded once to the output type, as the
    reference computes it: x - zero point is exact in float32 for every type but int32."""
    x_name, s_name, zp_name = node.input[0], node.input[1], optional_input(node, 2)
    t = same_type(cx, x_name, zp_name, "x_zero_point")
    if t not in (*_QUANTIZED, "int32"):
        raise Unsupported(f"dequantizing {t}: the device's quantized types are "
                          f"{', '.join((*_QUANTIZED, 'int32'))}")  # fmt: skip
    to = device_dtype_name(at.get("output_dtype"), "output_dtype") if at.get("output_dtype") \
        else cx.dtype_name(s_name)  # fmt: skip
    axis, block = int(at.get("axis", 1)), int(at.get("block_size", 0))
    if all(cx.is_const(n) for n in (x_name, s_name, zp_name) if n):
        return [_host_dequantized(cx, x_name, s_name, zp_name, axis, block, to)]
    x = cx.sym(x_name)
    y = _float32(cx, x)
    if zp_name is not None:
        zp = _along(cx, zp_name, cx.shape(x), axis, block)
        y = cx.op("sub", y, _as(cx, zp, cx.dtype(y).name))
    y = cx.op("mul", y, _float32(cx, _along(cx, s_name, cx.shape(x), axis, block)))
    return [_as(cx, y, to)]


def _host_dequantized(cx: Ctx, x_name: str, s_name: str, zp_name: str | None, axis: int,
                      block: int, to: str) -> np.ndarray:  # fmt: skip
    """What the device would compute, on the host: a QDQ model's weights are constants
    dequantized (ONNX's reference evaluator, which folds constants, has no DequantizeLinear
    before opset 19), and a ConvTranspose needs its weights known at import time."""
    x = cx.const(x_name)
    scale = _host_along(cx, s_name, x.shape, axis, block)
    y = x.astype(np.float32)
    if zp_name is not None:
        y = y - _host_along(cx, zp_name, x.shape, axis, block).astype(np.float32)
    y = y * scale.astype(np.float64 if scale.dtype == np.float64 else np.float32)
    out = resolve_dtype(to)
    return np.asarray(y, dtype=out.host or out.compute)  # numpy makes 0-d results scalars


def dynamic_quantize_linear(cx: Ctx, node: Any, at: Attrs) -> list:
    """uint8 with the scale and zero point that map [min(x, 0), max(x, 0)] onto [0, 255],
    in the reference's float32 steps (a scale of 1/255 for an all-zero x)."""
    x = cx.sym(node.input[0])
    if cx.dtype(x).name != "float":
        raise Unsupported(f"DynamicQuantizeLinear of {cx.dtype(x).name}: only float")

    def const(v: float) -> Symbol:
        return cx.param(np.array(v), like=x)

    hi = cx.op("maximum", cx.op("max", x, keepdims=False), const(0))
    lo = cx.op("minimum", cx.op("min", x, keepdims=False), const(0))
    span = cx.op("sub", hi, lo)
    span = cx.op("where", cx.op("equal", span, const(0)), const(1), span)
    scale = cx.op("div", span, const(255))
    zp = cx.op("round", cx.op("clip", cx.op("neg", cx.op("div", lo, scale)), min=0.0, max=255.0))
    return [quantize_to(cx, x, scale, zp, "uint8"), scale, cx.op("cast", zp, to="uint8")]


# --- integer products: MatMulInteger, QLinearMatMul -------------------------------------------


def _per_row(cx: Ctx, name: str, rows: int | None, what: str) -> Symbol:
    """A quantization parameter of a matmul's a, or of ConvInteger's w: one value, a vector
    of one value per row (per output channel), or a tensor that broadcasts as it is."""
    s = cx.sym(name)
    shape = cx.shape(s)
    if math.prod(shape) == 1:
        return cx.reshape(s, ())
    if len(shape) == 1:
        if rows is None or shape[0] != rows:
            raise Invalid(f"{what} '{name}' of shape {shape} must hold one value, or one per "
                          f"row ({rows})")  # fmt: skip
        return cx.reshape(s, (rows, 1))
    return s


def per_column(cx: Ctx, name: str, cols: int, what: str) -> Symbol:
    """A quantization parameter of a matmul's b or y: one value, one per column, or a tensor
    that broadcasts as it is."""
    s = cx.sym(name)
    shape = cx.shape(s)
    if math.prod(shape) == 1:
        return cx.reshape(s, ())
    if len(shape) == 1 and shape[0] != cols:
        raise Invalid(f"{what} '{name}' of shape {shape} must hold one value, or one per "
                      f"column ({cols})")  # fmt: skip
    return s


def centred(cx: Ctx, x_name: str, zp: Symbol | None) -> Symbol:
    """x - zero point in int32, which holds it exactly for 8-bit x."""
    x = _as(cx, cx.sym(x_name), "int32")
    return x if zp is None else cx.op("sub", x, _as(cx, zp, "int32"))


def check_8bit(cx: Ctx, names_: list[str], op: str) -> None:
    """Refuse, naming the value and its type, what an 8-bit-only op is given otherwise."""
    for n in names_:
        if cx.dtype_name(n) not in _EIGHT_BIT:
            raise Unsupported(f"{op} of {cx.dtype_name(n)} '{n}': it takes int8 or uint8")


def _int_matmul(cx: Ctx, a_name: str, b_name: str, a_zp: str | None, b_zp: str | None,
                op: str) -> Symbol:  # fmt: skip
    """(a - a_zero_point) @ (b - b_zero_point) as an int32 gemm; a zero point of a is
    per row (the spec's reading of a vector: shape [M] for an [M, K] a), b's per column."""
    sa, sb = cx.shape(a_name), cx.shape(b_name)
    check_8bit(cx, [a_name, b_name], op)
    same_type(cx, a_name, a_zp, "a_zero_point")
    same_type(cx, b_name, b_zp, "b_zero_point")
    rows = sa[-2] if len(sa) > 1 else None
    a = centred(cx, a_name, _per_row(cx, a_zp, rows, "a_zero_point") if a_zp else None)
    b = centred(cx, b_name, per_column(cx, b_zp, sb[-1], "b_zero_point") if b_zp else None)
    return product(cx, a, b)


def requantize(cx: Ctx, acc: Symbol, scales: list[Symbol], zp: Symbol | None,
               to: str) -> Symbol:  # fmt: skip
    """An int32 accumulator as quantized `to`: saturate(round(acc * m) + zp) with
    m = x_scale * w_scale / y_scale in the scales' own type, in the reference's order. The
    product is float32, as onnxruntime computes it; the reference's is float64, so the two
    differ where the float32 product rounds onto a half (about one result in 2**17) or the
    accumulator passes 2**24."""
    a, b, y = scales
    m = cx.op("div", cx.op("mul", a, b), y)
    return quantize_rounded(cx, cx.op("round", cx.op("mul", _float32(cx, acc), _float32(cx, m))),
                            zp, to)  # fmt: skip


def quantize_rounded(cx: Ctx, y: Symbol, zp: Symbol | None, to: str) -> Symbol:
    """Rounded y plus the zero point, saturated to `to` by the cast."""
    if zp is not None:
        y = cx.op("add", y, _as(cx, zp, cx.dtype(y).name))
    return cx.op("cast", y, to=to)


def matmul_integer(cx: Ctx, node: Any, at: Attrs) -> list:
    zps = optional_input(node, 2), optional_input(node, 3)
    return [_int_matmul(cx, node.input[0], node.input[1], *zps, "MatMulInteger")]


def qlinear_matmul(cx: Ctx, node: Any, at: Attrs) -> list:
    a_name, b_name, y_zp = node.input[0], node.input[3], optional_input(node, 7)
    to = cx.dtype_name(y_zp) if y_zp else cx.dtype_name(a_name)
    check_8bit(cx, [a_name, b_name], "QLinearMatMul")
    if to not in _EIGHT_BIT:
        raise Unsupported(f"QLinearMatMul to {to}: it gives int8 or uint8")
    acc = _int_matmul(
        cx, a_name, b_name, optional_input(node, 2), optional_input(node, 5), "QLinearMatMul"
    )
    sa, cols = cx.shape(a_name), cx.shape(acc)[-1] if cx.shape(acc) else 1
    scales = [
        _per_row(cx, node.input[1], sa[-2] if len(sa) > 1 else None, "a_scale"),
        per_column(cx, node.input[4], cols, "b_scale"),
        per_column(cx, node.input[6], cols, "y_scale"),
    ]
    zp = per_column(cx, y_zp, cols, "y_zero_point") if y_zp else None
    return [requantize(cx, acc, scales, zp, to)]


# --- integer convolutions: ConvInteger, QLinearConv -------------------------------------------


def _int_conv(cx: Ctx, x: Symbol, w: Symbol, at: Attrs) -> Symbol:
    """An int32 convolution of N,C,spatial... x by M,C/group,kernel... w (any spatial rank):
    the padded x's window at each kernel tap, sliced out, gathered into columns
    [N, group, C/group * taps, outputs], and multiplied by w as one batched int32 gemm."""
    xs, ws = cx.shape(x), cx.shape(w)
    r = len(xs) - 2
    if r < 1 or len(ws) != r + 2:
        raise Invalid(f"x of shape {xs} and w of shape {ws} must be N,C,spatial... and "
                      "M,C/group,kernel... of one rank, at least 3")  # fmt: skip
    kernel = list(ws[2:])
    if at.get("kernel_shape") and list(at.get("kernel_shape")) != kernel:
        raise Invalid(f"kernel_shape {at.get('kernel_shape')} differs from the weights' "
                      f"kernel {kernel}")  # fmt: skip
    win = Window(at, xs, kernel)
    g = int(at.get("group", 1))
    n, c, m = xs[0], xs[1], ws[0]
    if g < 1 or c % g or m % g or ws[1] != c // g:
        raise Invalid(f"group={g} must divide x's {c} channels and w's {m} outputs, and "
                      f"w must have {c // max(g, 1)} channels per group; w is {ws}")  # fmt: skip
    if any(win.begin) or any(win.end):
        x = cx.op("pad", x, pads=[0, 0, *win.begin, 0, 0, *win.end], value=0.0)
    size = cx.shape(x)[2:]
    out = [(d - (k - 1) * dil - 1) // s + 1
           for d, k, s, dil in zip(size, kernel, win.stride, win.dilation)]  # fmt: skip
    if min(out) < 1:
        raise Invalid(f"the dilated kernel {kernel} does not fit the padded input {size}")
    taps = []
    for tap in itertools.product(*(range(k) for k in kernel)):
        starts = [t * d for t, d in zip(tap, win.dilation)]
        ends = [b + (o - 1) * s + 1 for b, o, s in zip(starts, out, win.stride)]
        sl = cx.op("slice", x, starts=starts, ends=ends, axes=list(range(2, 2 + r)),
                   steps=list(win.stride))  # fmt: skip
        taps.append(cx.reshape(sl, (n, g, c // g, 1, math.prod(out))))
    cols = taps[0] if len(taps) == 1 else cx.op("concat", *taps, axis=3)
    cols = cx.reshape(cols, (n, g, c // g * len(taps), math.prod(out)))
    y = cx.op("gemm", cx.reshape(w, (g, m // g, c // g * len(taps))), cols)
    return cx.reshape(y, (n, m, *out))


def _conv_operands(cx: Ctx, node: Any, x_zp: str | None, w_zp: str | None) -> tuple:
    """x - x_zero_point and w - w_zero_point in int32; w's zero point is one value or one
    per output channel."""
    x_name, w_name = node.input[0], node.input[3 if node.op_type == "QLinearConv" else 1]
    check_8bit(cx, [x_name, w_name], node.op_type)
    same_type(cx, x_name, x_zp, "x_zero_point")
    same_type(cx, w_name, w_zp, "w_zero_point")
    ws = cx.shape(w_name)
    x = centred(cx, x_name, _per_row(cx, x_zp, None, "x_zero_point") if x_zp else None)
    wz = _channel(cx, w_zp, ws[0], len(ws) - 1, "w_zero_point") if w_zp else None
    return x, centred(cx, w_name, wz)


def _channel(cx: Ctx, name: str, channels: int, trailing: int, what: str) -> Symbol:
    """One value, or one per output channel followed by `trailing` axes of size 1 (against
    w, or against the N,M,spatial... result)."""
    s = cx.sym(name)
    if math.prod(cx.shape(s)) == 1:
        return cx.reshape(s, ())
    if cx.shape(s) != (channels,):
        raise Invalid(f"{what} '{name}' of shape {cx.shape(s)} must hold one value, or one "
                      f"per output channel ({channels})")  # fmt: skip
    return cx.reshape(s, (channels, *[1] * trailing))


def conv_integer(cx: Ctx, node: Any, at: Attrs) -> list:
    x, w = _conv_operands(cx, node, optional_input(node, 2), optional_input(node, 3))
    return [_int_conv(cx, x, w, at)]


def qlinear_conv(cx: Ctx, node: Any, at: Attrs) -> list:
    """The int32 convolution plus the int32 bias B, requantized with x_scale * w_scale /
    y_scale (w_scale one per output channel or one for all)."""
    x, w = _conv_operands(cx, node, optional_input(node, 2), optional_input(node, 5))
    y_zp = optional_input(node, 7)
    to = cx.dtype_name(y_zp) if y_zp else cx.dtype_name(node.input[0])
    if to not in _EIGHT_BIT:
        raise Unsupported(f"QLinearConv to {to}: it gives int8 or uint8")
    acc = _int_conv(cx, x, w, at)
    m, trailing = cx.shape(acc)[1], len(cx.shape(acc)) - 2
    if optional_input(node, 8):
        acc = cx.op("add", acc, _as(cx, _channel(cx, node.input[8], m, trailing, "B"), "int32"))
    scales = [
        _scalar(cx, node.input[1], "x_scale"),
        _channel(cx, node.input[4], m, trailing, "w_scale"),
        _scalar(cx, node.input[6], "y_scale"),
    ]
    zp = _scalar(cx, y_zp, "y_zero_point") if y_zp else None
    return [requantize(cx, acc, scales, zp, to)]


def _scalar(cx: Ctx, name: str, what: str) -> Symbol:
    return _per_row(cx, name, None, what)
