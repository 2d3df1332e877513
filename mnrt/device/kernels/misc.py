"""Selection, conversion and creation kernels: where, the comparisons, cast, bitcast, fill
and copy.

`cast` and `bitcast` are the kernels that change dtype; every other kernel refuses mixed
dtypes and names them. `bitcast` keeps the stored bits and reads them as another dtype of
the same width. Its conversions are those of the device's converters: float to integer truncates
toward zero, maps nan to 0 and saturates at the integer range (infinities too); integer to
a narrower integer saturates as well; anything to bool is != 0 (so nan is True); integers
and floats go to a float target rounded once, to nearest even.
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
        if x.dtype.kind in "iu" and x.dtype.itemsize == 8 and to.compute != np.float64:
            x = _round_to_odd_float64(x)
        return x.astype(np.result_type(x.dtype, to.compute))
    if x.dtype.kind == "f":
        return _float_to_int(x, to.compute)
    if x.dtype.kind == "b":
        return x.astype(to.compute)
    # Integer to integer: clip in the source's own type, to the bounds both types hold,
    # so no value passes through a type that cannot hold it (uint64 above int64's range).
    src, dst = np.iinfo(x.dtype), np.iinfo(to.compute)
    lo, hi = max(src.min, dst.min), min(src.max, dst.max)
    return np.clip(x, x.dtype.type(lo), x.dtype.type(hi)).astype(to.compute)


def _round_to_odd_float64(x: np.ndarray) -> np.ndarray:
    """64-bit integers as float64 rounded to odd: the bits below bit 11 folded into a sticky
    bit 11, which leaves at most 53 significant bits (exact in float64). Rounding that once
    more to 24 bits or fewer gives the same result as rounding the integer directly, where
    numpy's int64 -> float64 -> float32 would round twice."""
    negative = x < 0 if x.dtype.kind == "i" else np.zeros(x.shape, bool)
    mag = np.where(negative, np.negative(x), x).view(np.uint64)  # int64 min wraps to 2**63
    sticky = (mag & np.uint64(0x7FF)) != 0
    odd = (mag >> np.uint64(11)) | sticky.astype(np.uint64)
    folded = np.where(mag >= np.uint64(1 << 53), odd << np.uint64(11), mag)
    value = folded.astype(np.float64)
    return np.where(negative, -value, value)


def _float_to_int(x: np.ndarray, to: np.dtype) -> np.ndarray:
    """Truncate toward zero, saturate at the integer range, nan to 0. The bounds are
    compared in float64, where a bound that float64 cannot hold (int64's maximum) rounds up
    to a power of two that no in-range value reaches."""
    info = np.iinfo(to)
    wide = np.trunc(x.astype(np.float64))
    over = wide >= float(info.max)
    under = wide <= float(info.min)
    inside = np.where(over | under | np.isnan(wide), 0.0, wide).astype(to)
    inside[over] = info.max
    inside[under] = info.min
    return inside


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
        pointwise=True,
    )
)

register(
    KernelDef(
        name="cast",
        doc="x as dtype to: integers truncate and saturate, nan -> 0; bool is x != 0 (nan: True)",
        inputs=("x",),
        outputs=("y",),
        attrs={"to": Attr("str", REQUIRED, "target dtype name", choices=_DTYPE_NAMES)},
        infer=lambda ins, attrs: [OutSpec(ins[0].shape, (dt.DTYPES[attrs["to"]],))],
        compute=lambda ins, attrs, outs: [_convert(ins[0], dt.DTYPES[attrs["to"]])],
        cost=_same_shape_cost,
        reduction=exact,
        pointwise=True,
    )
)


def _bitcast_infer(ins, attrs):
    x, to = ins[0], dt.DTYPES[attrs["to"]]
    for end, d in (("x", x.dtype), ("to", to)):
        if not d.direct:
            raise DTypeError(
                f"kernel 'bitcast': {end} is {d.name}, which kernels compute in "
                f"{d.compute.name} and store as {d.storage.name}; bitcast reads the bits of "
                "dtypes stored as computed (float, double, the integers, bool; where "
                "float_dtype made a float half, compile in the model's own precision)"
            )
    if x.dtype.itemsize != to.itemsize:
        raise DTypeError(
            f"kernel 'bitcast': x is {x.dtype.name} ({x.dtype.itemsize * 8} bits) and to is "
            f"{to.name} ({to.itemsize * 8} bits); the widths must agree (where float_dtype "
            "changed a float's width, compile in the model's own precision)"
        )
    if to is dt.BOOL and x.dtype is not dt.BOOL:
        raise DTypeError(
            f"kernel 'bitcast': to bool from {x.dtype.name}: a byte other than 0 or 1 is no "
            "bool value; compare with zero (not_equal) instead"
        )
    return [OutSpec(x.shape, (to,))]


register(
    KernelDef(
        name="bitcast",
        doc="the stored bits of x read as dtype to, of the same width (ONNX BitCast)",
        inputs=("x",),
        outputs=("y",),
        attrs={"to": Attr("str", REQUIRED, "target dtype name", choices=_DTYPE_NAMES)},
        infer=_bitcast_infer,
        compute=lambda ins, attrs, outs: [ins[0].view(dt.DTYPES[attrs["to"]].storage)],
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
        pointwise=True,
        same_bits=True,
    )
)
