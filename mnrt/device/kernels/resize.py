"""resize: ONNX Resize (opset 19) on the device: nearest, linear and cubic interpolation,
every coordinate transformation mode, antialiasing, exclude_outside and extrapolation.

Interpolation is separable, so it runs one axis at a time: each output position along the
axis maps to a source coordinate (the coordinate transformation), which picks a window of
neighbouring source positions (clamped to the edge, like ONNX's edge padding) and their
weights (the mode's coefficients). A compiler resolves ONNX's optional inputs first:
`axes` and `keep_aspect_ratio_policy` become full-rank `sizes` and `scales`.

Nearest is a pure gather in the operand's own dtype (exact for every dtype, infinities
and nan included). Linear and cubic compute in float64 and round once when stored;
integers are rounded half to even and saturated, as ONNX's reference does, which is exact
only up to 32-bit integers, so 64-bit integers are refused for them.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import DTypeError, KernelAttributeError
from .. import dtypes as dt
from .common import check_temporary
from .registry import Attr, Cost, KernelDef, OutSpec, register

_TRANSFORMS = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_WIDE_INTEGERS = (dt.INT64, dt.UINT64)


# --- shapes ----------------------------------------------------------------------------


def _geometry(x_shape: tuple[int, ...], attrs) -> tuple[list[float], list[int]]:
    """Per-axis scale factors and output sizes: the ones given, the other derived (sizes
    from scales truncate, scales from sizes divide), as ONNX's reference does."""
    rank = len(x_shape)
    scales, sizes = attrs["scales"], attrs["sizes"]
    if not scales and not sizes:
        raise KernelAttributeError("kernel 'resize' needs 'scales' or 'sizes' (one per axis)")
    for name, given in (("scales", scales), ("sizes", sizes)):
        if given and len(given) != rank:
            raise KernelAttributeError(
                f"kernel 'resize': '{name}' {given} must have one entry per axis of x "
                f"{x_shape} ({rank})"
            )
    if sizes and any(n < 0 for n in sizes):
        raise KernelAttributeError(f"kernel 'resize': sizes {sizes} must not be negative")
    if scales and not all(s > 0 and math.isfinite(s) for s in scales):
        raise KernelAttributeError(f"kernel 'resize': scales {scales} must be finite and > 0")
    if not scales:
        if 0 in x_shape:
            raise KernelAttributeError(
                f"kernel 'resize': x {x_shape} has an empty axis, so sizes cannot give "
                "scales; give 'scales'"
            )
        scales = tuple(n / m for n, m in zip(sizes, x_shape, strict=True))
    if not sizes:
        sizes = tuple(int(s * m) for s, m in zip(scales, x_shape, strict=True))
    return list(scales), list(sizes)


def _infer(ins, attrs):
    x = ins[0]
    if x.dtype not in dt.NUMERIC and not (x.dtype is dt.BOOL and attrs["mode"] == "nearest"):
        raise DTypeError(f"kernel 'resize' does not take {x.dtype.name} operands")
    if x.dtype in _WIDE_INTEGERS and attrs["mode"] != "nearest":
        raise DTypeError(
            f"kernel 'resize': {attrs['mode']} interpolation of {x.dtype.name} would pass "
            "through float64 and lose values above 2**53; use mode 'nearest' or cast first"
        )
    if attrs["antialias"] and attrs["mode"] == "nearest":
        raise KernelAttributeError("kernel 'resize': antialias applies to linear and cubic only")
    roi = attrs["roi"]
    cropping = attrs["coordinate_transformation_mode"] == "tf_crop_and_resize"
    if cropping and len(roi) != 2 * len(x.shape):
        raise KernelAttributeError(
            f"kernel 'resize': tf_crop_and_resize needs 'roi' of 2 * rank = "
            f"{2 * len(x.shape)} values (starts, then ends), got {roi}"
        )
    sizes = _geometry(x.shape, attrs)[1]
    check_temporary("resize", "the output", math.prod(sizes))
    return [OutSpec(tuple(sizes), (x.dtype,))]


