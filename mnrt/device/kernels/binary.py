"""Elementwise binary kernels with numpy broadcasting between the two inputs.

Broadcasting is what these kernels are for, so the inputs may differ in shape by numpy's
rules; the output buffer must have exactly the broadcast shape and the inputs' dtype.
"""

from __future__ import annotations

import numpy as np

from ...errors import DTypeError, ShapeError
from .. import dtypes as dt
from .common import same_dtype, streaming_cost
from .registry import KernelDef, OutSpec, elementwise, register


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C-style integer division: truncates toward zero; division by zero gives 0. Worked in
    int64, where |int32 minimum| exists (in int32 it wraps to itself and the quotient with
    it); only the minimum / -1 overflows, and wraps like every int32 result."""
    wa, wb = a.astype(np.int64), b.astype(np.int64)
    safe = np.where(wb == 0, 1, wb)
    q = np.abs(wa) // np.abs(safe)
    q = np.where((wa < 0) != (safe < 0), -q, q)
    return np.where(wb == 0, 0, q).astype(a.dtype)


def _div(a: np.ndarray, b: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    return _int_div(a, b) if a.dtype.kind in "iu" else np.divide(a, b, out=out)


def _pow(a: np.ndarray, b: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    if a.dtype.kind in "iu":
        b = np.maximum(b, 0)  # negative integer exponents would give 0 or 1: clamp to 0
    return np.power(a, b, out=out)


_NUMERIC = (dt.DOUBLE, dt.FLOAT, dt.HALF, dt.FLOAT16, dt.INT32, dt.UINT8)

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
        reduction=elementwise,
    )


for _name, (_fn, _doc) in _OPS.items():
    register(binary_kernel(_name, _fn, _doc))
