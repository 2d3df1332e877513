"""Reductions over axes, and Softmax/LogSoftmax."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..state import Attrs, Converter, Ctx, axis_index
from .common import axes_of


def reduce(kernel: str) -> Converter:
    def imp(cx: Ctx, node: Any, at: Attrs) -> list:
        x = cx.sym(node.input[0])
        axes = axes_of(cx, node, at)
        keepdims = bool(at.get("keepdims", 1))
        if not axes:
            if at.get("noop_with_empty_axes", 0):
                return [cx.op("copy", x)]
            axes = []
        return [cx.op(kernel, x, axes=axes, keepdims=keepdims)]

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
