"""Pooling: MaxPool (with its Indices output), AveragePool, their global forms, LpPool, and
MaxUnpool, which puts values back at the positions MaxPool's indices give."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Converter, Ctx, Invalid, Unsupported
from .common import Window, as4d, from4d, optional_input, pad_axis, spatial_rank


def _pooled(cx: Ctx, at: Attrs, x: Symbol, op: str, kernel: str, extra: dict) -> Symbol:
    """x pooled by the device's 2-D `kernel` over the window the attributes give, for 1 to 3
    spatial axes."""
    rank = spatial_rank(cx, x, op, (1, 2, 3))
    win = Window(at, cx.shape(x), list(at.get("kernel_shape")))

    def pool(v: Symbol, axes: slice, rows: bool = False) -> Symbol:
        return cx.op(kernel, v, **win.attrs2d(axes, rows), **extra)

    if rank < 3:
        return from4d(cx, pool(as4d(cx, x), slice(None)), rank)
    # Windows are boxes, so a 3-D max or mean is a 2-D one over H, W then one over D.
    n, c, d, h, w = cx.shape(x)
    y = pool(cx.reshape(x, (n, c * d, h, w)), slice(1, 3))
    oh, ow = cx.shape(y)[2:]
    y = pool(cx.reshape(y, (n, c, d, oh * ow)), slice(0, 1), rows=True)
    return cx.reshape(y, (n, c, cx.shape(y)[2], oh, ow))


def pool(kernel: str) -> Converter:
    def imp(cx: Ctx, node: Any, at: Attrs) -> list:
        extra = {"ceil_mode": bool(at.get("ceil_mode", 0))}
        if kernel == "avg_pool2d":
            extra["count_include_pad"] = bool(at.get("count_include_pad", 0))
        order = int(at.get("storage_order", 0)) if kernel == "max_pool2d" else 0
        x = cx.sym(node.input[0])
        y = _pooled(cx, at, x, node.op_type, kernel, extra)
        if len(node.output) > 1 and node.output[1]:
            return [y, _max_indices(cx, at, x, cx.shape(y), order)]
        return [y]

    return imp


def _max_indices(cx: Ctx, at: Attrs, x: Symbol, out_shape: tuple[int, ...], order: int) -> Symbol:
    """MaxPool's Indices: where in x (flattened, row-major, or with storage_order=1 each
    plane column-major) each window's maximum lies, the first of equal ones. Every window
    is gathered from x padded with its dtype's lowest value (a constant table of positions
    in the padded plane), argmax picks the tap, and the position is that tap's offset plus
    the window's origin plus the plane's start: constants the import works out."""
    if len(cx.shape(x)) != 4:
        raise Unsupported(f"MaxPool's Indices over {len(cx.shape(x)) - 2} spatial dimensions")
    if order not in (0, 1):
        raise Invalid(f"storage_order={order}: 0 (row major) or 1 (column major)")
    n, c, h, w = cx.shape(x)
    oh, ow = out_shape[2:]
    win = Window(at, cx.shape(x), list(at.get("kernel_shape")))
    (kh, kw), (sh, sw), (dh, dw) = win.kernel, win.stride, win.dilation
    (pt, pl), (pb, pr) = win.begin, win.end
    # ceil_mode's last windows may reach past the padding: pad as far as they reach
    pb = max(pb, (oh - 1) * sh + (kh - 1) * dh + 1 - h - pt)
    pr = max(pr, (ow - 1) * sw + (kw - 1) * dw + 1 - w - pl)
    dtype = cx.dtype(x)
    low = -np.inf if dtype.is_float else float(np.iinfo(dtype.compute).min)
    padded = pad_axis(cx, pad_axis(cx, x, 2, pt, pb, "constant", low), 3, pl, pr, "constant", low)
    hp, wp = h + pt + pb, w + pl + pr
    rows = np.arange(oh)[:, None, None, None] * sh + np.arange(kh)[None, None, :, None] * dh
    cols = np.arange(ow)[None, :, None, None] * sw + np.arange(kw)[None, None, None, :] * dw
    taps = (rows * wp + cols).reshape(oh, ow, kh * kw).astype(np.int64)
    windows = cx.op("gather", cx.reshape(padded, (n, c, hp * wp)), cx.param(taps), axis=2)
    tap = cx.op("argmax", windows, axis=4, keepdims=False, select_last_index=False)
    row_step, col_step = (w, 1) if order == 0 else (1, h)
    offsets = (np.arange(kh)[:, None] * dh * row_step + np.arange(kw) * dw * col_step).reshape(-1)
    origin = (np.arange(oh)[:, None] * sh - pt) * row_step + (np.arange(ow) * sw - pl) * col_step
    plane = (np.arange(n * c) * h * w).reshape(n, c, 1, 1)
    at_tap = cx.op("gather", cx.param(offsets.astype(np.int64)), tap, axis=0)
    start = cx.param((origin[None, None] + plane).astype(np.int64), stem="pool_origin")
    return cx.op("add", at_tap, start)


def max_unpool(cx: Ctx, node: Any, at: Attrs) -> list:
    """MaxUnpool: zeros of the shape the pooling came from ((in - 1) * stride - pads +
    kernel per spatial axis), each value scattered to the flat position its index gives,
    then padded at the end to output_shape when that is given (ONNX's definition: the
    indices are positions in the inferred shape)."""
    x, idx = cx.sym(node.input[0]), cx.sym(node.input[1])
    shape = cx.shape(x)
    if cx.shape(idx) != shape:
        raise Invalid(f"the indices have shape {cx.shape(idx)}; X has {shape}")
    if not cx.dtype(idx).is_integer:
        raise Invalid(f"the indices must be integers, not {cx.dtype(idx).name}")
    kernel = [int(k) for k in at.get("kernel_shape")]
    r = len(shape) - 2
    strides = list(at.get("strides") or [1] * r)
    pads = list(at.get("pads") or [0] * (2 * r))
    if len(kernel) != r or len(strides) != r or len(pads) != 2 * r:
        raise Invalid(f"kernel_shape, strides and pads must give {r}, {r} and {2 * r} values")
    spatial = zip(shape[2:], strides, kernel, pads[:r], pads[r:])
    inferred = [*shape[:2], *((d - 1) * s - b - e + k for d, s, k, b, e in spatial)]
    if min(inferred) < 1:
        raise Invalid(f"the unpooled shape {inferred} has an empty axis")
    total = int(np.prod(inferred))
    zeros = cx.op("fill", shape=[total], value=0.0, dtype=cx.dtype(x).name)
    flat = cx.op("scatter_elements", zeros, cx.reshape(idx, (int(np.prod(shape)),)),
                 cx.reshape(x, (int(np.prod(shape)),)), axis=0, reduction="none")  # fmt: skip
    y = cx.reshape(flat, tuple(inferred))
    name = optional_input(node, 2)
    if name is None:
        return [y]
    wanted = cx.ints(name, "output_shape (it is the output's shape)")
    if len(wanted) != len(inferred) or any(a < b for a, b in zip(wanted, inferred)):
        raise Invalid(f"output_shape {wanted} must be at least the unpooled shape {inferred}")
    for axis, (a, b) in enumerate(zip(wanted, inferred)):
        y = pad_axis(cx, y, axis, 0, a - b, "constant", 0.0)
    return [y]


def lp_pool(cx: Ctx, node: Any, at: Attrs) -> list:
    """(sum over the window of |x|^p)^(1/p): a mean counting the zero padding, times the
    window size. ceil_mode's partial windows are refused: there the mean's divisor is not
    the window size."""
    x = cx.sym(node.input[0])
    if not cx.dtype(x).is_float:
        raise Unsupported(f"LpPool of {cx.dtype(x).name}: only floating types")
    if at.get("ceil_mode", 0):
        raise Unsupported("LpPool with ceil_mode=1")
    p = float(at.get("p", 2))
    xp = cx.op("pow", cx.op("abs", x), cx.param(np.array(p), like=x))
    extra = {"ceil_mode": False, "count_include_pad": True}
    mean = _pooled(cx, at, xp, "LpPool", "avg_pool2d", extra)
    size = float(np.prod(at.get("kernel_shape")))
    total = cx.op("mul", mean, cx.param(np.array(size), like=x))
    return [cx.op("pow", total, cx.param(np.array(1.0 / p), like=x))]


def global_pool(cx: Ctx, node: Any, at: Attrs) -> list:
    x = cx.sym(node.input[0])
    rank = len(cx.shape(x))
    if node.op_type == "GlobalAveragePool" and rank == 4:
        return [cx.op("global_avg_pool2d", x)]
    kernel = "mean" if node.op_type == "GlobalAveragePool" else "max"
    return [cx.op(kernel, x, axes=list(range(2, rank)), keepdims=True)]


def global_lp_pool(cx: Ctx, node: Any, at: Attrs) -> list:
    """(sum over every spatial position of |x|^p)^(1/p), per batch and channel."""
    x = cx.sym(node.input[0])
    if not cx.dtype(x).is_float:
        raise Unsupported(f"GlobalLpPool of {cx.dtype(x).name}: only floating types")
    p = float(at.get("p", 2))
    xp = cx.op("pow", cx.op("abs", x), cx.param(np.array(p), like=x))
    total = cx.op("sum", xp, axes=list(range(2, len(cx.shape(x)))), keepdims=True)
    return [cx.op("pow", total, cx.param(np.array(1.0 / p), like=x))]
