"""Data-movement kernels: transpose, reshape, slice, concat, gather and expand.

They take every dtype and do no arithmetic, so their cost is bytes only. Each computes a
numpy view where it can; the store makes the one copy into the output buffer.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import KernelAttributeError, ShapeError
from .common import (
    checked_indices,
    gather_cost,
    normalize_axis,
    require_index,
    same_dtype,
    streaming_cost,
)
from .registry import REQUIRED, Attr, Cost, KernelDef, OutSpec, exact, register


def _moving_cost(ins, outs, attrs):
    return streaming_cost(ins, outs, 0.0)


# --- transpose -------------------------------------------------------------------------


def _perm(perm: tuple[int, ...], rank: int) -> tuple[int, ...]:
    if not perm:
        return tuple(reversed(range(rank)))
    if sorted(perm) != list(range(rank)):
        raise KernelAttributeError(
            f"kernel 'transpose': attribute 'perm' {perm} must list each of the {rank} "
            f"axes 0..{rank - 1} once"
        )
    return perm


def _transpose_infer(ins, attrs):
    x = ins[0]
    perm = _perm(attrs["perm"], len(x.shape))
    return [OutSpec(tuple(x.shape[p] for p in perm), (x.dtype,))]


# --- reshape ---------------------------------------------------------------------------


def _reshape_infer(ins, attrs):
    x = ins[0]
    shape = attrs["shape"]
    if any(n < -1 for n in shape) or shape.count(-1) > 1:
        raise KernelAttributeError(
            f"kernel 'reshape': attribute 'shape' {shape} may hold sizes >= 0 and at most "
            "one -1 (inferred)"
        )
    known = math.prod(n for n in shape if n != -1)  # exact: int64 would wrap (or raise)
    if -1 in shape:
        if known == 0:
            raise ShapeError(
                f"kernel 'reshape': cannot infer the -1 in {shape} when another size is 0"
            )
        if x.size % known:
            raise ShapeError(
                f"kernel 'reshape': {x.size} elements of x {x.shape} do not divide into {shape}"
            )
        shape = tuple(x.size // known if n == -1 else n for n in shape)
    elif known != x.size:
        raise ShapeError(
            f"kernel 'reshape': x {x.shape} has {x.size} elements but shape {shape} holds "
            f"{known}; element counts must match"
        )
    return [OutSpec(shape, (x.dtype,))]


# --- slice -----------------------------------------------------------------------------


def _clamp(v: int, lo: int, hi: int) -> int:
    return min(max(v, lo), hi)


def slice_of(shape: tuple[int, ...], attrs) -> tuple[slice, ...]:
    """One Python slice per axis, from ONNX Slice's rules: negative starts and ends count
    from the end, then both are clamped to the axis ([0, dim] going forward, [-1, dim - 1]
    going backward, where -1 means 'past index 0')."""
    starts, ends = attrs["starts"], attrs["ends"]
    rank = len(shape)
    axes = attrs["axes"] or tuple(range(len(starts)))
    steps = attrs["steps"] or (1,) * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise KernelAttributeError(
            f"kernel 'slice': starts, ends, axes and steps must have equal lengths, got "
            f"{len(starts)}, {len(ends)}, {len(axes)}, {len(steps)} (axes and steps may be ())"
        )
    if 0 in steps:
        raise KernelAttributeError(f"kernel 'slice': steps {steps} must not contain 0")
    out = [slice(None)] * rank
    seen = set()
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        a = normalize_axis("slice", axis, rank)
        if a in seen:
            raise KernelAttributeError(f"kernel 'slice': axes {axes} names axis {a} twice")
        seen.add(a)
        dim = shape[a]
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = _clamp(start, 0, dim), _clamp(end, 0, dim)
        else:
            start, end = _clamp(start, 0, dim - 1), _clamp(end, -1, dim - 1)
        out[a] = slice(start, None if end < 0 else end, step)
    return tuple(out)


def run_start(shape: tuple[int, ...], attrs: dict) -> int | None:
    """The element a slice of x (of `shape`) starts at in x's row-major order, where the
    slice is one run of x's elements (the axes inside the innermost one cut taken whole,
    those outside it of one element, in steps of one); None where it is not, or empty. A
    compiler may then read the run in place (compiler/views.py)."""
    ranges = [range(*s.indices(n)) for s, n in zip(slice_of(shape, attrs), shape, strict=True)]
    if not all(ranges) or any(r.step != 1 for r in ranges if len(r) > 1):
        return None
    cut = [i for i, (r, n) in enumerate(zip(ranges, shape, strict=True)) if len(r) < n]
    if cut and any(len(r) > 1 for r in ranges[: cut[-1]]):
        return None
    return sum(r.start * math.prod(shape[i + 1 :]) for i, r in enumerate(ranges))


def _slice_infer(ins, attrs):
    x = ins[0]
    sl = slice_of(x.shape, attrs)
    shape = tuple(len(range(*s.indices(n))) for s, n in zip(sl, x.shape, strict=True))
    return [OutSpec(shape, (x.dtype,))]


def _slice_cost(ins, outs, attrs):
    # Only the selected elements are read, once each.
    moved = float(outs[0].nbytes)
    return Cost(flops=0.0, dram_bytes=2.0 * moved, traffic=(moved, moved))


# --- concat ----------------------------------------------------------------------------


def _concat_infer(ins, attrs):
    d = same_dtype("concat", ins)
    first = ins[0]
    rank = len(first.shape)
    axis = normalize_axis("concat", attrs["axis"], rank)
    total = 0
    for i, t in enumerate(ins):
        others = t.shape[:axis] + t.shape[axis + 1 :]
        if len(t.shape) != rank or others != first.shape[:axis] + first.shape[axis + 1 :]:
            raise ShapeError(
                f"kernel 'concat': xs[{i}] has shape {t.shape} but xs[0] has {first.shape}; "
                f"all inputs must agree except along axis {axis}"
            )
        total += t.shape[axis]
    return [OutSpec((*first.shape[:axis], total, *first.shape[axis + 1 :]), (d,))]


# --- gather ----------------------------------------------------------------------------


def _gather_infer(ins, attrs):
    data, idx = ins
    require_index("gather", "indices", idx)
    axis = normalize_axis("gather", attrs["axis"], len(data.shape))
    shape = (*data.shape[:axis], *idx.shape, *data.shape[axis + 1 :])
    return [OutSpec(shape, (data.dtype,))]


def _gather_compute(ins, attrs, outs):
    data, idx = ins
    axis = normalize_axis("gather", attrs["axis"], data.ndim)
    idx = checked_indices("gather", idx, data.shape[axis], f"axis {axis}")
    return [np.take(data, idx, axis=axis)]


# --- expand ----------------------------------------------------------------------------


def _expand_infer(ins, attrs):
    x = ins[0]
    shape = attrs["shape"]
    ok = all(n >= 0 for n in shape) and len(shape) >= len(x.shape)
    if ok:
        try:
            ok = np.broadcast_shapes(x.shape, shape) == shape
        except (ValueError, RuntimeError):  # RuntimeError: more dimensions than numpy has
            ok = False
    if not ok:
        raise ShapeError(
            f"kernel 'expand': x of shape {x.shape} does not broadcast to {shape}; each "
            "dimension of x must be 1 or equal to the matching trailing size"
        )
    return [OutSpec(shape, (x.dtype,))]


register(
    KernelDef(
        name="transpose",
        doc="permute the axes of x: y.shape[i] = x.shape[perm[i]]",
        inputs=("x",),
        outputs=("y",),
        attrs={"perm": Attr("ints", (), "the input axis of each output axis; () reverses them")},
        infer=_transpose_infer,
        compute=lambda ins, attrs, outs: [np.transpose(ins[0], _perm(attrs["perm"], ins[0].ndim))],
        cost=_moving_cost,
        reduction=exact,
        rearranges=True,
    )
)

register(
    KernelDef(
        name="reshape",
        doc="the elements of x in row-major order, in a new shape",
        inputs=("x",),
        outputs=("y",),
        attrs={
            "shape": Attr("ints", REQUIRED, "output shape; one -1 is inferred, 0 is a real size")
        },
        infer=_reshape_infer,
        compute=lambda ins, attrs, outs: [ins[0].reshape(outs[0].shape)],
        cost=_moving_cost,
        reduction=exact,
        rearranges=True,
        same_bits=True,
    )
)

register(
    KernelDef(
        name="slice",
        doc="strided sub-array of x, ONNX Slice semantics (negative and out-of-range clamp)",
        inputs=("x",),
        outputs=("y",),
        attrs={
            "starts": Attr("ints", REQUIRED, "first index per sliced axis (negative from end)"),
            "ends": Attr("ints", REQUIRED, "end index, exclusive, per sliced axis"),
            "axes": Attr("ints", (), "axes sliced; () means the leading len(starts) axes"),
            "steps": Attr("ints", (), "step per sliced axis, nonzero; () means all 1"),
        },
        infer=_slice_infer,
        compute=lambda ins, attrs, outs: [ins[0][slice_of(ins[0].shape, attrs)]],
        cost=_slice_cost,
        reduction=exact,
    )
)

register(
    KernelDef(
        name="concat",
        doc="join the inputs along axis; all other dimensions must agree",
        inputs=("xs*",),
        outputs=("y",),
        attrs={"axis": Attr("int", REQUIRED, "axis to join along (negative from the end)")},
        infer=_concat_infer,
        compute=lambda ins, attrs, outs: [np.concatenate(ins, axis=attrs["axis"])],
        cost=_moving_cost,
        reduction=exact,
    )
)

register(
    KernelDef(
        name="gather",
        doc="take slices of data along axis at int32/int64 indices (negative: from the end)",
        inputs=("data", "indices"),
        outputs=("y",),
        attrs={"axis": Attr("int", 0, "axis of data the indices select along")},
        infer=_gather_infer,
        compute=_gather_compute,
        cost=lambda ins, outs, attrs: gather_cost(ins, outs),
        reduction=exact,
    )
)

register(
    KernelDef(
        name="expand",
        doc="broadcast x to shape (numpy rules) and materialise the copies",
        inputs=("x",),
        outputs=("y",),
        attrs={"shape": Attr("ints", REQUIRED, "target shape; x must broadcast to it exactly")},
        infer=_expand_infer,
        compute=lambda ins, attrs, outs: [np.broadcast_to(ins[0], attrs["shape"])],
        cost=_moving_cost,
        reduction=exact,
    )
)
