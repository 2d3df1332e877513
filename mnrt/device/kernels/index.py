"""Kernels driven by index tensors: gather_elements, gather_nd, scatter_elements,
scatter_nd and onehot, with ONNX's semantics.

Indices are int32 or int64; negative ones count from the end of their axis. An index out
of range is a device error raised by the next finish() (see common.checked_indices), never
a wrong read or write; onehot alone follows ONNX in giving an all-'off' row instead. Data
moves without arithmetic, so it keeps its dtype; the scatter reductions compute in the
data's compute dtype (integers wrap in their own width).
"""

from __future__ import annotations

import numpy as np

from ...errors import DTypeError, ShapeError
from .. import dtypes as dt
from .common import (
    checked_indices,
    gather_cost,
    normalize_axis,
    require_index,
    same_dtype,
    streaming_cost,
)
from .registry import REQUIRED, Attr, Cost, KernelDef, OutSpec, exact, register

# reduction name: how repeated or existing values combine (None: assignment, last wins).
_REDUCTIONS = {
    "none": None,
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}
_REDUCTION_ATTR = Attr(
    "str",
    "none",
    "how updates combine with data: 'none' (replace; the last of duplicates wins), "
    "'add', 'mul', 'max' or 'min'",
    tuple(_REDUCTIONS),
)


def _scatter_into(out: np.ndarray, where: tuple, updates: np.ndarray, reduction: str) -> None:
    ufunc = _REDUCTIONS[reduction]
    if ufunc is None:
        out[where] = updates
    else:
        ufunc.at(out, where, updates)


def _scatter_cost(ins, outs, attrs):
    # data is copied through; updates and indices are read once; one op per update.
    cost = streaming_cost(ins, outs)
    return Cost(flops=float(ins[2].size), dram_bytes=cost.dram_bytes)


# --- gather_elements / scatter_elements --------------------------------------------------


def _elements_check(kernel: str, data, idx, axis: int) -> int:
    require_index(kernel, "indices", idx)
    axis = normalize_axis(kernel, axis, len(data.shape))
    others = [n for a, n in enumerate(data.shape) if a != axis]
    if (
        len(idx.shape) != len(data.shape)
        or [n for a, n in enumerate(idx.shape) if a != axis] != others
    ):
        raise ShapeError(
            f"kernel '{kernel}': indices {idx.shape} must have data's rank "
            f"({len(data.shape)}) and data's dimensions {data.shape} except along axis {axis}"
        )
    return axis


def _element_coordinates(idx: np.ndarray, axis: int) -> tuple:
    """Full coordinates of every index element: its own position, with the axis replaced by
    the (already checked) index."""
    grid = list(np.indices(idx.shape, sparse=True))
    grid[axis] = idx
    return tuple(grid)


def _gather_elements_infer(ins, attrs):
    data, idx = ins
    _elements_check("gather_elements", data, idx, attrs["axis"])
    return [OutSpec(idx.shape, (data.dtype,))]


def _gather_elements_compute(ins, attrs, outs):
    data, idx = ins
    axis = normalize_axis("gather_elements", attrs["axis"], data.ndim)
    idx = checked_indices("gather_elements", idx, data.shape[axis], f"axis {axis}")
    return [data[_element_coordinates(idx, axis)]]


def _scatter_elements_infer(ins, attrs):
    data, idx, updates = ins
    _elements_check("scatter_elements", data, idx, attrs["axis"])
    same_dtype("scatter_elements", [data, updates])
    if updates.shape != idx.shape:
        raise ShapeError(
            f"kernel 'scatter_elements': updates {updates.shape} must have the shape of "
            f"indices {idx.shape}"
        )
    _reduction_dtype("scatter_elements", data.dtype, attrs["reduction"])
    return [OutSpec(data.shape, (data.dtype,))]


def _scatter_elements_compute(ins, attrs, outs):
    data, idx, updates = ins
    axis = normalize_axis("scatter_elements", attrs["axis"], data.ndim)
    idx = checked_indices("scatter_elements", idx, data.shape[axis], f"axis {axis}")
    out = data.copy()
    _scatter_into(out, _element_coordinates(idx, axis), updates, attrs["reduction"])
    return [out]


