"""Sampling at coordinates: GridSample and AffineGrid, the two halves of a spatial
transformer (and of optical-flow warping and deformable attention, which give GridSample
a grid of their own), and RoiAlign, a detector's second stage.

GridSample is the device's `grid_sample` kernel. AffineGrid is known at import time but for
theta: its grid is each output position's homogeneous normalised coordinates (a constant
base grid of the target size) times theta, one batched `gemm`, so no kernel of its own.
RoiAlign is grid_sample too: its sample points, computed on the device from the regions
(which a run gives: the first stage's boxes), clamped to the feature map as ONNX clamps
them, sampled bilinearly, zeroed where they fall beyond it, and averaged per bin.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid, Unsupported, check_const_size

# Opset 16 names the 2-D modes bilinear and bicubic; opset 20, for any rank, linear and cubic.
_MODES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic",
          "nearest": "nearest"}  # fmt: skip
_PADDINGS = ("zeros", "border", "reflection")


def grid_sample(cx: Ctx, node: Any, at: Attrs) -> list:
    x, grid = cx.sym(node.input[0]), cx.sym(node.input[1])
    mode = at.get("mode", "linear" if cx.opset >= 20 else "bilinear")
    padding = at.get("padding_mode", "zeros")
    if mode not in _MODES:
        raise Invalid(f"mode={mode}: takes {', '.join(_MODES)}")
    if padding not in _PADDINGS:
        raise Invalid(f"padding_mode={padding}: takes {', '.join(_PADDINGS)}")
    for name, s in (("X", x), ("grid", grid)):
        if not cx.dtype(s).is_float:
            raise Unsupported(f"GridSample of a {cx.dtype(s).name} {name}: only floating types")
    return [cx.op("grid_sample", x, grid, mode=_MODES[mode], padding_mode=padding,
                  align_corners=bool(at.get("align_corners", 0)))]  # fmt: skip


def _positions(n: int, align_corners: bool) -> np.ndarray:
    """The normalised coordinates of n pixels along an axis: their centres, spanning
    [-1, 1] to the corner pixels' centres with align_corners, else to the outer edges
    (one pixel sits at 0, as in PyTorch)."""
    if align_corners:
        return np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(n)
    return (2.0 * np.arange(n) + 1.0) / n - 1.0


def _base_grid(spatial: list[int], align_corners: bool) -> np.ndarray:
    """[prod(spatial), k + 1]: every position's coordinates, last axis first (x, y, z, as
    grids hold them), then 1 for theta's translation column."""
    axes = np.meshgrid(*[_positions(d, align_corners) for d in spatial], indexing="ij")
    coords = [a.reshape(-1) for a in reversed(axes)]
    return np.stack([*coords, np.ones_like(coords[0])], axis=1)


def affine_grid(cx: Ctx, node: Any, at: Attrs) -> list:
    theta = cx.sym(node.input[0])
    size = cx.ints(node.input[1], "AffineGrid's size")
    align_corners = bool(at.get("align_corners", 0))
    shape = cx.shape(theta)
    k = len(size) - 2
    if k not in (2, 3) or shape != (size[0], k, k + 1):
        raise Invalid(
            f"theta {shape} and size {size} must be [N, 2, 3] and [N, C, H, W], or "
            "[N, 3, 4] and [N, C, D, H, W]"
        )
    if any(d <= 0 for d in size[2:]):
        raise Invalid(f"size {size} must give every spatial axis at least one position")
    if not cx.dtype(theta).is_float:
        raise Unsupported(f"AffineGrid of a {cx.dtype(theta).name} theta: only floating types")
    base = cx.param(_base_grid(size[2:], align_corners), like=theta, stem="affine_base")
    grid = cx.op("gemm", base, theta, trans_b=True)  # [N, positions, k]
    return [cx.reshape(grid, (size[0], *size[2:], k))]


