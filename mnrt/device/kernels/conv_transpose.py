"""conv_transpose2d: the transpose (gradient) of conv2d, ONNX ConvTranspose on NCHW.

Every input pixel scatters its channels, times the [C, O/groups, kH, kW] weights, into a
stride-spaced, dilated window of the output; `padding` then crops the full result and
`output_padding` extends it at the bottom and right (a compiler turns ONNX's output_shape
and auto_pad into these). As conv2d: float dtypes, half and bfloat16 summed in float32 and
optionally written as float ("mixed").
"""

from __future__ import annotations

import numpy as np

from ...errors import DTypeError, KernelAttributeError, ShapeError
from .common import MATRIX_OUT_DTYPES, check_temporary, mau_blocks, require_rank, same_dtype
from .conv import check_ints
from .registry import Attr, Cost, KernelDef, OutSpec, products, register

_NAME = "conv_transpose2d"


def _full_extent(size: int, kernel: int, stride: int, dilation: int, extra: int) -> int:
    """Length along one axis before padding crops it: the last window's end, plus extra."""
    return (size - 1) * stride + dilation * (kernel - 1) + 1 + extra


def _infer(ins, attrs):
    x, w, bias = (*ins, None)[:3]
    in_dt = same_dtype(_NAME, [x, w, bias])
    if in_dt not in MATRIX_OUT_DTYPES:
        raise DTypeError(f"kernel '{_NAME}' needs floating-point operands, got {in_dt.name}")
    require_rank(_NAME, "x", x, (4,))
    require_rank(_NAME, "w", w, (4,))
    check_ints(_NAME, "stride", attrs["stride"], 2, 1)
    check_ints(_NAME, "dilation", attrs["dilation"], 2, 1)
    check_ints(_NAME, "padding", attrs["padding"], 4, 0)
    check_ints(_NAME, "output_padding", attrs["output_padding"], 2, 0)
    groups = attrs["groups"]
    n, c, h, wd = x.shape
    cw, og, kh, kw = w.shape
    if groups < 1 or c % groups:
        raise KernelAttributeError(
            f"kernel '{_NAME}': groups={groups} must be >= 1 and divide x's {c} channels"
        )
    if cw != c:
        raise ShapeError(
            f"kernel '{_NAME}': w must be [C, O/groups, kH, kW] with C = {c} (x's channels), "
            f"got {w.shape}"
        )
    o = og * groups
    if bias is not None and bias.shape != (o,):
        raise ShapeError(f"kernel '{_NAME}': bias must have shape ({o},), got {bias.shape}")
    (sh, sw), (dh, dw) = attrs["stride"], attrs["dilation"]
    (oph, opw), (pt, pl, pb, pr) = attrs["output_padding"], attrs["padding"]
    if oph >= max(sh, dh) or opw >= max(sw, dw):
        raise KernelAttributeError(
            f"kernel '{_NAME}': output_padding {attrs['output_padding']} must be below the "
            "stride or the dilation on each axis"
        )
    oh = _full_extent(h, kh, sh, dh, oph) - pt - pb
    ow = _full_extent(wd, kw, sw, dw, opw) - pl - pr
    if oh < 1 or ow < 1:
        raise ShapeError(
            f"kernel '{_NAME}': padding {attrs['padding']} crops away the whole output"
        )
    check_temporary(_NAME, "the scattered products", n * o * kh * kw * h * wd)
    return [OutSpec((n, o, oh, ow), MATRIX_OUT_DTYPES[in_dt])]


def _compute(ins, attrs, outs):
    x, w, bias = (*ins, None)[:3]
    groups = attrs["groups"]
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    (sh, sw), (dh, dw) = attrs["stride"], attrs["dilation"]
    (oph, opw), (pt, pl, pb, pr) = attrs["output_padding"], attrs["padding"]
    fh = _full_extent(h, kh, sh, dh, oph)
    fw = _full_extent(wd, kw, sw, dw, opw)
    cg = c // groups
    # Per group: [O/g * kH * kW, C/g] @ [C/g, H * W] gives every pixel's contribution to
    # every tap, then each tap's plane is added into its strided place in the output.
    xs = x.reshape(n, groups, cg, h * wd)
    ws = w.reshape(groups, cg, og * kh * kw).transpose(0, 2, 1)
    taps = np.matmul(ws, xs).reshape(n, groups * og, kh, kw, h, wd)
    full = np.zeros((n, groups * og, fh, fw), taps.dtype)
    for i in range(kh):
        rows = slice(i * dh, i * dh + (h - 1) * sh + 1, sh)
        for j in range(kw):
            full[:, :, rows, j * dw : j * dw + (wd - 1) * sw + 1 : sw] += taps[:, :, i, j]
    y = full[:, :, pt : fh - pb, pl : fw - pr]
    if bias is not None:
        y = y + bias[:, None, None]
    return [y]


def _cost(ins, outs, attrs):
    x, w = ins[0], ins[1]
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    groups = attrs["groups"]
    macs = 2.0 * n * c * og * kh * kw * h * wd
    moved = sum(t.nbytes for t in ins if t is not None) + outs[0].nbytes
    blocks, fill = mau_blocks(og * kh * kw, h * wd)
    return Cost(
        flops=macs + outs[0].size * (len(ins) > 2),
        dram_bytes=float(moved),
        parallel=n * groups * blocks,
        matrix=True,
        fill=fill,
    )


register(
    KernelDef(
        name=_NAME,
        matrix=True,
        doc="transposed 2-D convolution (ONNX ConvTranspose) of NCHW x by [C, O/g, kH, kW] w",
        inputs=("x", "w", "bias?"),
        outputs=("y",),
        attrs={
            "stride": Attr("ints", (1, 1), "spacing of the input pixels' windows: (rows, cols)"),
            "padding": Attr("ints", (0, 0, 0, 0), "cropped from (top, left, bottom, right)"),
            "output_padding": Attr("ints", (0, 0), "added at the (bottom, right)"),
            "dilation": Attr("ints", (1, 1), "spacing of kernel taps: (rows, cols)"),
            "groups": Attr("int", 1, "channel groups; C and O are split into this many"),
        },
        infer=_infer,
        compute=_compute,
        cost=_cost,
        terms=products,
    )
)
