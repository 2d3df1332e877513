"""Elementwise ops of two or more operands: arithmetic, comparisons, Max/Min/Sum/Mean, Where."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..state import Attrs, Converter, Ctx, Invalid
from .common import legacy_broadcast


def binary(kernel: str, cast_b: bool = False) -> Converter:
    def imp(cx: Ctx, node: Any, at: Attrs) -> list:
        a, b = cx.sym(node.input[0]), cx.sym(node.input[1])
        b = legacy_broadcast(cx, at, a, b)
        if cast_b and cx.dtype(a) is not cx.dtype(b):
            b = cx.op("cast", b, to=cx.dtype(a).name)
        return [cx.op(kernel, a, b)]

    return imp


def variadic(kernel: str, mean: bool = False) -> Converter:
    def imp(cx: Ctx, node: Any, at: Attrs) -> list:
        syms = [cx.sym(n) for n in node.input]
        y = syms[0]
        for s in syms[1:]:
            y = cx.op(kernel, y, s)
        if len(syms) == 1:
            y = cx.op("copy", y)
        if mean:
            y = cx.op("div", y, cx.param(np.array(len(syms)), like=y))
        return [y]

    return imp


def where(cx: Ctx, node: Any, at: Attrs) -> list:
    return [cx.op("where", *(cx.sym(n) for n in node.input))]


def mod(cx: Ctx, node: Any, at: Attrs) -> list:
    """fmod=0: the remainder takes the divisor's sign (Python's %; the spec means it for
    integers, and ONNX's reference and onnxruntime compute it for floats too); fmod=1: C's
    fmod, the dividend's sign."""
    a, b = cx.sym(node.input[0]), cx.sym(node.input[1])
    return [cx.op("mod", a, b, fmod=bool(at.get("fmod", 0)))]


def bit_shift(cx: Ctx, node: Any, at: Attrs) -> list:
    direction = at.get("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise Invalid(f"direction {direction!r} must be LEFT or RIGHT")
    a, b = cx.sym(node.input[0]), cx.sym(node.input[1])
    return [cx.op("bitshift", a, b, direction=direction.lower())]
