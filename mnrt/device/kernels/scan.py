"""Running reductions along one axis: cumsum and cumprod, with ONNX CumSum's options.

The output has the input's shape and dtype. Integers accumulate in their own width and
wrap; half, bfloat16 and float16 accumulate in float32 and are rounded once by the store.
"""

from __future__ import annotations

import numpy as np

from ...errors import DTypeError
from .. import dtypes as dt
from .common import normalize_axis, per_input_cost
from .registry import Attr, KernelDef, OutSpec, register

_ATTRS = {
    "axis": Attr("int", 0, "axis accumulated along (negative from the end)"),
    "exclusive": Attr(
        "bool", False, "leave each element's own value out (the first is the identity)"
    ),
    "reverse": Attr("bool", False, "accumulate from the end of the axis toward its start"),
}


def _make(name: str, ufunc: np.ufunc, identity: int, doc: str) -> KernelDef:
    def infer(ins, attrs):
        x = ins[0]
        if x.dtype not in dt.NUMERIC:
            raise DTypeError(f"kernel '{name}' takes numbers, not {x.dtype.name}")
        normalize_axis(name, attrs["axis"], len(x.shape))
        return [OutSpec(x.shape, (x.dtype,))]

    def compute(ins, attrs, outs):
        x = ins[0]
        axis = normalize_axis(name, attrs["axis"], x.ndim)
        if attrs["reverse"]:
            x = np.flip(x, axis)
        y = ufunc.accumulate(x, axis=axis, dtype=x.dtype)
        if attrs["exclusive"]:
            shifted = np.full_like(y, identity)
            body = [slice(None)] * x.ndim
            head = list(body)
            body[axis], head[axis] = slice(1, None), slice(None, -1)
            shifted[tuple(body)] = y[tuple(head)]
            y = shifted
        return [np.flip(y, axis) if attrs["reverse"] else y]

    def cost(ins, outs, attrs):
        return per_input_cost(ins, outs)

    return KernelDef(
        name=name,
        doc=doc,
        inputs=("x",),
        outputs=("y",),
        attrs=_ATTRS,
        infer=infer,
        compute=compute,
        cost=cost,
    )


register(_make("cumsum", np.add, 0, "running sum along axis; integers wrap"))
register(_make("cumprod", np.multiply, 1, "running product along axis; integers wrap"))
