"""Reductions over a set of axes: one table row each, sharing infer, compute and cost.

The output keeps the input's dtype. Half and IEEE float16 arrive widened to float32 and are
reduced in float32, then rounded once by the store; integer sums wrap in their own width
(numpy would silently widen int32 sums to int64).
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import DTypeError, KernelAttributeError
from .. import dtypes as dt
from .common import normalize_axis, per_input_cost
from .registry import Attr, KernelDef, OutSpec, largest, register


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


def _logsumexp(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """log(sum(exp(x))) without overflow: the largest value is taken out first. Over an
    empty axis it is log(0) = -inf."""
    if any(x.shape[a] == 0 for a in axes):
        return np.log(np.sum(np.exp(x), axis=axes, keepdims=keepdims))
    top = np.max(x, axis=axes, keepdims=True)
    top = np.where(np.isfinite(top), top, x.dtype.type(0))  # all -inf (or an inf) rows
    total = np.sum(np.exp(x - top), axis=axes, keepdims=True)
    y = np.log(total) + top
    return y if keepdims else np.squeeze(y, axes)


def _sum_square(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.sum(x * x, axis=axes, dtype=x.dtype, keepdims=keepdims)


_FLOAT = dt.FLOATS
_NUMERIC = dt.NUMERIC


def _bounds(d: np.dtype) -> tuple:
    """The lowest and highest value of a compute dtype: the identities of max and min."""
    if d.kind == "f":
        return -np.inf, np.inf
    if d.kind == "b":
        return False, True
    info = np.iinfo(d)
    return info.min, info.max


def _max(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """Maximum; over an empty axis the dtype's lowest value (-inf for floats), as ONNX."""
    return np.max(x, axis=axes, keepdims=keepdims, initial=_bounds(x.dtype)[0])


def _min(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """Minimum; over an empty axis the dtype's highest value (inf for floats), as ONNX."""
    return np.min(x, axis=axes, keepdims=keepdims, initial=_bounds(x.dtype)[1])


# name: (function of (x, axes, keepdims), dtypes allowed, one-line doc); every reduction
# has a value over an empty axis (its identity).
_OPS = {
    "sum": (
        lambda x, ax, kd: np.sum(x, axis=ax, dtype=x.dtype, keepdims=kd),
        _NUMERIC,
        "sum over axes; integers wrap",
    ),
    "mean": (_mean, _FLOAT, "arithmetic mean over axes (nan over an empty axis)"),
    "max": (_max, (*_NUMERIC, dt.BOOL), "maximum over axes; nan wins; bool: any; empty: lowest"),
    "min": (_min, (*_NUMERIC, dt.BOOL), "minimum over axes; nan wins; bool: all; empty: highest"),
    "prod": (
        lambda x, ax, kd: np.prod(x, axis=ax, dtype=x.dtype, keepdims=kd),
        _NUMERIC,
        "product over axes; integers wrap",
    ),
    "l1": (
        lambda x, ax, kd: np.sum(np.abs(x), axis=ax, dtype=x.dtype, keepdims=kd),
        _NUMERIC,
        "sum of |x| over axes; integers wrap",
    ),
    "l2": (
        lambda x, ax, kd: np.sqrt(_sum_square(x, ax, kd)),
        _FLOAT,
        "square root of the sum of x**2 over axes",
    ),
    "sum_square": (_sum_square, _NUMERIC, "sum of x**2 over axes; integers wrap"),
    "log_sum": (
        lambda x, ax, kd: np.log(np.sum(x, axis=ax, dtype=x.dtype, keepdims=kd)),
        _FLOAT,
        "log of the sum over axes",
    ),
    "logsumexp": (_logsumexp, _FLOAT, "log(sum(exp(x))) over axes, without overflow"),
}
_ATTRS = {
    "axes": Attr("ints", (), "axes to reduce, negative counting from the end; () means all"),
    "keepdims": Attr("bool", True, "keep reduced axes as size-1 dimensions"),
}


# The reductions whose terms are x's elements (KernelDef.terms): the others' are products
# or squares of them, or exponentials.
_SUMMING_ELEMENTS = ("sum", "mean", "max", "min", "l1")
# Operations per input element beyond the one that accumulates it: the elementwise step
# before the sum (|x|, x*x), or log-sum-exp's maximum, shift and exponential.
_STEP_FLOPS = {"l1": 1, "l2": 1, "sum_square": 1, "logsumexp": 3}


def _make(name: str, fn, allowed: tuple, doc: str) -> KernelDef:
    def infer(ins, attrs):
        x = ins[0]
        if x.dtype not in allowed:
            raise DTypeError(
                f"kernel '{name}' takes {', '.join(d.name for d in allowed)}, not {x.dtype.name}"
            )
        axes = _reduced_axes(name, attrs["axes"], len(x.shape))
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
        return per_input_cost(ins, outs, 1 + _STEP_FLOPS.get(name, 0))

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
        terms=largest if name in _SUMMING_ELEMENTS else None,
    )


for _name, (_fn, _allowed, _doc) in _OPS.items():
    register(_make(_name, _fn, _allowed, _doc))
