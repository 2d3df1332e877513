"""Kernels that make a tensor from attributes alone: range and eye_like.

Their values come from attributes (ONNX Range's inputs and EyeLike's shape are constants a
compiler folds), so the only traffic is the output written once.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import KernelAttributeError, ShapeError
from .. import dtypes as dt
from .common import MAX_TEMPORARY_ELEMENTS, streaming_cost
from .registry import REQUIRED, Attr, KernelDef, OutSpec, exact, register

_NUMERIC_NAMES = tuple(d.name for d in dt.NUMERIC)


# --- range -----------------------------------------------------------------------------


def _range_count(attrs) -> int:
    """ONNX Range's length: max(ceil((limit - start) / delta), 0)."""
    start, limit, delta = attrs["start"], attrs["limit"], attrs["delta"]
    if delta == 0 or not all(map(math.isfinite, (start, limit, delta))):
        raise KernelAttributeError(
            f"kernel 'range': start {start}, limit {limit} and delta {delta} must be finite "
            "and delta nonzero"
        )
    steps = (limit - start) / delta
    if not math.isfinite(steps) or steps > MAX_TEMPORARY_ELEMENTS:
        raise ShapeError(
            f"kernel 'range': from {start} to {limit} by {delta} is more than the emulator's "
            f"limit of {MAX_TEMPORARY_ELEMENTS} elements for one kernel"
        )
    return max(math.ceil(steps), 0)


def _range_infer(ins, attrs):
    d = dt.DTYPES[attrs["dtype"]]
    values = [attrs[k] for k in ("start", "limit", "delta")]
    if d.is_integer:
        info = np.iinfo(d.compute)
        if not all(
            math.isfinite(v) and v.is_integer() and info.min <= v <= info.max for v in values
        ):
            raise KernelAttributeError(
                f"kernel 'range': an {d.name} range needs whole start, limit and delta in "
                f"{info.min}..{info.max}, got {', '.join(map(str, values))}"
            )
    return [OutSpec((_range_count(attrs),), (d,))]


def _range_compute(ins, attrs, outs):
    d = outs[0].dtype
    n = outs[0].shape[0]
    if d.is_integer:
        # Whole numbers: computed in int64 (exact for values below 2**53, which a float
        # attribute can hold), then wrapped to the dtype like any integer result.
        start, delta = int(attrs["start"]), int(attrs["delta"])
        return [(start + delta * np.arange(n, dtype=np.int64)).astype(d.compute)]
    # start + i * delta in float64, rounded once by the store.
    return [attrs["start"] + attrs["delta"] * np.arange(n, dtype=np.float64)]


register(
    KernelDef(
        name="range",
        doc="start + i * delta for i = 0 .. ceil((limit - start) / delta) - 1 (ONNX Range)",
        inputs=(),
        outputs=("y",),
        attrs={
            "start": Attr("float", REQUIRED, "first value"),
            "limit": Attr("float", REQUIRED, "bound not reached (exclusive)"),
            "delta": Attr("float", 1.0, "step, nonzero"),
            "dtype": Attr("str", "float", "output dtype name", choices=_NUMERIC_NAMES),
        },
        infer=_range_infer,
        compute=_range_compute,
        cost=lambda ins, outs, attrs: streaming_cost(ins, outs, 1.0),
    )
)


# --- eye_like --------------------------------------------------------------------------


def _eye_dtype(x, attrs) -> dt.DType:
    return x.dtype if not attrs["dtype"] else dt.DTYPES[attrs["dtype"]]


def _eye_infer(ins, attrs):
    x = ins[0]
    if len(x.shape) != 2:
        raise ShapeError(f"kernel 'eye_like': x must be 2-D, got shape {x.shape}")
    return [OutSpec(x.shape, (_eye_dtype(x, attrs),))]


def _eye_compute(ins, attrs, outs):
    rows, cols = outs[0].shape
    return [np.eye(rows, cols, k=attrs["k"], dtype=outs[0].dtype.compute)]


def _eye_cost(ins, outs, attrs):
    # x's values are never read: only the output is written.
    return streaming_cost([], outs, 0.0)


register(
    KernelDef(
        name="eye_like",
        reduction=exact,  # moves or selects values: no rounding of its own
        doc="ones on diagonal k and zeros elsewhere, of x's 2-D shape (x is not read)",
        inputs=("x",),
        outputs=("y",),
        attrs={
            "k": Attr("int", 0, "diagonal: 0 the main one, > 0 above it, < 0 below"),
            "dtype": Attr("str", "", "output dtype name; '' means x's", choices=("", *dt.DTYPES)),
        },
        infer=_eye_infer,
        compute=_eye_compute,
        cost=_eye_cost,
    )
)
