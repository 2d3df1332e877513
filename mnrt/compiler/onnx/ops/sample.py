"""Sampling at coordinates: GridSample and AffineGrid, the two halves of a spatial
transformer (and of optical-flow warping and deformable attention, which give GridSample
a grid of their own).

GridSample is the device's `grid_sample` kernel. AffineGrid is known at import time but for
theta: its grid is each output position's homogeneous normalised coordinates (a constant
base grid of the target size) times theta, one batched `gemm`, so no kernel of its own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..state import Attrs, Ctx, Invalid, Unsupported

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
