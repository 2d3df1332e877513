"""Kernels that move elements without arithmetic: trilu, depth_to_space, space_to_depth,
reverse_sequence, pad and tile, with ONNX's semantics, and roll. They take every dtype; cost
is bytes only."""

from __future__ import annotations

import math

import numpy as np

from ...errors import DeviceExecutionError, KernelAttributeError, ShapeError
from .common import (
    check_temporary,
    normalize_axis,
    require_index,
    require_rank,
    streaming_cost,
)
from .registry import REQUIRED, Attr, KernelDef, OutSpec, exact, register


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
        reduction=exact,  # moves or selects values: no rounding of its own
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


_MODE = Attr("str", "DCR", "channel order: 'DCR' (depth, column, row) or 'CRD'", ("DCR", "CRD"))


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
    order = (0, 3, 5, 1, 2, 4) if attrs["mode"] == "DCR" else (0, 1, 3, 5, 2, 4)
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(order)
    return [y.reshape(outs[0].shape)]


register(
    KernelDef(
        name="depth_to_space",
        reduction=exact,  # moves or selects values: no rounding of its own
        doc="NCHW: channel blocks moved into blocksize x blocksize spatial tiles",
        inputs=("x",),
        outputs=("y",),
        attrs={
            "blocksize": Attr("int", REQUIRED, "tile edge"),
            "mode": _MODE,
        },
        infer=_d2s_infer,
        compute=_d2s_compute,
        cost=_moving_cost,
        rearranges=True,
    )
)

