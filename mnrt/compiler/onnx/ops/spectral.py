"""DFT and STFT: a discrete Fourier transform along one axis is linear in the real and
imaginary parts of that axis's samples, so it is one constant matrix, which a GEMM applies on
the device (as an MN-Core runs a short transform: on its matrix units). The matrix is what
ONNX's reference op computes from each basis signal, so every variant the op has (inverse,
one-sided, the inverse of a one-sided spectrum, a DFT length that pads or truncates, a
window) is the reference's, by construction. An STFT gathers its frames first."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...builder import Symbol
from ..fold import fold
from ..state import Attrs, Ctx, Invalid, Unsupported, axis_index
from .common import optional_input

# A transform matrix has (samples x parts) x (bins x 2) entries: a limit a few frames of
# audio stay well within, and that keeps a mistaken length from making a huge constant.
_MAX_ENTRIES = 1 << 24


def _scalar(cx: Ctx, node: Any, index: int, what: str) -> int | None:
    """An optional scalar input, which must be known at import time (it sets a shape)."""
    name = optional_input(node, index)
    if name is None:
        return None
    values = cx.ints(name, f"{what} (it sets the output's shape)")
    if len(values) != 1:
        raise Invalid(f"{what} must hold one value, not {len(values)}")
    return values[0]


def _matrix(
    cx: Ctx, probe: Any, n: int, parts: int, bins: int, extra: list[np.ndarray]
) -> np.ndarray:
    """The (n * parts, bins * out_parts) matrix of `probe` (a DFT or STFT node reading a
    batch of signals of n samples of `parts` values along axis 1, giving at most `bins`
    outputs of two parts): the reference op run on every basis signal at once, in float64."""
    entries = n * parts * bins * 2
    if entries > _MAX_ENTRIES:
        raise Unsupported(
            f"a transform of {n} samples into {bins} (its matrix would hold {entries} "
            f"entries; at most {_MAX_ENTRIES})"
        )
    basis = np.eye(n * parts).reshape(n * parts, n, parts)
    result = fold(probe, [basis, *extra], cx.opsets)
    if result is None:
        raise Invalid(f"ONNX's reference {probe.op_type} cannot evaluate these attributes")
    (y,) = result
    return y.reshape(n * parts, -1)


def _apply(cx: Ctx, x: Symbol, axis: int, m: np.ndarray, parts_out: int) -> Symbol:
    """x (its last axis the real and imaginary parts) with `axis` transformed by m: that
    axis and the parts moved last and flattened, one GEMM, and back."""
    shape = cx.shape(x)
    rank = len(shape)
    perm = [i for i in range(rank - 1) if i != axis] + [axis, rank - 1]
    moved = cx.op("transpose", x, perm=perm) if axis != rank - 2 else x
    lead = [shape[i] for i in perm[:-2]]
    flat = cx.reshape(moved, (int(np.prod(lead)), m.shape[0]))
    y = cx.op("gemm", flat, cx.param(m, like=x, stem="dft_matrix"))
    bins = m.shape[1] // parts_out
    y = cx.reshape(y, (*lead, bins, parts_out))
    back = [int(i) for i in np.argsort(perm)]
    return cx.op("transpose", y, perm=back) if axis != rank - 2 else y


def _signal(cx: Ctx, node: Any, what: str) -> tuple[Symbol, tuple[int, ...]]:
    x = cx.sym(node.input[0])
    shape = cx.shape(x)
    if len(shape) < 2 or shape[-1] not in (1, 2):
        raise Invalid(
            f"{what} has shape {shape}; its last axis must hold the real part (1) or the "
            "real and imaginary parts (2) of each sample"
        )
    if not cx.dtype(x).is_float:
        raise Invalid(f"{what} must be a float tensor, not {cx.dtype(x).name}")
    return x, shape


def dft(cx: Ctx, node: Any, at: Attrs) -> list:
    """DFT (opset 17 on): the axis (an attribute before opset 20, an input since) and
    dft_length set the output's shape, so they must be known at import time."""
    x, shape = _signal(cx, node, "the input")
    rank = len(shape)
    if cx.opset >= 20:
        given = _scalar(cx, node, 2, "axis")
        raw = -2 if given is None else given
    else:
        raw = int(at.get("axis", 1))
    axis = axis_index(raw, rank)
    if axis == rank - 1:
        raise Invalid(f"axis {raw} is the input's last axis, its real and imaginary parts")
    if shape[axis] == 0:
        raise Invalid(f"the input has no samples along axis {raw}")
    length = _scalar(cx, node, 1, "dft_length")
    if length is not None and length < 1:
        raise Invalid(f"dft_length {length} must be at least 1")
    inverse, onesided = int(at.get("inverse", 0)), int(at.get("onesided", 0))
    from onnx import helper

    names, extra = ["x", "n" if length is not None else ""], []
    if length is not None:
        extra.append(np.array(length, np.int64))
    attrs = {"inverse": inverse, "onesided": onesided}
    if cx.opset >= 20:
        names.append("axis")
        extra.append(np.array(1, np.int64))
    else:
        attrs["axis"] = 1
    probe = helper.make_node("DFT", names, ["y"], **attrs)
    m = _matrix(cx, probe, shape[axis], shape[-1], length or shape[axis], extra)
    parts_out = 1 if inverse and onesided else 2  # the inverse of a one-sided spectrum is real
    return [_apply(cx, x, axis, m, parts_out)]


def stft(cx: Ctx, node: Any, at: Attrs) -> list:
    """STFT: frame_step, frame_length and the window must be known at import time (the
    window is folded into the transform's matrix); frames are gathered from the signal."""
    x, shape = _signal(cx, node, "the signal")
    if len(shape) != 3:
        raise Invalid(f"the signal has shape {shape}; it must be [batch, length, 1 or 2]")
    step = _scalar(cx, node, 1, "frame_step")
    if step is None or step < 1:
        raise Invalid(f"frame_step {step} must be at least 1")
    window_name = optional_input(node, 2)
    window = None if window_name is None else np.asarray(cx.const(window_name, "the window"))
    if window is not None and window.dtype.kind != "f":
        raise Invalid(f"the window must be a float tensor, not {window.dtype}")
    length = _scalar(cx, node, 3, "frame_length")
    if window is not None and (window.ndim != 1 or (length is not None and window.size != length)):
        raise Invalid(
            f"the window has shape {window.shape}; it must be 1-D, of frame_length {length}"
        )
    length = length if length is not None else window.size if window is not None else shape[1]
    if not 1 <= length <= shape[1]:
        raise Invalid(f"frame_length {length} must be from 1 to the signal's length {shape[1]}")
    from onnx import helper

    names = ["x", "step", "w" if window is not None else "", "n"]
    extra = [np.array(length, np.int64)]  # one frame of the probe's signal: any step
    extra = [
        np.array(1, np.int64),
        *([window.astype(np.float64)] if window is not None else []),
        *extra,
    ]
    probe = helper.make_node("STFT", names, ["y"], onesided=int(at.get("onesided", 1)))
    m = _matrix(cx, probe, length, shape[2], length, extra)
    frames = 1 + (shape[1] - length) // step
    at_frames = (np.arange(frames)[:, None] * step + np.arange(length)).astype(np.int64)
    framed = cx.op("gather", x, cx.param(at_frames, stem="stft_frames"), axis=1)
    y = _apply(cx, framed, 2, m, 2)
    return [y]
