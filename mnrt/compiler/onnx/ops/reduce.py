"""Reductions over axes, and Softmax/LogSoftmax/Hardmax."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..state import Attrs, Converter, Ctx, Unsupported, axis_index
from .common import axes_of

# Reductions ONNX defines as a sum with an elementwise step before or after it (ReduceL1,
# ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp): each is one device kernel.
_WITH_A_STEP = {"l1", "l2", "sum_square", "log_sum", "logsumexp"}
_FLOAT_ONLY = {"l2", "log_sum", "logsumexp"}


def _empty_value(kernel: str, dtype: Any) -> float | None:
    """What a reduction of no elements is (ONNX: the identity of its operation)."""
    info = np.iinfo(dtype.storage) if dtype.storage.kind in "iu" else None
    if kernel == "max":
        return 0.0 if dtype.name == "bool" else float(info.min) if info else -np.inf
    if kernel == "min":
        return 1.0 if dtype.name == "bool" else float(info.max) if info else np.inf
    if kernel in ("log_sum", "logsumexp"):
        return -np.inf
    return 0.0 if kernel in ("sum", "l1", "l2", "sum_square") else None  # mean: the kernel's nan


def _reduced_shape(shape: tuple[int, ...], axes: list[int], keepdims: bool) -> list[int]:
    return [1 if i in axes else d for i, d in enumerate(shape) if keepdims or i not in axes]


def reduce(kernel: str) -> Converter:
    """ReduceSum/Mean/Max/Min/Prod and the ones with an elementwise step (`_WITH_A_STEP`):
    the device reduction `kernel` (one kernel: ReduceL2 was square, sum and sqrt, and
    ReduceLogSumExp six). Empty axes reduce everything, or nothing with
    noop_with_empty_axes=1; a reduction over no elements gives the operation's identity
    (0 for a sum, -inf for a max, ...)."""

    def imp(cx: Ctx, node: Any, at: Attrs) -> list:
        x = cx.sym(node.input[0])
        shape, dtype = cx.shape(x), cx.dtype(x)
        axes = axes_of(cx, node, at)
        keepdims = bool(at.get("keepdims", 1))
        noop = at.get("noop_with_empty_axes", 0)
        if kernel in _FLOAT_ONLY and not dtype.is_float:
            raise Unsupported(f"{node.op_type} of {dtype.name}: only floating types")
        if not axes and noop:
            if kernel in _WITH_A_STEP:
                raise Unsupported(
                    f"{node.op_type} with noop_with_empty_axes=1 (ONNX's reference applies "
                    "the elementwise step, the spec does not)"
                )
            return [cx.op("copy", x)]
        axes = sorted({axis_index(a, len(shape)) for a in axes or range(len(shape))})
        if any(shape[a] == 0 for a in axes):
            value = _empty_value(kernel, dtype)
            if value is not None:
                out = _reduced_shape(shape, axes, keepdims)
                return [cx.op("fill", shape=out, value=value, dtype=dtype.name)]
        return [cx.op(kernel, x, axes=axes, keepdims=keepdims)]  # max and min of bool: any, all

    return imp


def softmax(kernel: str) -> Converter:
    def imp(cx: Ctx, node: Any, at: Attrs) -> list:
        x = cx.sym(node.input[0])
        shape = cx.shape(x)
        if cx.opset >= 13:
            return [cx.op(kernel, x, axis=int(at.get("axis", -1)))]
        axis = axis_index(int(at.get("axis", 1)), max(len(shape), 1))
        flat = (int(np.prod(shape[:axis])), int(np.prod(shape[axis:])))
        return [cx.reshape(cx.op(kernel, cx.reshape(x, flat), axis=-1), shape)]

    return imp


def hardmax(cx: Ctx, node: Any, at: Attrs) -> list:
    """1 at the first maximum along axis, 0 elsewhere (the first nan wins, as in numpy's
    argmax): the argmax and onehot kernels. Below opset 13 the input is seen as 2-D, split
    at axis."""
    x = cx.sym(node.input[0])
    shape = cx.shape(x)
    if not cx.dtype(x).is_float:
        raise Unsupported(f"Hardmax of {cx.dtype(x).name}: only floating types")
    if cx.opset >= 13:
        v, axis = x, axis_index(int(at.get("axis", -1)), len(shape))
    else:
        split = axis_index(int(at.get("axis", 1)), max(len(shape), 1))
        v = cx.reshape(x, (int(np.prod(shape[:split])), int(np.prod(shape[split:]))))
        axis = 1
    first = cx.op("argmax", v, axis=axis, keepdims=False)
    values = cx.param(np.array([0, 1]), like=x)
    y = cx.op("onehot", first, values, depth=cx.shape(v)[axis], axis=axis)
    return [cx.reshape(y, shape)]
