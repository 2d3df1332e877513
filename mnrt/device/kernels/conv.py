"""conv2d: grouped, strided, dilated, padded 2-D convolution (cross-correlation) on NCHW.

Lowered as the MAU runs it: im2col, then one matrix product per group. Half and IEEE
float16 arrive widened to float32, so the product accumulates in float32 and is rounded
once by the store; numpy's float16 matmul is never used. A 1x1 convolution is already a
matrix product over channels and skips the im2col copy.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import DTypeError, KernelAttributeError, ShapeError
from .common import (
    MATRIX_OUT_DTYPES,
    check_padding,
    check_temporary,
    columns,
    mau_blocks,
    pad_hw,
    require_rank,
    same_dtype,
)
from .registry import Attr, Cost, KernelDef, OutSpec, products, register
from .unary import EPILOGUES, epilogue, epilogue_flops


def check_ints(kernel: str, attr: str, values: tuple[int, ...], count: int, least: int) -> None:
    """Window attributes (stride, padding, ...) are fixed-length tuples with a lower bound."""
    if len(values) != count or any(v < least for v in values):
        raise KernelAttributeError(
            f"kernel '{kernel}': attribute '{attr}' must be {count} integers >= {least}, "
            f"got {values}"
        )


def _out_extent(size: int, pad: int, kernel: int, stride: int, dilation: int) -> int:
    """Output length along one spatial axis: the count of window starts that fit."""
    return (size + pad - dilation * (kernel - 1) - 1) // stride + 1


def _infer(ins, attrs):
    x, w, bias = (*ins, None)[:3]
    in_dt = same_dtype("conv2d", [x, w, bias])
    if in_dt not in MATRIX_OUT_DTYPES:
        raise DTypeError(f"kernel 'conv2d' needs floating-point operands, got {in_dt.name}")
    require_rank("conv2d", "x", x, (4,))
    require_rank("conv2d", "w", w, (4,))
    check_ints("conv2d", "stride", attrs["stride"], 2, 1)
    check_ints("conv2d", "dilation", attrs["dilation"], 2, 1)
    check_ints("conv2d", "padding", attrs["padding"], 4, 0)
    groups = attrs["groups"]
    if groups < 1:
        raise KernelAttributeError(
            f"kernel 'conv2d': attribute 'groups' must be >= 1, got {groups}"
        )
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if c % groups or o % groups:
        raise ShapeError(
            f"kernel 'conv2d': groups={groups} must divide both the input channels ({c}) "
            f"and the output channels ({o})"
        )
    if cg != c // groups:
        raise ShapeError(
            f"kernel 'conv2d': w has {cg} input channels per group, but x has {c} channels "
            f"in {groups} group(s), so w must be [{o}, {c // groups}, kH, kW]; got {w.shape}"
        )
    if bias is not None and bias.shape != (o,):
        raise ShapeError(f"kernel 'conv2d': bias must have shape ({o},), got {bias.shape}")
    (sh, sw), (dh, dw) = attrs["stride"], attrs["dilation"]
    pt, pl, pb, pr = attrs["padding"]
    check_padding("conv2d", x.shape, attrs["padding"])
    oh = _out_extent(h, pt + pb, kh, sh, dh)
    ow = _out_extent(wd, pl + pr, kw, sw, dw)
    if oh < 1 or ow < 1:
        raise ShapeError(
            f"kernel 'conv2d': the dilated kernel {kh}x{kw} (dilation {dh},{dw}) does not fit "
            f"the padded input {h + pt + pb}x{wd + pl + pr}; pad x or use a smaller kernel"
        )
    if kh * kw > 1:  # a 1x1 convolution reads the input in place, with no columns
        check_temporary("conv2d", "the im2col columns", n * c * kh * kw * oh * ow)
    return [OutSpec((n, o, oh, ow), MATRIX_OUT_DTYPES[in_dt])]


def _im2col(xp: np.ndarray, w_shape: tuple[int, ...], attrs, oh: int, ow: int) -> np.ndarray:
    """Columns [N, C, kH, kW, OH, OW] of the padded input, one strided copy per kernel tap:
    copying whole tap planes is several times faster than reshaping a 6-D window view."""
    n, c = xp.shape[:2]
    kh, kw = w_shape[2:]
    (sh, sw), (dh, dw) = attrs["stride"], attrs["dilation"]
    cols = columns((n, c, kh, kw, oh, ow), xp.dtype)
    for i in range(kh):
        rows = slice(i * dh, i * dh + (oh - 1) * sh + 1, sh)
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, rows, j * dw : j * dw + (ow - 1) * sw + 1 : sw]
    return cols


def _compute(ins, attrs, outs):
    x, w, bias = (*ins, None)[:3]
    n = x.shape[0]
    o, cg, kh, kw = w.shape
    groups = attrs["groups"]
    oh, ow = outs[0].shape[2:]
    pt, pl, pb, pr = attrs["padding"]
    if pt or pl or pb or pr:
        x = pad_hw(x, pt, pl, pb, pr)
    if kh == kw == 1:
        sh, sw = attrs["stride"]
        cols = x[:, :, : (oh - 1) * sh + 1 : sh, : (ow - 1) * sw + 1 : sw]
    else:
        cols = _im2col(x, w.shape, attrs, oh, ow)
    cols = cols.reshape(n, groups, cg * kh * kw, oh * ow)
    weights = w.reshape(groups, o // groups, cg * kh * kw)
    dest = outs[0].buf
    if dest is not None and (dest.dtype != x.dtype or not dest.flags.c_contiguous):
        dest = None  # matmul cannot fill it in place; the store copies the result instead
    prod_shape = (n, groups, o // groups, oh * ow)
    y = np.matmul(weights, cols, out=None if dest is None else dest.reshape(prod_shape))
    y = y.reshape(n, o, oh, ow)
    if bias is not None:
        y += bias[:, None, None]
    return [epilogue(attrs["epilogue"], y)]


def _cost(ins, outs, attrs):
    x, w, bias = (*ins, None)[:3]
    out = outs[0]
    n, o, oh, ow = out.shape
    groups = attrs["groups"]
    k = w.shape[1] * w.shape[2] * w.shape[3]
    products = 2.0 * k * n * o * oh * ow
    per_out = (bias is not None) + epilogue_flops(attrs["epilogue"])
    # Mapping as gemm: per group an [O/g, K] x [K, OH*OW] product in 256x256 output blocks,
    # whose weight and column panels stream from L1BM once per k-step, computed in 4x4
    # output blocks (partly empty at a ragged edge).
    tile = 256
    moved = sum(t.nbytes for t in ins if t is not None) + out.nbytes
    blocks, fill = mau_blocks(o // groups, oh * ow)
    return Cost(
        flops=products + per_out * n * o * oh * ow,
        dram_bytes=float(moved),
        sram_bytes=products / tile * x.dtype.itemsize,
        parallel=n * groups * blocks,
        matrix=True,
        fill=fill,
    )


register(
    KernelDef(
        name="conv2d",
        matrix=True,
        doc="2-D convolution of NCHW x by [O, C/groups, kH, kW] w, plus bias; half sums in f32",
        inputs=("x", "w", "bias?"),
        outputs=("y",),
        attrs={
            "stride": Attr("ints", (1, 1), "step between windows: (rows, cols)"),
            "padding": Attr("ints", (0, 0, 0, 0), "zero padding: (top, left, bottom, right)"),
            "dilation": Attr("ints", (1, 1), "spacing of kernel taps: (rows, cols)"),
            "groups": Attr("int", 1, "channel groups; C and O are split into this many"),
            "epilogue": Attr("str", "none", "activation of the result", choices=EPILOGUES),
        },
        infer=_infer,
        compute=_compute,
        cost=_cost,
        reduction=lambda ins, attrs: math.prod(ins[1].shape[1:]) + 1,  # C/groups*kh*kw, bias
        terms=products,
    )
)