def _reduction_dtype(kernel: str, d: dt.DType, reduction: str) -> None:
    if reduction != "none" and d is dt.BOOL:
        raise DTypeError(
            f"kernel '{kernel}': reduction '{reduction}' needs numbers, not bool; "
            "use reduction 'none' or cast the data"
        )


# --- gather_nd / scatter_nd -------------------------------------------------------------


def _nd_check(kernel: str, data, idx, batch_dims: int) -> int:
    """The length of each index tuple (indices' last dimension), after checking shapes."""
    require_index(kernel, "indices", idx)
    if not idx.shape:
        raise ShapeError(f"kernel '{kernel}': indices must have rank >= 1, got a scalar")
    k = idx.shape[-1]
    if batch_dims < 0 or batch_dims >= min(len(data.shape), len(idx.shape)):
        raise ShapeError(
            f"kernel '{kernel}': batch_dims {batch_dims} must be below the ranks of data "
            f"{data.shape} and indices {idx.shape}"
        )
    if data.shape[:batch_dims] != idx.shape[:batch_dims]:
        raise ShapeError(
            f"kernel '{kernel}': the first {batch_dims} (batch) dimensions of data "
            f"{data.shape} and indices {idx.shape} must agree"
        )
    if batch_dims + k > len(data.shape):
        raise ShapeError(
            f"kernel '{kernel}': index tuples of length {k} (indices' last dimension) "
            f"address more than the {len(data.shape) - batch_dims} non-batch axes of data "
            f"{data.shape}"
        )
    return k


def _nd_coordinates(kernel: str, data: np.ndarray, idx: np.ndarray, batch_dims: int) -> tuple:
    """Coordinates into data of every index tuple: batch positions, then the checked
    components, each broadcast over indices.shape[:-1]."""
    lead = idx.shape[:-1]
    parts = []
    for b in range(batch_dims):
        shape = [1] * len(lead)
        shape[b] = lead[b]
        parts.append(np.arange(lead[b]).reshape(shape))
    for j in range(idx.shape[-1]):
        axis = batch_dims + j
        parts.append(checked_indices(kernel, idx[..., j], data.shape[axis], f"axis {axis}"))
    return tuple(parts)


def _gather_nd_infer(ins, attrs):
    data, idx = ins
    k = _nd_check("gather_nd", data, idx, attrs["batch_dims"])
    shape = (*idx.shape[:-1], *data.shape[attrs["batch_dims"] + k :])
    return [OutSpec(shape, (data.dtype,))]


def _gather_nd_compute(ins, attrs, outs):
    data, idx = ins
    return [data[_nd_coordinates("gather_nd", data, idx, attrs["batch_dims"])]]


def _scatter_nd_infer(ins, attrs):
    data, idx, updates = ins
    same_dtype("scatter_nd", [data, updates])
    k = _nd_check("scatter_nd", data, idx, 0)
    want = (*idx.shape[:-1], *data.shape[k:])
    if updates.shape != want:
        raise ShapeError(
            f"kernel 'scatter_nd': updates {updates.shape} must have shape {want} "
            "(indices.shape[:-1] + data.shape[indices.shape[-1]:])"
        )
    _reduction_dtype("scatter_nd", data.dtype, attrs["reduction"])
    return [OutSpec(data.shape, (data.dtype,))]


def _scatter_nd_compute(ins, attrs, outs):
    data, idx, updates = ins
    out = data.copy()
    where = _nd_coordinates("scatter_nd", data, idx, 0)
    _scatter_into(out, where, updates, attrs["reduction"])
    return [out]


# --- onehot ----------------------------------------------------------------------------


def _onehot_axis(attrs, rank: int) -> int:
    """Where the new depth axis goes in the output of rank `rank` + 1."""
    return normalize_axis("onehot", attrs["axis"], rank + 1)


