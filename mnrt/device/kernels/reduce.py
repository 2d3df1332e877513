"""Reductions over a set of axes: one table row each, sharing infer, compute and cost.

The output keeps the input's dtype. Half and IEEE float16 arrive widened to float32 and are
reduced in float32, then rounded once by the store; integer sums wrap in their own width
(numpy would silently widen int32 sums to int64).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ...errors import DTypeError, KernelAttributeError, ShapeError
from .. import dtypes as dt
from .common import normalize_axis, streaming_cost
from .registry import Attr, KernelDef, OutSpec, register


def _reduced_axes(kernel: str, axes: tuple[int, ...], rank: int) -> tuple[int, ...]:
    """`axes` made non-negative and sorted; the empty tuple means every axis."""
    if not axes:
        return tuple(range(rank))
    out = tuple(sorted(normalize_axis(kernel, a, rank) for a in axes))
    if len(set(out)) != len(out):
        raise KernelAttributeError(
            f"kernel '{kernel}': attribute 'axes' {axes} names an axis twice; list each once"
        )
    return out


def _mean(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    total = np.sum(x, axis=axes, dtype=x.dtype, keepdims=keepdims)
    with np.errstate(invalid="ignore"):  # an empty mean is 0/0 = nan, as on the device
        return total / x.dtype.type(count)


_FLOAT = (dt.DOUBLE, dt.FLOAT, dt.HALF, dt.FLOAT16)
_NUMERIC = (*_FLOAT, dt.INT32, dt.UINT8)

# name: (function of (x, axes, keepdims), dtypes allowed, has an identity, one-line doc)
_OPS = {
    "sum": (
        lambda x, ax, kd: np.sum(x, axis=ax, dtype=x.dtype, keepdims=kd),
        _NUMERIC,
        True,
        "sum over axes; integers wrap",
    ),
    "mean": (_mean, _FLOAT, True, "arithmetic mean over axes (nan over an empty axis)"),
    "max": (
        lambda x, ax, kd: np.max(x, axis=ax, keepdims=kd),
        _NUMERIC,
        False,
        "maximum over axes; nan wins",
    ),
    "min": (
        lambda x, ax, kd: np.min(x, axis=ax, keepdims=kd),
        _NUMERIC,
        False,
        "minimum over axes; nan wins",
    ),
}
_ATTRS = {
    "axes": Attr("ints", (), "axes to reduce, negative counting from the end; () means all"),
    "keepdims": Attr("bool", True, "keep reduced axes as size-1 dimensions"),
}


def _make(name: str, fn, allowed: tuple, has_identity: bool, doc: str) -> KernelDef:
    def infer(ins, attrs):
        x = ins[0]
        if x.dtype not in allowed:
            raise DTypeError(
                f"kernel '{name}' takes {', '.join(d.name for d in allowed)}, not {x.dtype.name}"
            )
        axes = _reduced_axes(name, attrs["axes"], len(x.shape))
        if not has_identity and any(x.shape[a] == 0 for a in axes):
            raise ShapeError(
                f"kernel '{name}': cannot reduce over an empty axis of shape {x.shape} "
                "(there is no identity); drop that axis from 'axes'"
            )
        if attrs["keepdims"]:
            shape = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
        else:
            shape = tuple(n for i, n in enumerate(x.shape) if i not in axes)
        return [OutSpec(shape, (x.dtype,))]

    def compute(ins, attrs, outs):
        x = ins[0]
        axes = _reduced_axes(name, attrs["axes"], x.ndim)
        return [np.asarray(fn(x, axes, attrs["keepdims"]))]

    def cost(ins, outs, attrs):
        # One operation per input element, however small the output.
        return dataclasses.replace(streaming_cost(ins, outs), flops=float(ins[0].size))

    return KernelDef(
        name=name,
        doc=doc,
        inputs=("x",),
        outputs=("y",),
        attrs=_ATTRS,
        infer=infer,
        compute=compute,
        cost=cost,
        reduction=lambda ins, attrs: math.prod(
            ins[0].shape[a] for a in _reduced_axes(name, attrs["axes"], len(ins[0].shape))
        ),
    )


for _name, (_fn, _allowed, _identity, _doc) in _OPS.items():
    register(_make(_name, _fn, _allowed, _identity, _doc))