def roi_align(cx: Ctx, node: Any, at: Attrs) -> list:
    """RoiAlign in avg mode with a sampling_ratio: the number of sample points is then
    fixed, so the regions may be values of the run. The adaptive ratio (0: each region's
    own count, from its size) and max mode (the largest weighted tap, which no bilinear
    sample gives) are refused."""
    x, rois, batch = (cx.sym(n) for n in node.input[:3])
    if len(cx.shape(x)) != 4:
        raise Invalid(f"X has shape {cx.shape(x)}; RoiAlign takes [N, C, H, W]")
    _, _, h, w = cx.shape(x)
    count = cx.shape(rois)[0] if len(cx.shape(rois)) == 2 else -1
    if cx.shape(rois) != (count, 4) or cx.shape(batch) != (count,):
        raise Invalid(f"rois {cx.shape(rois)} and batch_indices {cx.shape(batch)} must be "
                      "[R, 4] and [R]")  # fmt: skip
    if not cx.dtype(x).is_float:
        raise Unsupported(f"RoiAlign of {cx.dtype(x).name} features: only floating types")
    oh, ow = int(at.get("output_height", 1)), int(at.get("output_width", 1))
    ratio = int(at.get("sampling_ratio", 0))
    mode = at.get("mode", "avg")
    if mode != "avg":
        raise Unsupported(f"mode={mode}: its value is the largest weighted tap, not a sample")
    if ratio <= 0:
        raise Unsupported(
            "sampling_ratio=0: each region's number of samples follows its size, which a "
            "static graph cannot; give the model a sampling_ratio"
        )
    if min(oh, ow) < 1:
        raise Invalid(f"output_height {oh} and output_width {ow} must be at least 1")
    default = "half_pixel" if cx.opset >= 16 else "output_half_pixel"
    transform = at.get("coordinate_transformation_mode", default)
    if transform not in ("half_pixel", "output_half_pixel"):
        raise Invalid(f"coordinate_transformation_mode={transform}")
    half = transform == "half_pixel"
    scale = float(at.get("spatial_scale", 1.0))
    if cx.dtype(rois) is not cx.dtype(x):
        rois = cx.op("cast", rois, to=cx.dtype(x).name)

    def const(value: Any) -> Symbol:
        return cx.param(np.asarray(value, np.float64), like=x, stem="roi_align")

    def corner(i: int) -> Symbol:
        v = cx.op("mul", cx.op("slice", rois, starts=[i], ends=[i + 1], axes=[1]), const(scale))
        return cx.op("sub", v, const(0.5)) if half else v

    def points(start: Symbol, end: Symbol, bins: int) -> Symbol:
        """[R, bins * ratio]: the regions' sample positions along one axis."""
        size = cx.op("sub", end, start)
        if not half:  # malformed regions are made 1 x 1
            size = cx.op("maximum", size, const(1.0))
        steps = (np.arange(bins)[:, None] + (np.arange(ratio) + 0.5) / ratio) / bins
        return cx.op("add", start, cx.op("mul", size, const(steps.reshape(1, -1))))

    def inside(v: Symbol, n: int) -> Symbol:
        low = cx.op("greater_equal", v, const(-1.0))
        high = cx.op("less_equal", v, const(float(n)))
        return cx.op("mul", *(cx.op("cast", b, to=cx.dtype(x).name) for b in (low, high)))

    def normalised(v: Symbol, n: int) -> Symbol:
        """Clamped to the map (ONNX's edge rule), as grid_sample's [-1, 1] of pixel centres."""
        clamped = cx.op("minimum", cx.op("maximum", v, const(0.0)), const(float(n - 1)))
        if n == 1:
            return cx.op("mul", clamped, const(0.0))
        return cx.op("sub", cx.op("mul", clamped, const(2.0 / (n - 1))), const(1.0))

    rows, cols = oh * ratio, ow * ratio
    check_const_size((count, rows, cols, 2), cx.dtype(x).itemsize, "RoiAlign's sample grid")
    ys = points(corner(1), corner(3), oh)
    xs = points(corner(0), corner(2), ow)
    full = [count, rows, cols, 1]
    gy = cx.op("expand", cx.reshape(normalised(ys, h), (count, rows, 1, 1)), shape=full)
    gx = cx.op("expand", cx.reshape(normalised(xs, w), (count, 1, cols, 1)), shape=full)
    grid = cx.op("concat", gx, gy, axis=3)
    features = cx.op("gather", x, batch, axis=0)
    sampled = cx.op("grid_sample", features, grid, mode="linear", padding_mode="border",
                    align_corners=True)  # fmt: skip
    mask = cx.op("mul", cx.reshape(inside(ys, h), (count, 1, rows, 1)),
                 cx.reshape(inside(xs, w), (count, 1, 1, cols)))  # fmt: skip
    window = [ratio, ratio]
    return [cx.op("avg_pool2d", cx.op("mul", sampled, mask), kernel=window, stride=window)]