register(
    KernelDef(
        name="space_to_depth",
        reduction=exact,  # moves or selects values: no rounding of its own
        doc="NCHW: blocksize x blocksize spatial tiles moved into channels (undoes depth_to_space)",
        inputs=("x",),
        outputs=("y",),
        attrs={"blocksize": Attr("int", REQUIRED, "tile edge"), "mode": _MODE},
        infer=_s2d_infer,
        compute=_s2d_compute,
        cost=_moving_cost,
        rearranges=True,
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
        reduction=exact,  # moves or selects values: no rounding of its own
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


# --- pad -------------------------------------------------------------------------------


def _pad_infer(ins, attrs):
    x = ins[0]
    pads, rank = attrs["pads"], len(x.shape)
    if len(pads) != 2 * rank:
        raise KernelAttributeError(
            f"kernel 'pad': pads {pads} must hold 2 * rank = {2 * rank} values (every "
            "axis' begin, then every axis' end)"
        )
    shape = tuple(n + pads[a] + pads[a + rank] for a, n in enumerate(x.shape))
    if any(n < 0 for n in shape):
        raise ShapeError(f"kernel 'pad': pads {pads} crop x {x.shape} below nothing")
    mode = attrs["mode"]
    # Negative pads crop before the mode pads: an axis cropped to nothing has no values to
    # reflect, repeat or wrap.
    cropped = [n - max(-pads[a], 0) - max(-pads[a + rank], 0) for a, n in enumerate(x.shape)]
    if mode != "constant" and any(c <= 0 and s > 0 for c, s in zip(cropped, shape, strict=True)):
        raise ShapeError(
            f"kernel 'pad': mode '{mode}' cannot pad an axis of {x.shape} that pads {pads} "
            "leave empty; pad with mode 'constant' or crop less"
        )
    if x.dtype.is_integer or x.dtype.storage.kind == "b":
        value = attrs["value"]
        info = np.iinfo(x.dtype.compute) if x.dtype.is_integer else None
        whole = float(value).is_integer()
        if not whole or (info is not None and not info.min <= value <= info.max):
            raise KernelAttributeError(
                f"kernel 'pad': value {value} is not a {x.dtype.name}; give one it holds"
            )
    check_temporary("pad", "the output", math.prod(shape))
    return [OutSpec(shape, (x.dtype,))]


def _pad_compute(ins, attrs, outs):
    x = ins[0]
    rank, pads = x.ndim, attrs["pads"]
    # Negative pads crop first; what is left pads with numpy's modes (reflect excludes the
    # edge, 'edge' repeats it, 'wrap' continues from the other side, as ONNX says).
    crop = tuple(
        slice(max(-pads[a], 0), n - max(-pads[a + rank], 0)) for a, n in enumerate(x.shape)
    )
    widths = [(max(pads[a], 0), max(pads[a + rank], 0)) for a in range(rank)]
    mode = attrs["mode"]
    if not rank:
        return [x]  # a scalar has no axis to pad
    if mode == "constant":
        value = x.dtype.type(attrs["value"]) if x.dtype.kind != "b" else bool(attrs["value"])
        return [np.pad(x[crop], widths, mode="constant", constant_values=value)]
    return [np.pad(x[crop], widths, mode=mode)]


register(
    KernelDef(
        name="pad",
        reduction=exact,  # moves or selects values: no rounding of its own
        doc="x padded (or, by negative amounts, cropped) per axis; ONNX Pad's modes",
        inputs=("x",),
        outputs=("y",),
        attrs={
            "pads": Attr("ints", REQUIRED, "begin of every axis, then end of every axis"),
            "mode": Attr(
                "str",
                "constant",
                "'constant' (value), 'reflect', 'edge' or 'wrap'",
                ("constant", "reflect", "edge", "wrap"),
            ),
            "value": Attr("float", 0.0, "fill of constant mode (a whole number for integers)"),
        },
        infer=_pad_infer,
        compute=_pad_compute,
        cost=_moving_cost,
    )
)


# --- roll ------------------------------------------------------------------------------


def _roll_infer(ins, attrs):
    x = ins[0]
    shifts, axes = attrs["shifts"], attrs["axes"]
    if not axes or len(shifts) != len(axes):
        raise KernelAttributeError(
            f"kernel 'roll': shifts {shifts} and axes {axes} must name one shift per axis, "
            "for at least one axis"
        )
    named = [normalize_axis("roll", a, len(x.shape)) for a in axes]
    if len(set(named)) != len(named):
        raise KernelAttributeError(f"kernel 'roll': axes {axes} name an axis twice")
    return [OutSpec(x.shape, (x.dtype,))]


register(
    KernelDef(
        name="roll",
        reduction=exact,  # moves values: no rounding of its own
        doc="x shifted cyclically by shifts[i] along axes[i] (numpy.roll, torch.roll)",
        inputs=("x",),
        outputs=("y",),
        attrs={
            "shifts": Attr("ints", REQUIRED, "positions each axis moves by (negative: back)"),
            "axes": Attr("ints", REQUIRED, "the axes, distinct (negative from the end)"),
        },
        infer=_roll_infer,
        compute=lambda ins, attrs, outs: [np.roll(ins[0], attrs["shifts"], attrs["axes"])],
        cost=_moving_cost,
    )
)


# --- tile ------------------------------------------------------------------------------


def _tile_infer(ins, attrs):
    x = ins[0]
    repeats = attrs["repeats"]
    if len(repeats) != len(x.shape) or any(r < 0 for r in repeats):
        raise KernelAttributeError(
            f"kernel 'tile': repeats {repeats} must hold one count >= 0 per axis of x {x.shape}"
        )
    shape = tuple(n * r for n, r in zip(x.shape, repeats, strict=True))
    check_temporary("tile", "the output", math.prod(shape))
    return [OutSpec(shape, (x.dtype,))]


register(
    KernelDef(
        name="tile",
        reduction=exact,  # moves or selects values: no rounding of its own
        doc="x repeated repeats[i] times along each axis i",
        inputs=("x",),
        outputs=("y",),
        attrs={"repeats": Attr("ints", REQUIRED, "copies along each axis")},
        infer=_tile_infer,
        compute=lambda ins, attrs, outs: [np.tile(ins[0], attrs["repeats"])],
        cost=_moving_cost,
    )
)
