"""Elementwise binary kernels with numpy broadcasting between the two inputs.

Broadcasting is what these kernels are for, so the inputs may differ in shape by numpy's
rules; the output buffer must have exactly the broadcast shape and the inputs' dtype.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...errors import DTypeError, ShapeError
from .. import dtypes as dt
from .common import same_dtype, streaming_cost
from .registry import (
    REQUIRED,
    Attr,
    KernelDef,
    OutSpec,
    TermsFn,
    elementwise,
    largest,
    products,
    register,
)


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C-style integer division in the operands' own type: truncates toward zero; division
    by zero gives 0. Floor division, corrected by one where the remainder is nonzero and
    the signs differ; only the minimum / -1 overflows, and wraps like every result."""
    zero = b == 0
    safe = np.where(zero, b.dtype.type(1), b)
    with np.errstate(over="ignore"):
        q = np.floor_divide(a, safe)
        if a.dtype.kind == "i":
            q += ((a - q * safe) != 0) & ((a < 0) != (safe < 0))
    return np.where(zero, a.dtype.type(0), q)


def _div(a: np.ndarray, b: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    return _int_div(a, b) if a.dtype.kind in "iu" else np.divide(a, b, out=out)


def _pow(a: np.ndarray, b: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    if a.dtype.kind in "iu":
        b = np.maximum(b, 0)  # negative integer exponents would give 0 or 1: clamp to 0
    return np.power(a, b, out=out)


def _mod(a: np.ndarray, b: np.ndarray, attrs: Mapping, out: np.ndarray | None) -> np.ndarray:
    """ONNX Mod: with fmod the remainder has the dividend's sign (C fmod), else the
    divisor's (Python %). Integers modulo 0 give 0; floats give nan."""
    fn = np.fmod if attrs["fmod"] else np.mod
    if a.dtype.kind == "f":
        return fn(a, b, out=out)
    zero = b == 0
    with np.errstate(divide="ignore"):
        r = fn(a, np.where(zero, b.dtype.type(1), b))
    return np.where(zero, a.dtype.type(0), r)


def _bitshift(a: np.ndarray, b: np.ndarray, attrs: Mapping, out: np.ndarray | None):
    """a shifted by b bits. Amounts below 0 or of at least the width shift every bit out:
    0, or (shifting a negative signed value right) -1, as the sign fills in."""
    width = 8 * a.dtype.itemsize
    big = (b < 0) | (b >= width)
    safe = np.where(big, b.dtype.type(0), b)
    if attrs["direction"] == "left":
        return np.where(big, a.dtype.type(0), np.left_shift(a, safe))
    fill = np.where(a < 0, a.dtype.type(-1), a.dtype.type(0)) if a.dtype.kind == "i" else 0
    return np.where(big, np.asarray(fill, a.dtype), np.right_shift(a, safe))


_NUMERIC = dt.NUMERIC
_BITS = (*dt.INTEGERS, dt.BOOL)  # what bitwise operations act on

# name: (function of (a, b, out), one-line doc, KernelDef.terms or None where the terms
# are not bounded by the operands' scales); `out` is the destination or None.
_OPS = {
    "add": (np.add, "a + b, broadcasting", largest),
    "sub": (np.subtract, "a - b, broadcasting", largest),
    "mul": (np.multiply, "a * b, broadcasting", products),
    "div": (_div, "a / b, broadcasting; integers truncate toward zero, x/0 = 0", None),
    "pow": (_pow, "a ** b, broadcasting; integer exponents below 0 count as 0", None),
    "maximum": (np.maximum, "elementwise max(a, b), broadcasting; nan wins", largest),
    "minimum": (np.minimum, "elementwise min(a, b), broadcasting; nan wins", largest),
}


def broadcast_shape(kernel: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        listed = " and ".join(str(s) for s in shapes)
        raise ShapeError(f"kernel '{kernel}': shapes {listed} do not broadcast") from None


def binary_kernel(
    name: str,
    fn,
    doc: str,
    allowed: tuple = _NUMERIC,
    result: dt.DType | None = None,
    attrs: Mapping[str, Attr] | None = None,
    flops: float = 1.0,
    terms: TermsFn | None = None,
) -> KernelDef:
    """A broadcasting two-input kernel computing `fn(a, b, out=...)`, or with `attrs`
    (its attribute schema) `fn(a, b, attrs, out=...)`; its output has the inputs' dtype,
    or `result` when given (the comparisons give bool)."""
    schema = dict(attrs or {})

    def infer(ins, attrs):
        d = same_dtype(name, ins)
        if d not in allowed:
            raise DTypeError(f"kernel '{name}' does not take {d.name} operands")
        out = result if result is not None else d
        return [OutSpec(broadcast_shape(name, ins[0].shape, ins[1].shape), (out,))]

    def compute(ins, attrs, outs):
        if schema:
            return [fn(ins[0], ins[1], attrs, out=outs[0].buf)]
        return [fn(ins[0], ins[1], out=outs[0].buf)]

    return KernelDef(
        name=name,
        doc=doc,
        inputs=("a", "b"),
        outputs=("y",),
        attrs=schema,
        infer=infer,
        compute=compute,
        cost=lambda ins, outs, attrs: streaming_cost(ins, outs, flops),
        reduction=elementwise,
        pointwise=True,
        terms=terms,
    )


for _name, (_fn, _doc, _terms) in _OPS.items():
    register(binary_kernel(_name, _fn, _doc, terms=_terms))

# name: (function of (a, b, out), dtypes allowed, one-line doc)
_BITWISE = {
    "bitwise_and": (np.bitwise_and, _BITS, "a & b bit by bit, broadcasting"),
    "bitwise_or": (np.bitwise_or, _BITS, "a | b bit by bit, broadcasting"),
    "bitwise_xor": (np.bitwise_xor, _BITS, "a ^ b bit by bit, broadcasting"),
    "logical_and": (np.logical_and, (dt.BOOL,), "a and b on bool, broadcasting"),
    "logical_or": (np.logical_or, (dt.BOOL,), "a or b on bool, broadcasting"),
    "logical_xor": (np.logical_xor, (dt.BOOL,), "a xor b on bool, broadcasting"),
}
for _name, (_fn, _allowed, _doc) in _BITWISE.items():
    register(binary_kernel(_name, _fn, _doc, _allowed))

register(
    binary_kernel(
        "prelu",
        lambda a, b, out: np.where(a < 0, a * b, a),
        "a if a >= 0 else a * b (ONNX PRelu: b is the slope, broadcast to a)",
        dt.SIGNED,
        flops=2.0,
    )
)
register(
    binary_kernel(
        "mod",
        _mod,
        "remainder of a / b, broadcasting; sign of b, or of a with fmod; integer x % 0 = 0",
        attrs={"fmod": Attr("bool", False, "C fmod (sign of a) instead of Python % (sign of b)")},
        flops=2.0,
    )
)
register(
    binary_kernel(
        "bitshift",
        _bitshift,
        "a shifted by b bits, broadcasting; shifts of b < 0 or >= the width give 0 (or -1)",
        dt.INTEGERS,
        attrs={
            "direction": Attr(
                "str", REQUIRED, "'left' (toward the high bits) or 'right'", ("left", "right")
            )
        },
    )
)