def _onehot_infer(ins, attrs):
    idx, values = ins
    if idx.dtype not in dt.NUMERIC:
        raise DTypeError(f"kernel 'onehot': indices must be numbers, got {idx.dtype.name}")
    if values.shape != (2,):
        raise ShapeError(
            f"kernel 'onehot': values must be [off, on] of shape (2,), got {values.shape}"
        )
    depth = attrs["depth"]
    if depth < 1:
        raise ShapeError(f"kernel 'onehot': depth must be at least 1, got {depth}")
    axis = _onehot_axis(attrs, len(idx.shape))
    shape = (*idx.shape[:axis], depth, *idx.shape[axis:])
    return [OutSpec(shape, (values.dtype,))]


def _onehot_compute(ins, attrs, outs):
    idx, values = ins
    depth = attrs["depth"]
    axis = _onehot_axis(attrs, idx.ndim)
    # Float indices are truncated toward zero, as ONNX casts them; out of range is all off.
    whole = np.trunc(idx) if idx.dtype.kind == "f" else idx
    with np.errstate(invalid="ignore"):
        ok = (whole >= -depth) & (whole < depth)
    pos = np.where(ok, whole, 0).astype(np.int64)
    pos = np.where(pos < 0, pos + depth, pos)
    shape = [1] * (idx.ndim + 1)
    shape[axis] = depth
    hot = (np.expand_dims(pos, axis) == np.arange(depth).reshape(shape)) & np.expand_dims(ok, axis)
    return [np.where(hot, values[1], values[0])]


register(
    KernelDef(
        name="gather_elements",
        reduction=exact,  # moves or selects values: no rounding of its own
        doc="y[i][j]... = data at i, j, ... with the axis coordinate taken from indices",
        inputs=("data", "indices"),
        outputs=("y",),
        attrs={"axis": Attr("int", 0, "axis the indices select along (negative from the end)")},
        infer=_gather_elements_infer,
        compute=_gather_elements_compute,
        cost=lambda ins, outs, attrs: gather_cost(ins, outs),
    )
)

register(
    KernelDef(
        name="gather_nd",
        reduction=exact,  # moves or selects values: no rounding of its own
        doc="slices of data at index tuples (indices' last dimension), after batch_dims",
        inputs=("data", "indices"),
        outputs=("y",),
        attrs={"batch_dims": Attr("int", 0, "leading dimensions data and indices share")},
        infer=_gather_nd_infer,
        compute=_gather_nd_compute,
        cost=lambda ins, outs, attrs: gather_cost(ins, outs),
    )
)

register(
    KernelDef(
        name="scatter_elements",
        doc="a copy of data with updates written at indices along axis (ONNX ScatterElements)",
        inputs=("data", "indices", "updates"),
        outputs=("y",),
        attrs={
            "axis": Attr("int", 0, "axis the indices address (negative from the end)"),
            "reduction": _REDUCTION_ATTR,
        },
        infer=_scatter_elements_infer,
        compute=_scatter_elements_compute,
        cost=_scatter_cost,
    )
)

register(
    KernelDef(
        name="scatter_nd",
        doc="a copy of data with update slices written at index tuples (ONNX ScatterND)",
        inputs=("data", "indices", "updates"),
        outputs=("y",),
        attrs={"reduction": _REDUCTION_ATTR},
        infer=_scatter_nd_infer,
        compute=_scatter_nd_compute,
        cost=_scatter_cost,
    )
)

register(
    KernelDef(
        name="onehot",
        reduction=exact,  # moves or selects values: no rounding of its own
        doc="values[1] where the new axis' position equals the index, else values[0]",
        inputs=("indices", "values"),
        outputs=("y",),
        attrs={
            "depth": Attr("int", REQUIRED, "length of the new axis"),
            "axis": Attr(
                "int", -1, "where the new axis goes in the output (negative from the end)"
            ),
        },
        infer=_onehot_infer,
        compute=_onehot_compute,
        cost=lambda ins, outs, attrs: streaming_cost(ins, outs, 0.0),
    )
)