# --- one axis --------------------------------------------------------------------------


def _source_coordinates(
    transform: str, out: int, size: int, scale: float, roi: tuple[float, float] | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Where each output position along an axis samples the input, and (for
    tf_crop_and_resize) which positions fall outside it and take extrapolation_value."""
    y = np.arange(out, dtype=np.float64)
    width = scale * size  # the unrounded output length
    outside = None
    if transform == "align_corners":
        x = np.zeros(out) if width == 1 else y * (size - 1) / (width - 1)
    elif transform == "asymmetric":
        x = y / scale
    elif transform == "tf_crop_and_resize":
        start, end = roi
        if width == 1:
            x = np.full(out, (end - start) * (size - 1) / 2)
        else:
            x = y * (end - start) * (size - 1) / (width - 1)
        x = x + start * (size - 1)
        outside = (x < 0) | (x > size - 1)
    elif transform == "pytorch_half_pixel":
        x = np.full(out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif transform == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    else:  # half_pixel_symmetric: the input's centre maps to the output's centre
        offset = size / 2 * (1 - out / width)
        x = offset + (y + 0.5) / scale - 0.5
    return x, outside


def _cubic(t: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel at distances t."""
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _coefficients(ratio: np.ndarray, scale: float, attrs) -> np.ndarray:
    """Weights [out, taps] of each output position's window, from the position's offset
    `ratio` in (0, 1] past the window's left-centre pixel."""
    mode = attrs["mode"]
    r = ratio[:, None]
    if mode == "nearest":
        nm = attrs["nearest_mode"]
        whole = r == 1.0
        if nm == "round_prefer_floor":
            right = r > 0.5
        elif nm == "round_prefer_ceil":
            right = r >= 0.5
        else:
            right = np.full(r.shape, nm == "ceil")
        right = right | whole
        return np.concatenate([~right, right], axis=1).astype(np.float64)
    if not attrs["antialias"]:
        if mode == "linear":
            return np.concatenate([1 - r, r], axis=1)
        taps = np.array([-1.0, 0.0, 1.0, 2.0])
        return _cubic(taps[None, :] - r, attrs["cubic_coeff_a"])
    # Antialiasing widens the kernel by 1 / scale when shrinking.
    s = min(scale, 1.0)
    if mode == "linear":
        first = math.floor(-1 / s) + 1
        taps = np.arange(first, 2 - first, dtype=np.float64)
        w = np.clip(1 - np.abs((taps[None, :] - r) * s), 0, 1)
    else:
        first = math.floor(-2 / s) + 1
        taps = np.arange(first, 2 - first, dtype=np.float64)
        w = _cubic(s * (taps[None, :] - r), attrs["cubic_coeff_a"])
    return w / w.sum(axis=1, keepdims=True)


def _window(x: np.ndarray, taps: int) -> np.ndarray:
    """Source positions [out, taps] of each window: the `taps` positions nearest x, ties to
    the lower one (ONNX's neighbour rule), unclamped."""
    pad = math.ceil(taps / 2)
    xp = x + pad
    p = np.floor(xp)
    frac = xp - p
    if taps % 2 == 0:
        offset = np.where(frac == 0, -(taps // 2), -(taps // 2) + 1)
    else:
        base = -((taps - 1) // 2)
        offset = np.where(frac <= 0.5, base, base + 1)
    start = p.astype(np.int64) + offset
    return start[:, None] + np.arange(taps)[None, :] - pad


def _resize_axis(data: np.ndarray, axis: int, out: int, scale: float, roi, attrs) -> np.ndarray:
    size = data.shape[axis]
    if out == 0 or size == 0:
        shape = list(data.shape)
        shape[axis] = out
        return np.zeros(shape, data.dtype)
    x, outside = _source_coordinates(attrs["coordinate_transformation_mode"], out, size, scale, roi)
    base = np.floor(x)
    ratio = np.where(x == base, 1.0, x - base)
    coeffs = _coefficients(ratio, scale, attrs)
    window = _window(x, coeffs.shape[1])
    if attrs["exclude_outside"]:
        coeffs = np.where((window < 0) | (window >= size), 0.0, coeffs)
        total = coeffs.sum(axis=1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    window = np.clip(window, 0, size - 1)
    if attrs["mode"] == "nearest":
        picked = window[np.arange(out), np.argmax(coeffs, axis=1)]
        result = np.take(data, picked, axis=axis)
    else:
        taps = np.take(data, window, axis=axis)  # [..., out, taps, ...]
        shape = (1,) * axis + coeffs.shape + (1,) * (data.ndim - axis - 1)
        result = (taps * coeffs.reshape(shape)).sum(axis=axis + 1)
    if outside is not None and outside.any():
        mask = outside.reshape((1,) * axis + (out,) + (1,) * (data.ndim - axis - 1))
        result = np.where(mask, np.asarray(attrs["extrapolation_value"], result.dtype), result)
    return result


def _compute(ins, attrs, outs):
    x = ins[0]
    scales, sizes = _geometry(x.shape, attrs)
    rank = x.ndim
    # The roi means something to tf_crop_and_resize only; other modes ignore it, as ONNX.
    cropping = attrs["coordinate_transformation_mode"] == "tf_crop_and_resize"
    roi = attrs["roi"] if cropping else ()
    data = x if attrs["mode"] == "nearest" else x.astype(np.float64)
    for axis in range(rank):
        axis_roi = (roi[axis], roi[axis + rank]) if roi else None
        identity = sizes[axis] == x.shape[axis] and math.isclose(scales[axis], 1.0)
        if identity and (axis_roi is None or axis_roi == (0.0, 1.0)):
            continue
        data = _resize_axis(data, axis, sizes[axis], scales[axis], axis_roi, attrs)
    if attrs["mode"] != "nearest" and outs[0].dtype.is_integer:
        info = np.iinfo(outs[0].dtype.compute)
        data = np.clip(np.rint(data), info.min, info.max)
    return [data]


def _cost(ins, outs, attrs):
    # Per output element and resized axis, one multiply-add per tap (none for nearest).
    taps = {"nearest": 0, "linear": 2, "cubic": 4}[attrs["mode"]]
    flops = 2.0 * taps * outs[0].size * max(len(outs[0].shape), 1)
    moved = ins[0].nbytes + outs[0].nbytes
    return Cost(flops=flops, dram_bytes=float(moved))


register(
    KernelDef(
        name="resize",
        doc="ONNX Resize: nearest, linear or cubic interpolation to full-rank sizes/scales",
        inputs=("x",),
        outputs=("y",),
        attrs={
            "scales": Attr("floats", (), "scale per axis (default sizes / input sizes)"),
            "sizes": Attr("ints", (), "output size per axis (default floor(scale * size))"),
            "mode": Attr("str", "nearest", "interpolation", ("nearest", "linear", "cubic")),
            "coordinate_transformation_mode": Attr(
                "str", "half_pixel", "how output positions map to input ones", _TRANSFORMS
            ),
            "nearest_mode": Attr(
                "str", "round_prefer_floor", "rounding of nearest", _NEAREST_MODES
            ),
            "cubic_coeff_a": Attr("float", -0.75, "the cubic kernel's a"),
            "exclude_outside": Attr("bool", False, "drop (and renormalise) taps outside x"),
            "extrapolation_value": Attr("float", 0.0, "value outside the roi (tf_crop_and_resize)"),
            "antialias": Attr("bool", False, "widen linear/cubic kernels when shrinking"),
            "roi": Attr("floats", (), "tf_crop_and_resize region: starts then ends, per axis"),
        },
        infer=_infer,
        compute=_compute,
        cost=_cost,
    )
)
