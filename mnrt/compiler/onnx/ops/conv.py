"""Convolutions: Conv (1-D to 3-D) and ConvTranspose."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid, Unsupported
from .common import Window, as4d, from4d, pad_axis, spatial_rank


def _conv2d(cx: Ctx, x: Symbol, w: Symbol, bias: list[Symbol], win: Window, groups: int,
            axes: slice = slice(None)) -> Symbol:  # fmt: skip
    a = win.attrs2d(axes)
    del a["kernel"]
    return cx.op("conv2d", x, w, *bias, groups=groups, **a)


def conv(cx: Ctx, node: Any, at: Attrs) -> list:
    x = cx.sym(node.input[0])
    rank = spatial_rank(cx, x, "Conv", (1, 2, 3))
    ws = cx.shape(node.input[1])
    if len(ws) != rank + 2:
        raise Invalid(f"weights '{node.input[1]}' of shape {ws} must have rank {rank + 2} "
                       f"(M, C/group, kernel...) for an input of rank {rank + 2}")  # fmt: skip
    if at.get("kernel_shape") and list(at.get("kernel_shape")) != list(ws[2:]):
        raise Invalid(f"kernel_shape {at.get('kernel_shape')} differs from the weights' "
                       f"kernel {list(ws[2:])}")  # fmt: skip
    win = Window(at, cx.shape(x), list(ws[2:]))
    groups = int(at.get("group", 1))
    bias = [cx.sym(node.input[2])] if len(node.input) > 2 and node.input[2] else []
    x, taps = _skip_padding_taps(cx, x, win)
    if rank == 3:
        w3 = cx.const(node.input[1], "Conv3d weights")[(slice(None), slice(None), *taps)]
        return [_conv3d(cx, x, w3, bias, win, groups)]
    w = cx.sym(node.input[1])
    if win.kernel != list(ws[2:]):  # at O1 on, a slice of constant weights is folded
        w = cx.op("slice", w, starts=[t.start for t in taps], ends=[t.stop for t in taps],
                  axes=list(range(2, 2 + rank)))  # fmt: skip
        ws = cx.shape(w)
    if rank == 1:
        w = cx.reshape(w, (ws[0], ws[1], 1, ws[2]))
    return [from4d(cx, _conv2d(cx, as4d(cx, x), w, bias, win, groups), rank)]


def _skip_padding_taps(cx: Ctx, x: Symbol, win: Window) -> tuple[Symbol, list[slice]]:
    """Drop the kernel taps that read nothing but padding at every output (a dilated conv
    whose dilation passes the feature map: DeepLabV3's atrous rates of 12 to 36 on a small
    map, where only the centre tap touches data; a 3x3 conv of a 1x1 map): they add only
    zeros, cost modelled time, and their padding can outgrow what the conv2d kernel takes.
    `win` is narrowed in place to the taps kept, and x cropped where the kept taps' windows
    start or end inside it. Returns x and the slice of the weights' taps per spatial axis."""
    taps = []
    for i, n in enumerate(cx.shape(x)[2:]):
        k, s, d = win.kernel[i], win.stride[i], win.dilation[i]
        b, e = win.begin[i], win.end[i]
        out = (n + b + e - d * (k - 1) - 1) // s + 1
        # tap t reads positions t*d - b + o*s, o in [0, out): some lie in [0, n) when
        first = max(0, -(-(b - (out - 1) * s) // d))
        last = min(k - 1, (n - 1 + b) // d)
        if out < 1 or first > last or (first == 0 and last == k - 1):
            taps.append(slice(0, k))
            continue
        begin = b - first * d
        end = (out - 1) * s + d * (last - first) + 1 - n - begin
        if begin < 0 or end < 0:
            x = pad_axis(cx, x, 2 + i, min(begin, 0), min(end, 0), "constant", 0.0)
        win.kernel[i], win.begin[i], win.end[i] = last - first + 1, max(begin, 0), max(end, 0)
        taps.append(slice(first, last + 1))
    return x, taps


def _conv3d(cx: Ctx, x: Symbol, w: np.ndarray, bias: list[Symbol], win: Window,
            groups: int) -> Symbol:  # fmt: skip
    """A 3-D convolution as one 2-D convolution per depth tap of the kernel, summed."""
    x = pad_axis(cx, x, 2, win.begin[0], win.end[0], "constant", 0.0)
    n, c, depth, h, wd = cx.shape(x)
    kd, s, d = win.kernel[0], win.stride[0], win.dilation[0]
    out_d = (depth - (kd - 1) * d - 1) // s + 1
    if out_d < 1:
        raise Invalid(f"the dilated kernel depth {(kd - 1) * d + 1} does not fit the padded "
                       f"input depth {depth}; pad the input or use a smaller kernel")  # fmt: skip
    y = None
    for tap in range(kd):
        start = tap * d
        xs = cx.op("slice", x, starts=[start], ends=[start + (out_d - 1) * s + 1], axes=[2],
                   steps=[s])  # fmt: skip
        xs = cx.reshape(cx.op("transpose", xs, perm=[0, 2, 1, 3, 4]), (n * out_d, c, h, wd))
        part = _conv2d(cx, xs, cx.param(w[:, :, tap], like=x), [], win, groups, slice(1, 3))
        y = part if y is None else cx.op("add", y, part)
    _, o, oh, ow = cx.shape(y)
    y = cx.op("transpose", cx.reshape(y, (n, out_d, o, oh, ow)), perm=[0, 2, 1, 3, 4])
    if bias:
        y = cx.op("add", y, cx.reshape(bias[0], (o, 1, 1, 1)))
    return y


def conv_transpose(cx: Ctx, node: Any, at: Attrs) -> list:
    """Zero-insert x by the stride, pad, and convolve with the flipped, transposed kernel."""
    x0 = cx.sym(node.input[0])
    rank = spatial_rank(cx, x0, "ConvTranspose")
    if at.get("output_shape") or at.get("auto_pad", "NOTSET") != "NOTSET":
        raise Unsupported("output_shape / auto_pad")
    w = cx.const(node.input[1], "ConvTranspose weights")
    at.get("kernel_shape")
    g = int(at.get("group", 1))
    if w.ndim != rank + 2 or g < 1 or w.shape[0] % g:
        raise Invalid(f"weights of shape {w.shape} must be (C, M/group, kernel...) of rank "
                       f"{rank + 2}, with group={g} dividing C")  # fmt: skip
    cin, cog, *k = w.shape
    win = Window(at, cx.shape(x0), k)
    extra = list(at.get("output_padding") or [0] * rank)
    # [Cin, Cout/g, k...] -> [Cout, Cin/g, k...], flipped in space.
    wt = w.reshape(g, cin // g, cog, *k).swapaxes(1, 2).reshape(g * cog, cin // g, *k)
    wt = np.ascontiguousarray(np.flip(wt, axis=tuple(range(2, 2 + rank))))
    x = as4d(cx, x0)
    off = 2 + (2 - rank)
    pads = []
    for i in range(rank):
        x = _zero_insert(cx, x, off + i, win.stride[i])
        before = win.dilation[i] * (k[i] - 1) - win.begin[i]
        after = win.dilation[i] * (k[i] - 1) - win.end[i] + extra[i]
        x = pad_axis(cx, x, off + i, min(before, 0), min(after, 0), "constant", 0.0)
        pads.append((max(before, 0), max(after, 0)))
    if rank == 1:
        wt, pads = wt.reshape(*wt.shape[:2], 1, wt.shape[2]), [(0, 0), *pads]
    dil = [1, *win.dilation] if rank == 1 else win.dilation
    bias = [cx.sym(node.input[2])] if len(node.input) > 2 and node.input[2] else []
    y = cx.op("conv2d", x, cx.param(wt, like=x0), *bias, stride=[1, 1], dilation=dil,
              padding=[pads[0][0], pads[1][0], pads[0][1], pads[1][1]], groups=g)  # fmt: skip
    return [from4d(cx, y, rank)]


def _zero_insert(cx: Ctx, x: Symbol, ax: int, s: int) -> Symbol:
    """s - 1 zeros between neighbours along ax: length n becomes (n - 1) * s + 1."""
    if s == 1:
        return x
    shape = list(cx.shape(x))
    n = shape[ax]
    col = cx.reshape(x, (*shape[: ax + 1], 1, *shape[ax + 1 :]))
    zeros = cx.op("fill", shape=[*shape[: ax + 1], s - 1, *shape[ax + 1 :]], value=0.0,
                  dtype=cx.dtype(x).name)  # fmt: skip
    y = cx.reshape(cx.op("concat", col, zeros, axis=ax + 1),
                   (*shape[:ax], n * s, *shape[ax + 1 :]))  # fmt: skip
    return cx.op("slice", y, starts=[0], ends=[(n - 1) * s + 1], axes=[ax])
