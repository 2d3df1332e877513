"""grid_sample: ONNX GridSample (opset 20) on the device: each output position reads x at
the normalised coordinates the grid gives it, by nearest, linear or cubic interpolation
over any number of spatial axes, with zeros, border or reflection padding.

Interpolation is separable, so every spatial axis gives each grid point a few taps (an
index and a weight: 1 for nearest, 2 for linear, 4 for cubic) and the output is the sum,
over every combination of one tap per axis, of x at those indices times the product of the
weights: one row gather of all channels per combination, never a loop over elements.
Coordinates follow ONNX's reference step by step (denormalise, round for nearest, move a
coordinate outside the border in or reflect it, then fetch each tap with the padding
mode), in the wider of x's and the grid's compute dtypes; x's values are weighted and
summed in x's compute dtype (float32 for half, bfloat16 and float16) and rounded once
when stored.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ...errors import DTypeError, ShapeError
from .common import check_temporary, require_float
from .registry import Attr, Cost, KernelDef, OutSpec, register

_TAPS = {"nearest": 1, "linear": 2, "cubic": 4}
_CUBIC_A = -0.75  # ONNX's (and PyTorch's) fixed coefficient of Keys' cubic kernel
# Flops per grid coordinate for denormalising it, padding it and weighing its taps.
_COORD_FLOPS = 8
# One tap of one axis: the index it reads, where it lies inside the axis (None: everywhere)
# and its weight (None: nearest's 1).
_Tap = tuple[np.ndarray, np.ndarray | None, np.ndarray | None]


def _output_shape(ins) -> tuple[int, ...]:
    """[N, C, O1..Ok], or a DTypeError or ShapeError saying what is supported."""
    x, grid = ins
    require_float("grid_sample", x.dtype)
    if not grid.dtype.is_float:
        raise DTypeError(f"kernel 'grid_sample': grid must be floating-point, got {grid.dtype}")
    k = len(x.shape) - 2
    if k < 1 or len(grid.shape) != k + 2 or grid.shape[0] != x.shape[0] or grid.shape[-1] != k:
        raise ShapeError(
            "kernel 'grid_sample' takes x [N, C, D1..Dk] (k >= 1 spatial axes) and grid "
            f"[N, O1..Ok, k] of the same N; got x {x.shape} and grid {grid.shape}"
        )
    out = (*x.shape[:2], *grid.shape[1:-1])
    if 0 in x.shape[2:] and math.prod(out):
        raise ShapeError(
            f"kernel 'grid_sample': x {x.shape} has an empty spatial axis, so there is "
            "nothing to sample; give every spatial axis at least one element"
        )
    return out


def _infer(ins, attrs):
    out = _output_shape(ins)
    # Each combination of taps gathers an output-sized array; the rest is grid-sized.
    check_temporary("grid_sample", "the output", math.prod(out))
    return [OutSpec(out, (ins[0].dtype,))]


# --- one spatial axis ------------------------------------------------------------------


def _borders(size: int, align_corners: bool) -> tuple[float, float]:
    """The span of the input's pixels in unnormalised coordinates: centres with
    align_corners, outer edges without."""
    return (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """x folded into [lo, hi] by reflecting at each border as often as it takes."""
    span = hi - lo
    if span == 0:  # one pixel with align_corners: everything reflects onto it
        return np.where(np.isnan(x), x, lo)
    below = x < lo
    dx = np.where(below, lo - x, x - hi)
    flips = np.floor(dx / span)
    r = dx - flips * span
    even = flips % 2 == 0
    from_lo, from_hi = lo + r, hi - r
    folded = np.where(below == even, from_lo, from_hi)
    return np.where(below | (x > hi), folded, x)


def _cubic_weights(t: np.ndarray) -> list[np.ndarray]:
    """Keys' weights of the taps at -1, 0, 1 and 2 from a point t in [0, 1) past tap 0."""
    a = _CUBIC_A
    far = [t + 1, 2 - t]
    near = [t, 1 - t]
    w_far = [((a * s - 5 * a) * s + 8 * a) * s - 4 * a for s in far]
    w_near = [((a + 2) * s - (a + 3)) * s * s + 1 for s in near]
    return [w_far[0], w_near[0], w_near[1], w_far[1]]


