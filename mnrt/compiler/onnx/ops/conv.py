"""Convolutions: Conv (1-D to 3-D), ConvTranspose and DeformConv."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid, Unsupported
from .common import Window, as4d, from4d, optional_input, pad_axis, spatial_rank
from .linalg import product


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
    """The conv_transpose2d kernel (a 1-D one on a height of 1): every input pixel scatters
    its products into its window of the output, so a stride of s costs what it does, where
    the convolution of an input zero-inserted by s (what this was) multiplied s*s times as
    many zeros as values, through three more kernels an axis."""
    x0 = cx.sym(node.input[0])
    rank = spatial_rank(cx, x0, "ConvTranspose", (1, 2, 3))
    w = cx.const(node.input[1], "ConvTranspose weights")
    at.get("kernel_shape")
    g = int(at.get("group", 1))
    if w.ndim != rank + 2 or g < 1 or w.shape[0] % g:
        raise Invalid(f"weights of shape {w.shape} must be (C, M/group, kernel...) of rank "
                       f"{rank + 2}, with group={g} dividing C")  # fmt: skip
    win = Window(at, cx.shape(x0), list(w.shape[2:]))
    extra = list(at.get("output_padding") or [0] * rank)
    if len(extra) != rank or any(
        not 0 <= e < max(s, d) for e, s, d in zip(extra, win.stride, win.dilation)
    ):
        raise Invalid(f"output_padding {extra} must be one value per spatial axis, each "
                      "below that axis' stride or dilation")  # fmt: skip
    begin, end = _transposed_pads(at, win, cx.shape(x0)[2:], list(w.shape[2:]), extra)
    # An output_shape past the full result extends it at the end, as output_padding does.
    extra = [e + max(0, -b) for e, b in zip(extra, end)]
    end = [max(0, b) for b in end]
    if any(b < 0 for b in begin) or any(
        e >= max(s, d) for e, s, d in zip(extra, win.stride, win.dilation)
    ):
        raise Unsupported(
            f"an output_shape that extends the output at its start, or at its end by as much "
            f"as the stride or more ({extra}): the device's transposed convolution cannot"
        )
    stride, dilation = win.stride, win.dilation
    bias = [cx.sym(node.input[2])] if len(node.input) > 2 and node.input[2] else []
    if rank == 3:
        return [_conv_transpose3d(cx, x0, w, bias, win, begin, end, extra, g)]
    if rank == 1:  # as a height of 1
        w = w.reshape(*w.shape[:2], 1, w.shape[2])
        stride, dilation, extra = [1, *stride], [1, *dilation], [0, *extra]
        begin, end = [0, *begin], [0, *end]
    y = cx.op("conv_transpose2d", as4d(cx, x0), cx.param(w, like=x0), *bias, stride=stride,
              dilation=dilation, padding=[begin[0], begin[1], end[0], end[1]],
              output_padding=extra, groups=g)  # fmt: skip
    return [from4d(cx, y, rank)]


def _conv_transpose3d(cx: Ctx, x: Symbol, w: np.ndarray, bias: list[Symbol], win: Window,
                      begin: list[int], end: list[int], extra: list[int],
                      groups: int) -> Symbol:  # fmt: skip
    """A 3-D transposed convolution as one conv_transpose2d per depth tap of the kernel over
    every input depth slice, each result placed at the output depths that tap reaches (input
    depth i, tap t: i * stride + t * dilation, zeros between for a stride), summed, then
    cropped by the pads (and extended by output_padding) along the depth."""
    n, c, depth, h, wd = cx.shape(x)
    kd, s, d = w.shape[2], win.stride[0], win.dilation[0]
    full = (depth - 1) * s + (kd - 1) * d + 1
    slices = cx.reshape(cx.op("transpose", x, perm=[0, 2, 1, 3, 4]), (n * depth, c, h, wd))
    total = None
    for tap in range(kd):
        y = cx.op("conv_transpose2d", slices, cx.param(w[:, :, tap], like=x),
                  stride=win.stride[1:], dilation=win.dilation[1:],
                  padding=[begin[1], begin[2], end[1], end[2]], output_padding=extra[1:],
                  groups=groups)  # fmt: skip
        _, o, oh, ow = cx.shape(y)
        y = cx.reshape(y, (n, depth, o, oh, ow))
        if s > 1 and depth > 1:  # zeros between the input depths
            gap = cx.op("fill", shape=[n, depth, s - 1, o, oh, ow], value=0.0,
                        dtype=cx.dtype(x).name)  # fmt: skip
            spread = cx.op("concat", cx.reshape(y, (n, depth, 1, o, oh, ow)), gap, axis=2)
            y = cx.op("slice", cx.reshape(spread, (n, depth * s, o, oh, ow)), starts=[0],
                      ends=[(depth - 1) * s + 1], axes=[1])  # fmt: skip
        y = pad_axis(cx, y, 1, tap * d, full - (depth - 1) * s - 1 - tap * d, "constant", 0.0)
        total = y if total is None else cx.op("add", total, y)
    total = pad_axis(cx, total, 1, -begin[0], extra[0] - end[0], "constant", 0.0)
    y = cx.op("transpose", total, perm=[0, 2, 1, 3, 4])
    if bias:
        y = cx.op("add", y, cx.reshape(bias[0], (cx.shape(y)[1], 1, 1, 1)))
    return y


def _transposed_pads(at: Attrs, win: Window, sizes: tuple[int, ...], kernel: list[int],
                     extra: list[int]) -> tuple[list[int], list[int]]:  # fmt: skip
    """What ConvTranspose crops from the start and end of each axis: its pads, or, for an
    output_shape or auto_pad SAME_*, the padding that gives that shape (SAME: the input's
    size times the stride), split as the spec says (SAME_UPPER puts the smaller half first,
    SAME_LOWER and an output_shape alone the larger); negative where the shape is past the
    full result."""
    auto = at.get("auto_pad", "NOTSET")
    wanted = list(at.get("output_shape") or [])
    if not wanted and auto not in ("SAME_UPPER", "SAME_LOWER"):
        return ([0] * len(sizes),) * 2 if auto == "VALID" else (win.begin, win.end)
    if wanted and len(wanted) < len(sizes):
        raise Invalid(f"output_shape {wanted} must give a size for each spatial axis")
    wanted = wanted[-len(sizes) :] if wanted else [n * s for n, s in zip(sizes, win.stride)]
    total = [
        s * (n - 1) + e + (k - 1) * d + 1 - t
        for n, s, e, k, d, t in zip(sizes, win.stride, extra, kernel, win.dilation, wanted)
    ]
    if auto == "SAME_UPPER":
        return [t // 2 for t in total], [t - t // 2 for t in total]
    return [t - t // 2 for t in total], [t // 2 for t in total]


def deform_conv(cx: Ctx, node: Any, at: Attrs) -> list:
    """DeformConv (2-D): every tap of every window sampled bilinearly where its offset
    moves it (zero beyond the input, as ONNX's reference samples with GridSample), times
    its mask, then the convolution as a batched GEMM of the weights and those columns. One
    grid_sample per offset group gathers all its taps: the grid holds each tap's sample
    points for every output position, the taps' coordinates computed on the device from
    the offsets (a run's values: another conv's output)."""
    x, w, offsets = (cx.sym(n) for n in node.input[:3])
    if len(cx.shape(x)) != 4:
        raise Unsupported(f"DeformConv over {len(cx.shape(x)) - 2} spatial dimensions")
    n, ic, ih, iw = cx.shape(x)
    oc, icg, kh, kw = cx.shape(w)
    if at.get("kernel_shape") and list(at.get("kernel_shape")) != [kh, kw]:
        raise Invalid(f"kernel_shape {at.get('kernel_shape')} differs from the weights' "
                      f"kernel {[kh, kw]}")  # fmt: skip
    groups, og = int(at.get("group", 1)), int(at.get("offset_group", 1))
    if groups < 1 or ic != icg * groups or oc % groups:
        raise Invalid(f"weights {cx.shape(w)} and group {groups} do not fit {ic} input channels")
    if og < 1 or ic % og:
        raise Invalid(f"offset_group {og} does not divide the {ic} input channels")
    (sh, sw), (dh, dw) = list(at.get("strides") or [1, 1]), list(at.get("dilations") or [1, 1])
    pt, pl, pb, pr = list(at.get("pads") or [0, 0, 0, 0])
    oh = (ih + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (iw + pl + pr - (kw - 1) * dw - 1) // sw + 1
    taps = kh * kw
    if cx.shape(offsets) != (n, og * taps * 2, oh, ow):
        raise Invalid(f"offset has shape {cx.shape(offsets)}; it must be "
                      f"{[n, og * taps * 2, oh, ow]}")  # fmt: skip
    if min(ih, iw) < 2:
        raise Unsupported(f"an input {ih} x {iw}: ONNX's reference divides by its size - 1")
    bias = optional_input(node, 3)
    mask = optional_input(node, 4)

    def const(value: Any) -> Symbol:
        return cx.param(np.asarray(value, np.float64), like=x, stem="deform")

    def coordinate(part: int, base: np.ndarray, size: int) -> Symbol:
        """[n, og, taps * oh, ow]: where each tap samples along one axis, as grid_sample's
        [-1, 1] of pixel centres."""
        moved = cx.op("slice", cx.reshape(offsets, (n, og, taps, 2, oh, ow)), starts=[part],
                      ends=[part + 1], axes=[3])  # fmt: skip
        at_tap = cx.op("add", cx.reshape(moved, (n, og, taps, oh, ow)), const(base))
        scaled = cx.op("sub", cx.op("mul", at_tap, const(2.0 / (size - 1))), const(1.0))
        return cx.reshape(scaled, (n, og, taps * oh, ow, 1))

    a, e = np.divmod(np.arange(taps), kw)
    rows = a[:, None, None] * dh + np.arange(oh)[None, :, None] * sh - pt  # [taps, oh, 1]
    cols = e[:, None, None] * dw + np.arange(ow)[None, None, :] * sw - pl  # [taps, 1, ow]
    grid = cx.op("concat", coordinate(1, cols, iw), coordinate(0, rows, ih), axis=4)
    per_group = ic // og
    weights = None if mask is None else cx.reshape(cx.sym(mask), (n, og, 1, taps * oh, ow))
    columns = []
    for g in range(og):
        points = cx.reshape(_group(cx, grid, g, og, 1), (n, taps * oh, ow, 2))
        sampled = cx.op("grid_sample", _group(cx, x, g, og, per_group), points, mode="linear",
                        padding_mode="zeros", align_corners=True)  # fmt: skip
        if weights is not None:
            m = cx.reshape(_group(cx, weights, g, og, 1), (n, 1, taps * oh, ow))
            sampled = cx.op("mul", sampled, m)
        columns.append(cx.reshape(sampled, (n, per_group * taps, oh * ow)))
    stacked = columns[0] if og == 1 else cx.op("concat", *columns, axis=1)
    flat = cx.reshape(w, (oc, icg * taps))
    if groups == 1:
        y = product(cx, flat, stacked)
    else:
        per_out, per_in = oc // groups, icg * taps
        y = cx.op("concat", *(
            product(cx, cx.op("slice", flat, starts=[g * per_out], ends=[(g + 1) * per_out],
                              axes=[0]),
                    cx.op("slice", stacked, starts=[g * per_in], ends=[(g + 1) * per_in],
                          axes=[1]))
            for g in range(groups)
        ), axis=1)  # fmt: skip
    y = cx.reshape(y, (n, oc, oh, ow))
    if bias is not None:
        y = cx.op("add", y, cx.reshape(cx.sym(bias), (1, oc, 1, 1)))
    return [y]


def _group(cx: Ctx, v: Symbol, g: int, groups: int, size: int) -> Symbol:
    """Group g of `groups` along axis 1 (each `size` wide): v itself where there is one."""
    if groups == 1:
        return v
    return cx.op("slice", v, starts=[g * size], ends=[(g + 1) * size], axes=[1])
