"""Kernels that move elements without arithmetic: trilu, depth_to_space, space_to_depth
and reverse_sequence, with ONNX's semantics. They take every dtype; cost is bytes only."""

from __future__ import annotations

import numpy as np

from ...errors import DeviceExecutionError, ShapeError
from .common import normalize_axis, require_index, require_rank, streaming_cost
from .registry import REQUIRED, Attr, KernelDef, OutSpec, register


def _moving_cost(ins, outs, attrs):
    return streaming_cost(ins, outs, 0.0)


# --- trilu -----------------------------------------------------------------------------


def _trilu_infer(ins, attrs):
    x = ins[0]
    require_rank("trilu", "x", x, range(2, 9))
    return [OutSpec(x.shape, (x.dtype,))]


def _trilu_compute(ins, attrs, outs):
    x = ins[0]
    rows, cols = x.shape[-2:]
    i = np.arange(rows)[:, None]
    j = np.arange(cols)[None, :]
    keep = (j - i >= attrs["k"]) if attrs["upper"] else (j - i <= attrs["k"])
    return [np.where(keep, x, np.zeros((), x.dtype))]


register(
    KernelDef(
        name="trilu",
        doc="the upper (or lower) triangle of the last two axes from diagonal k; zeros elsewhere",
        inputs=("x",),
        outputs=("y",),
        attrs={
            "upper": Attr("bool", True, "keep the upper triangle (else the lower)"),
            "k": Attr("int", 0, "diagonal offset: > 0 above the main diagonal, < 0 below"),
        },
        infer=_trilu_infer,
        compute=_trilu_compute,
        cost=_moving_cost,
    )
)


# --- depth_to_space / space_to_depth ------------------------------------------------------


def _blocksize(kernel: str, attrs) -> int:
    b = attrs["blocksize"]
    if b < 1:
        raise ShapeError(f"kernel '{kernel}': blocksize must be at least 1, got {b}")
    return b


def _d2s_infer(ins, attrs):
    x = ins[0]
    require_rank("depth_to_space", "x", x, (4,))
    b = _blocksize("depth_to_space", attrs)
    n, c, h, w = x.shape
    if c % (b * b):
        raise ShapeError(
            f"kernel 'depth_to_space': channels {c} of x {x.shape} are not a multiple of "
            f"blocksize**2 = {b * b}"
        )
    return [OutSpec((n, c // (b * b), h * b, w * b), (x.dtype,))]


def _d2s_compute(ins, attrs, outs):
    x = ins[0]
    b = attrs["blocksize"]
    n, c, h, w = x.shape
    if attrs["mode"] == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return [y.reshape(outs[0].shape)]


def _s2d_infer(ins, attrs):
    x = ins[0]
    require_rank("space_to_depth", "x", x, (4,))
    b = _blocksize("space_to_depth", attrs)
    n, c, h, w = x.shape
    if h % b or w % b:
        raise ShapeError(
            f"kernel 'space_to_depth': height and width of x {x.shape} must be multiples "
            f"of blocksize {b}"
        )
    return [OutSpec((n, c * b * b, h // b, w // b), (x.dtype,))]


def _s2d_compute(ins, attrs, outs):
    x = ins[0]
    b = attrs["blocksize"]
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return [y.reshape(outs[0].shape)]


register(
    KernelDef(
        name="depth_to_space",
        doc="NCHW: channel blocks moved into blocksize x blocksize spatial tiles",
        inputs=("x",),
        outputs=("y",),
        attrs={
            "blocksize": Attr("int", REQUIRED, "tile edge"),
            "mode": Attr(
                "str", "DCR", "'DCR' (depth, column, row) or 'CRD' channel order", ("DCR", "CRD")
            ),
        },
        infer=_d2s_infer,
        compute=_d2s_compute,
        cost=_moving_cost,
    )
)

register(
    KernelDef(
        name="space_to_depth",
        doc="NCHW: blocksize x blocksize spatial tiles moved into channels (inverse of DCR)",
        inputs=("x",),
        outputs=("y",),
        attrs={"blocksize": Attr("int", REQUIRED, "tile edge")},
        infer=_s2d_infer,
        compute=_s2d_compute,
        cost=_moving_cost,
    )
)


# --- reverse_sequence ------------------------------------------------------------------


def _axes(attrs, rank: int) -> tuple[int, int]:
    batch = normalize_axis("reverse_sequence", attrs["batch_axis"], rank)
    time = normalize_axis("reverse_sequence", attrs["time_axis"], rank)
    return batch, time


def _reverse_infer(ins, attrs):
    x, lens = ins
    require_rank("reverse_sequence", "x", x, range(2, 9))
    require_index("reverse_sequence", "sequence_lens", lens)
    batch, time = _axes(attrs, len(x.shape))
    if batch == time:
        raise ShapeError("kernel 'reverse_sequence': batch_axis and time_axis must differ")
    if lens.shape != (x.shape[batch],):
        raise ShapeError(
            f"kernel 'reverse_sequence': sequence_lens {lens.shape} must have one length "
            f"per batch entry ({x.shape[batch]},)"
        )
    return [OutSpec(x.shape, (x.dtype,))]


def _reverse_compute(ins, attrs, outs):
    x, lens = ins
    batch, time = _axes(attrs, x.ndim)
    steps = x.shape[time]
    bad = (lens < 0) | (lens > steps)
    if bad.any():
        raise DeviceExecutionError(
            f"kernel 'reverse_sequence': sequence length {int(lens[bad][0])} is outside "
            f"0..{steps} (the length of time axis {time})"
        )
    # Source position along time of each (batch, t): reversed within the length, else kept.
    t = np.arange(steps)[None, :]
    n = lens.astype(np.int64)[:, None]
    src = np.where(t < n, n - 1 - t, t)  # [batch, time]
    moved = np.moveaxis(x, (batch, time), (0, 1))
    rows = np.arange(x.shape[batch])[:, None]
    return [np.moveaxis(moved[rows, src], (0, 1), (batch, time))]


register(
    KernelDef(
        name="reverse_sequence",
        doc="each batch entry's first sequence_lens[i] steps along time_axis reversed",
        inputs=("x", "sequence_lens"),
        outputs=("y",),
        attrs={
            "batch_axis": Attr("int", 1, "axis of the batch entries"),
            "time_axis": Attr("int", 0, "axis reversed"),
        },
        infer=_reverse_infer,
        compute=_reverse_compute,
        cost=_moving_cost,
    )
)