def _axis_taps(g: np.ndarray, size: int, attrs) -> list[_Tap]:
    """The taps of one axis for the normalised coordinates g."""
    mode, padding = attrs["mode"], attrs["padding_mode"]
    lo, hi = _borders(size, attrs["align_corners"])
    # The reference's formulas, in its order of operations (ties for nearest depend on it).
    x = (g + 1) / 2 * (size - 1) if attrs["align_corners"] else ((g + 1) * size - 1) / 2
    if mode == "nearest":
        x = np.rint(x)  # half to even, as PyTorch and ONNX's reference
    if padding == "border":
        x = np.where((x < lo) | (x > hi), np.clip(x, 0, size - 1), x)
    elif padding == "reflection":
        x = _reflect(x, lo, hi)
    # A coordinate far outside (or nan) only needs its taps to stay outside the axis.
    base = np.floor(np.clip(x, -8, size + 8))
    base = np.where(np.isnan(base), -8, base).astype(np.int64)
    if mode == "nearest":
        offsets, weights = [0], [None]
    elif mode == "linear":
        t = x - np.floor(x)
        offsets, weights = [0, 1], [1 - t, t]
    else:
        offsets, weights = [-1, 0, 1, 2], _cubic_weights(x - np.floor(x))
    taps = []
    for offset, w in zip(offsets, weights, strict=True):
        i = base + offset
        inside = None
        if padding == "zeros":
            inside = (i >= 0) & (i < size)
        elif padding == "reflection":
            i = np.trunc(_reflect(i.astype(x.dtype), lo, hi)).astype(np.int64)
        taps.append((np.clip(i, 0, size - 1), inside, w))
    return taps


# --- the kernel ------------------------------------------------------------------------


def _compute(ins, attrs, outs):
    x, grid = ins
    n, c, *dims = x.shape
    points = grid.shape[1:-1]
    if 0 in outs[0].shape:
        return [np.zeros(outs[0].shape, x.dtype)]
    coord = np.promote_types(x.dtype, grid.dtype)
    g = grid.reshape(n, -1, len(dims)).astype(coord, copy=False)
    # The grid's last axis runs from the last spatial axis (its x) to the first.
    axes = [_axis_taps(g[:, :, len(dims) - 1 - a], d, attrs) for a, d in enumerate(dims)]
    strides = [math.prod(dims[a + 1 :]) for a in range(len(dims))]
    rows = np.moveaxis(x, 1, -1).reshape(-1, c)  # [N * D1..Dk, C]: a tap reads one row
    first = (np.arange(n) * math.prod(dims))[:, None]
    acc = None
    for combo in itertools.product(*axes):
        index = first + sum(i * s for (i, _, _), s in zip(combo, strides, strict=True))
        value = rows[index]  # [N, P, C]
        masks = [m for _, m, _ in combo if m is not None]
        if masks:
            inside = np.logical_and.reduce(masks)
            if not inside.all():
                value = np.where(inside[..., None], value, 0)
        weights = [w for _, _, w in combo if w is not None]
        if weights:
            value = value * math.prod(weights).astype(x.dtype)[..., None]
        acc = value if acc is None else acc + value
    return [np.moveaxis(acc, -1, 1).reshape(n, c, *points)]


def _reduction(ins, attrs) -> int:
    """The taps each output element sums; nearest only picks a value."""
    if attrs["mode"] == "nearest":
        return 0
    return _TAPS[attrs["mode"]] ** (len(ins[0].shape) - 2)


def _cost(ins, outs, attrs):
    """A multiply-add per tap and output element (nearest: a select) on the vector units,
    plus the coordinate work per grid value. The input is read like a gather's table: the
    taps it needs, but never more than all of it once, which a tiled kernel keeps on chip
    when neighbouring outputs share taps."""
    x, grid = ins
    y = outs[0]
    taps = _TAPS[attrs["mode"]] ** (len(x.shape) - 2)
    per_tap = 1.0 if attrs["mode"] == "nearest" else 2.0
    flops = per_tap * taps * y.size + _COORD_FLOPS * grid.size
    read = float(min(taps * y.size, x.size) * x.dtype.itemsize)
    traffic = (read, float(grid.nbytes), float(y.nbytes))
    return Cost(flops=flops, dram_bytes=sum(traffic), traffic=traffic)


register(
    KernelDef(
        name="grid_sample",
        doc="ONNX GridSample: sample x at a grid's normalised coordinates (N-D, 3 modes)",
        inputs=("x", "grid"),
        outputs=("y",),
        attrs={
            "mode": Attr("str", "linear", "interpolation", tuple(_TAPS)),
            "padding_mode": Attr(
                "str", "zeros", "what taps outside x read", ("zeros", "border", "reflection")
            ),
            "align_corners": Attr("bool", False, "-1 and 1 are the corner pixels' centres"),
        },
        infer=_infer,
        compute=_compute,
        cost=_cost,
        reduction=_reduction,
    )
)
