"""Selection, conversion and creation kernels: where, the comparisons, cast, fill and copy.

`cast` is the one kernel that changes dtype; every other kernel refuses mixed dtypes and
names it. Its conversions are those of the device's converters: float to integer truncates
toward zero, maps nan to 0 and saturates at the integer range; anything to bool is != 0.
"""

from __future__ import annotations

import numpy as np

from ...errors import DTypeError, KernelAttributeError
from .. import dtypes as dt
from .binary import binary_kernel, broadcast_shape
from .common import same_dtype, streaming_cost
from .registry import REQUIRED, Attr, KernelDef, OutSpec, exact, register


def _convert(x: np.ndarray, to: dt.DType) -> np.ndarray:
    """Values of `x` converted to `to`: in `to`'s compute dtype, except that a float target
    keeps a wider source's precision so that the store rounds only once."""
    if to is dt.BOOL:
        return x != 0
    if to.is_float:
        return x.astype(np.result_type(x.dtype, to.compute))
    info = np.iinfo(to.compute)
    if x.dtype.kind == "f":
        # float64 holds both int32 bounds exactly, so clipping there cannot round past them.
        wide = np.trunc(x.astype(np.float64))
        wide = np.where(np.isnan(wide), 0.0, wide)
    else:
        wide = x.astype(np.int64)
    return np.clip(wide, info.min, info.max).astype(to.compute)


def _same_shape_cost(ins, outs, attrs):
    return streaming_cost(ins, outs)


# --- where and the comparisons ---------------------------------------------------------


def _where_infer(ins, attrs):
    cond, a, b = ins
    if cond.dtype is not dt.BOOL:
        raise DTypeError(
            f"kernel 'where': cond must be bool, got {cond.dtype.name}; produce it with a "
            "comparison kernel or cast(to='bool')"
        )
    d = same_dtype("where", [a, b])
    return [OutSpec(broadcast_shape("where", cond.shape, a.shape, b.shape), (d,))]


_ALL = tuple(dt.DTYPES.values())
_ORDERED = tuple(d for d in _ALL if d is not dt.BOOL)

# name: (function, dtypes compared, one-line doc)
_COMPARISONS = {
    "equal": (np.equal, _ALL, "a == b, broadcasting, giving bool (nan equals nothing)"),
    "less": (np.less, _ORDERED, "a < b, broadcasting, giving bool"),
    "greater": (np.greater, _ORDERED, "a > b, broadcasting, giving bool"),
    "less_equal": (np.less_equal, _ORDERED, "a <= b, broadcasting, giving bool"),
    "greater_equal": (np.greater_equal, _ORDERED, "a >= b, broadcasting, giving bool"),
}


# --- cast and fill ---------------------------------------------------------------------


def _fill_infer(ins, attrs):
    shape = attrs["shape"]
    if any(n < 0 for n in shape):
        raise KernelAttributeError(f"kernel 'fill': attribute 'shape' {shape} has a size < 0")
    return [OutSpec(shape, (dt.DTYPES[attrs["dtype"]],))]


def _fill_compute(ins, attrs, outs):
    value = _convert(np.asarray(attrs["value"], np.float64), dt.DTYPES[attrs["dtype"]])
    return [np.broadcast_to(value, attrs["shape"])]


_DTYPE_NAMES = tuple(dt.DTYPES)

for _name, (_fn, _allowed, _doc) in _COMPARISONS.items():
    register(binary_kernel(_name, _fn, _doc, _allowed, result=dt.BOOL))

register(
    KernelDef(
        name="where",
        doc="a where cond else b, broadcasting all three",
        inputs=("cond", "a", "b"),
        outputs=("y",),
        attrs={},
        infer=_where_infer,
        compute=lambda ins, attrs, outs: [np.where(ins[0], ins[1], ins[2])],
        cost=_same_shape_cost,
        reduction=exact,
    )
)

register(
    KernelDef(
        name="cast",
        doc="x converted to dtype 'to'; to integers truncates, saturates and maps nan to 0",
        inputs=("x",),
        outputs=("y",),
        attrs={"to": Attr("str", REQUIRED, "target dtype name", choices=_DTYPE_NAMES)},
        infer=lambda ins, attrs: [OutSpec(ins[0].shape, (dt.DTYPES[attrs["to"]],))],
        compute=lambda ins, attrs, outs: [_convert(ins[0], dt.DTYPES[attrs["to"]])],
        cost=_same_shape_cost,
        reduction=exact,
    )
)

register(
    KernelDef(
        name="fill",
        doc="a new tensor of the given shape and dtype, every element value (converted as cast)",
        inputs=(),
        outputs=("y",),
        attrs={
            "shape": Attr("ints", REQUIRED, "output shape"),
            "value": Attr("float", REQUIRED, "the value of every element"),
            "dtype": Attr("str", "float", "output dtype name", choices=_DTYPE_NAMES),
        },
        infer=_fill_infer,
        compute=_fill_compute,
        cost=lambda ins, outs, attrs: streaming_cost(ins, outs, 0.0),
        reduction=exact,
    )
)

register(
    KernelDef(
        name="copy",
        doc="y = x, same shape and dtype",
        inputs=("x",),
        outputs=("y",),
        attrs={},
        infer=lambda ins, attrs: [OutSpec(ins[0].shape, (ins[0].dtype,))],
        compute=lambda ins, attrs, outs: [ins[0]],
        cost=lambda ins, outs, attrs: streaming_cost(ins, outs, 0.0),
        reduction=exact,
    )
)
