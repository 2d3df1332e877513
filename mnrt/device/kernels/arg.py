"""Kernels that find positions: argmax, argmin and topk, with ONNX's semantics.

Positions are int64. Ties go to the lower index (or, for argmax/argmin with
select_last_index, the higher); nan counts as larger than every number, so argmax finds
the first nan and topk(largest) ranks nans first, as numpy's sort orders them last.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import DTypeError, ShapeError
from .. import dtypes as dt
from .common import normalize_axis, streaming_cost
from .registry import REQUIRED, Attr, Cost, KernelDef, OutSpec, exact, register

_ORDERED = (*dt.NUMERIC, dt.BOOL)


def _check_dtype(kernel: str, d: dt.DType) -> None:
    if d not in _ORDERED:
        raise DTypeError(f"kernel '{kernel}' does not take {d.name} operands")


# --- argmax / argmin -------------------------------------------------------------------


def _arg_infer(name: str):
    def infer(ins, attrs):
        x = ins[0]
        _check_dtype(name, x.dtype)
        axis = normalize_axis(name, attrs["axis"], len(x.shape))
        if x.shape[axis] == 0:
            raise ShapeError(
                f"kernel '{name}': axis {axis} of x {x.shape} is empty; there is no position"
            )
        if attrs["keepdims"]:
            shape = (*x.shape[:axis], 1, *x.shape[axis + 1 :])
        else:
            shape = (*x.shape[:axis], *x.shape[axis + 1 :])
        return [OutSpec(shape, (dt.INT64,))]

    return infer


def _arg_compute(fn):
    def compute(ins, attrs, outs):
        x = ins[0]
        axis = normalize_axis("arg", attrs["axis"], x.ndim)
        if attrs["select_last_index"]:
            last = x.shape[axis] - 1
            pos = last - fn(np.flip(x, axis), axis=axis, keepdims=True)
        else:
            pos = fn(x, axis=axis, keepdims=True)
        return [pos if attrs["keepdims"] else np.squeeze(pos, axis)]

    return compute


_ARG_ATTRS = {
    "axis": Attr("int", 0, "axis searched (negative from the end)"),
    "keepdims": Attr("bool", True, "keep the searched axis as a size-1 dimension"),
    "select_last_index": Attr("bool", False, "on ties, the last position instead of the first"),
}


def _arg_cost(ins, outs, attrs):
    return Cost(flops=float(ins[0].size), dram_bytes=streaming_cost(ins, outs).dram_bytes)


for _name, _fn, _doc in (
    ("argmax", np.argmax, "int64 position of the largest value along axis (nan wins)"),
    ("argmin", np.argmin, "int64 position of the smallest value along axis (nan wins)"),
):
    register(
        KernelDef(
            name=_name,
            doc=_doc,
            inputs=("x",),
            outputs=("y",),
            attrs=_ARG_ATTRS,
            infer=_arg_infer(_name),
            compute=_arg_compute(_fn),
            cost=_arg_cost,
        )
    )


# --- topk ------------------------------------------------------------------------------


def _topk_infer(ins, attrs):
    x = ins[0]
    _check_dtype("topk", x.dtype)
    axis = normalize_axis("topk", attrs["axis"], len(x.shape))
    k = attrs["k"]
    if not 0 <= k <= x.shape[axis]:
        raise ShapeError(
            f"kernel 'topk': k = {k} must be between 0 and the length {x.shape[axis]} of "
            f"axis {axis} of x {x.shape}"
        )
    shape = (*x.shape[:axis], k, *x.shape[axis + 1 :])
    return [OutSpec(shape, (x.dtype,)), OutSpec(shape, (dt.INT64,))]


def _topk_compute(ins, attrs, outs):
    x = ins[0]
    axis = normalize_axis("topk", attrs["axis"], x.ndim)
    k = attrs["k"]
    if attrs["largest"]:
        # A stable ascending sort of x reversed along the axis, read backwards: largest
        # first, and among equal values the lower original index first.
        last = x.shape[axis] - 1
        order = np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
        order = last - order
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return [np.take_along_axis(x, idx, axis), idx]


def _topk_cost(ins, outs, attrs):
    # A sort along the axis: n log2 n comparisons per row.
    n = ins[0].shape[normalize_axis("topk", attrs["axis"], len(ins[0].shape))]
    flops = ins[0].size * max(math.log2(max(n, 1)), 1.0)
    return Cost(flops=flops, dram_bytes=streaming_cost(ins, outs).dram_bytes)


register(
    KernelDef(
        name="topk",
        reduction=exact,  # moves or selects values: no rounding of its own
        doc="the k largest (or smallest) values along axis, sorted, and their int64 positions",
        inputs=("x",),
        outputs=("values", "indices"),
        attrs={
            "k": Attr("int", REQUIRED, "how many values to keep"),
            "axis": Attr("int", -1, "axis searched (negative from the end)"),
            "largest": Attr("bool", True, "the largest values (else the smallest)"),
            "sorted": Attr("bool", True, "results in order; they always are here"),
        },
        infer=_topk_infer,
        compute=_topk_compute,
        cost=_topk_cost,
    )
)
