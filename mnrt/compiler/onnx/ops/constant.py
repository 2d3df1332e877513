"""Ops whose results are known at import time: Constant, Shape, Size, ConstantOfShape."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..state import Attrs, Ctx, Invalid, Unsupported, check_const_size


def constant(cx: Ctx, node: Any, at: Attrs) -> list:
    from onnx import numpy_helper

    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if at.has(key):
            v = at.get(key)
            if key == "value":
                return [numpy_helper.to_array(v)]
            dt = np.float32 if "float" in key else np.int64
            return [np.asarray(v, dtype=dt)]
    raise Unsupported(f"attribute {sorted(at.values)}")


def shape(cx: Ctx, node: Any, at: Attrs) -> list:
    s = np.asarray(cx.shape(node.input[0]), dtype=np.int64)
    start, end = at.get("start", 0), at.get("end", None)
    return [s[start:end]]


def size(cx: Ctx, node: Any, at: Attrs) -> list:
    return [np.asarray(int(np.prod(cx.shape(node.input[0]))), dtype=np.int64)]


def constant_of_shape(cx: Ctx, node: Any, at: Attrs) -> list:
    from onnx import numpy_helper

    shape = cx.ints(node.input[0], "shape")
    v = at.get("value")
    fill = numpy_helper.to_array(v).reshape(-1) if v is not None else np.zeros(1, np.float32)
    check_const_size(tuple(shape), fill.dtype.itemsize, "ConstantOfShape's output")
    return [np.full(shape, fill[0], dtype=fill.dtype)]


def range_(cx: Ctx, node: Any, at: Attrs) -> list:
    """start, start + delta, ... before limit: a constant, so start, limit and delta must be
    known at import time (initializers, or example inputs)."""
    start, limit, delta = (np.asarray(cx.const(n, "Range's start, limit and delta")).reshape(())
                           for n in node.input[:3])  # fmt: skip
    if delta == 0:
        raise Invalid("delta is 0: Range would never reach its limit")
    count = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
    check_const_size((count,), start.dtype.itemsize, "Range's output")
    return [(start + np.arange(count, dtype=start.dtype) * delta).astype(start.dtype)]
