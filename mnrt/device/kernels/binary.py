"""Elementwise binary kernels with numpy broadcasting between the two inputs.

Broadcasting is what these kernels are for, so the inputs may differ in shape by numpy's
rules; the output buffer must have exactly the broadcast shape and the inputs' dtype.
"""

from __future__ import annotations

import numpy as np

from ...errors import DTypeError, ShapeError
from .. import dtypes as dt
from .common import same_dtype, streaming_cost
from .registry import KernelDef, OutSpec, register


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


_NUMERIC = dt.NUMERIC

# name: (function of (a, b, out), one-line doc); `out` is the destination or None.
_OPS = {
    "add": (np.add, "a + b, broadcasting"),
    "sub": (np.subtract, "a - b, broadcasting"),
    "mul": (np.multiply, "a * b, broadcasting"),
    "div": (_div, "a / b, broadcasting; integers truncate toward zero, x/0 = 0"),
    "pow": (_pow, "a ** b, broadcasting; integer exponents below 0 count as 0"),
    "maximum": (np.maximum, "elementwise max(a, b), broadcasting; nan wins"),
    "minimum": (np.minimum, "elementwise min(a, b), broadcasting; nan wins"),
}


def broadcast_shape(kernel: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        listed = " and ".join(str(s) for s in shapes)
        raise ShapeError(f"kernel '{kernel}': shapes {listed} do not broadcast") from None


def binary_kernel(
    name: str, fn, doc: str, allowed: tuple = _NUMERIC, result: dt.DType | None = None
) -> KernelDef:
    """A broadcasting two-input kernel computing `fn(a, b, out=...)`; its output has the
    inputs' dtype, or `result` when given (the comparisons give bool)."""

    def infer(ins, attrs):
        d = same_dtype(name, ins)
        if d not in allowed:
            raise DTypeError(f"kernel '{name}' does not take {d.name} operands")
        out = result if result is not None else d
        return [OutSpec(broadcast_shape(name, ins[0].shape, ins[1].shape), (out,))]

    def compute(ins, attrs, outs):
        return [fn(ins[0], ins[1], out=outs[0].buf)]

    return KernelDef(
        name=name,
        doc=doc,
        inputs=("a", "b"),
        outputs=("y",),
        attrs={},
        infer=infer,
        compute=compute,
        cost=lambda ins, outs, attrs: streaming_cost(ins, outs),
    )


for _name, (_fn, _doc) in _OPS.items():
    register(binary_kernel(_name, _fn, _doc))
