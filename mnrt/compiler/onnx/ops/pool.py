"""Pooling: MaxPool, AveragePool and their global forms."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Converter, Ctx, Unsupported
from .common import Window, as4d, from4d, refuse_output, spatial_rank


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
        refuse_output(node, 1, "Indices", "the device has no argmax kernel to compute it")
        extra = {"ceil_mode": bool(at.get("ceil_mode", 0))}
        if kernel == "avg_pool2d":
            extra["count_include_pad"] = bool(at.get("count_include_pad", 0))
        elif at.get("storage_order", 0):
            raise Unsupported("storage_order=1")
        return [_pooled(cx, at, cx.sym(node.input[0]), node.op_type, kernel, extra)]

    return imp


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
