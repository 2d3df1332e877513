"""Normalisations: BatchNormalization, InstanceNormalization, LayerNormalization, LRN."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid, Unsupported, axis_index
from .common import refuse_output


def _channel(cx: Ctx, v: np.ndarray, rank: int, like: Symbol) -> Symbol:
    """A per-channel vector shaped to broadcast over N,C,... of the given rank."""
    return cx.param(np.asarray(v).reshape(-1, *([1] * (rank - 2))), like=like)


def batch_norm(cx: Ctx, node: Any, at: Attrs) -> list:
    """Inference: the statistics are constants, folded into one scale and shift. Training
    mode (opset 14 on) normalises by the batch's own statistics instead (see below)."""
    if at.get("training_mode", 0):
        return _batch_norm_training(cx, node, at)
    for i, name in ((1, "mean"), (2, "var"), (3, "saved_mean"), (4, "saved_var")):
        refuse_output(node, i, name, "it is a training output")
    if not at.get("spatial", 1):
        raise Unsupported("spatial=0")
    x = cx.sym(node.input[0])
    scale, bias, mean, var = (cx.const(n, "BatchNormalization statistics").astype(np.float64)
                              for n in node.input[1:5])  # fmt: skip
    channels = cx.shape(x)[1] if len(cx.shape(x)) > 1 else 1
    stats = [v.shape for v in (scale, bias, mean, var)]
    if any(shape != (channels,) for shape in stats):
        raise Invalid(f"scale, B, mean and var must each hold one value per channel "
                       f"({channels}); got shapes {stats}")  # fmt: skip
    s = scale / np.sqrt(var + float(at.get("epsilon", 1e-5)))
    t = bias - mean * s
    rank = len(cx.shape(x))
    return [cx.op("add", cx.op("mul", x, _channel(cx, s, rank, x)), _channel(cx, t, rank, x))]


def _batch_norm_training(cx: Ctx, node: Any, at: Attrs) -> list:
    """training_mode=1: Y normalised by the batch's mean and (population) variance per
    channel, and the running mean and variance, each the input's times momentum plus the
    batch's times 1 - momentum; every statistic a reduction on the device, and scale, B and
    the running statistics may be values of the run (a training step's)."""
    x = cx.sym(node.input[0])
    rank = len(cx.shape(x))
    if rank < 2:
        raise Invalid(f"X has shape {cx.shape(x)}; it needs a channel axis (1)")
    channels = cx.shape(x)[1]
    per_channel = (1, channels, *([1] * (rank - 2)))
    stats = [cx.sym(n) for n in node.input[1:5]]
    if any(cx.shape(v) != (channels,) for v in stats):
        raise Invalid(f"scale, B, input_mean and input_var must each hold one value per "
                      f"channel ({channels}); got {[cx.shape(v) for v in stats]}")  # fmt: skip
    scale, bias, mean_in, var_in = stats
    axes = [0, *range(2, rank)]
    eps, momentum = float(at.get("epsilon", 1e-5)), float(at.get("momentum", 0.9))

    def const(value: float) -> Symbol:
        return cx.param(np.array(value), like=x, stem="batch_norm")

    mean = cx.op("mean", x, axes=axes, keepdims=True)
    centred = cx.op("sub", x, mean)
    var = cx.op("mean", cx.op("mul", centred, centred), axes=axes, keepdims=True)
    inv = cx.op("reciprocal", cx.op("sqrt", cx.op("add", var, const(eps))))
    factor = cx.op("mul", inv, cx.reshape(scale, per_channel))
    y = cx.op("add", cx.op("mul", centred, factor), cx.reshape(bias, per_channel))

    def running(given: Symbol, batch: Symbol) -> Symbol:
        kept = cx.op("mul", given, const(momentum))
        return cx.op("add", kept, cx.op("mul", cx.reshape(batch, (channels,)), const(1 - momentum)))

    outs: list[Symbol | None] = [y]
    for i, (given, batch) in enumerate(((mean_in, mean), (var_in, var)), start=1):
        if len(node.output) > i:  # only the running statistics the model asks for
            outs.append(running(given, batch) if node.output[i] else None)
    return outs


def instance_norm(cx: Ctx, node: Any, at: Attrs) -> list:
    x = cx.sym(node.input[0])
    rank = len(cx.shape(x))
    y = cx.op("layernorm", x, axis=2, epsilon=float(at.get("epsilon", 1e-5)))
    scale, bias = (_channel(cx, cx.const(name, what), rank, x)
                   for name, what in zip(node.input[1:3], ("scale", "bias")))  # fmt: skip
    return [cx.op("scale_shift", y, scale, bias)]


def layer_norm(cx: Ctx, node: Any, at: Attrs) -> list:
    """Y by the layernorm kernel; the optional Mean and InvStdDev outputs (over axis..end,
    kept as size-1 axes) only when the model asks for them."""
    ins = [cx.sym(n) for n in node.input if n]
    axis, eps = int(at.get("axis", -1)), float(at.get("epsilon", 1e-5))
    at.get("stash_type")
    y = cx.op("layernorm", *ins, axis=axis, epsilon=eps)
    if not any(node.output[1:]):
        return [y]
    return [y, *layer_norm_stats(cx, ins[0], axis, eps)]


def layer_norm_stats(cx: Ctx, x: Symbol, axis: int, eps: float) -> tuple[Symbol, Symbol]:
    """The mean and inverse standard deviation the layernorm kernel normalises x by, over
    axis..end and kept as size-1 axes: the kernel does not return them, so a model that
    asks for them (LayerNormalization's optional outputs, onnxruntime's fused ones) gets
    them computed again."""
    rank = len(cx.shape(x))
    axes = list(range(axis_index(axis, rank), rank))
    mean = cx.op("mean", x, axes=axes, keepdims=True)
    d = cx.op("sub", x, mean)
    var = cx.op("mean", cx.op("mul", d, d), axes=axes, keepdims=True)
    return mean, cx.op("rsqrt", cx.op("add", var, cx.param(np.array(eps), like=x)))


def lrn(cx: Ctx, node: Any, at: Attrs) -> list:
    x = cx.sym(node.input[0])
    shape = cx.shape(x)
    if len(shape) < 3:
        raise Unsupported("LRN needs N,C,... input")
    size = int(at.get("size"))
    n, c, rest = shape[0], shape[1], int(np.prod(shape[2:]))
    sq = cx.reshape(cx.op("mul", x, x), (n, 1, c, rest))
    lo = (size - 1) // 2
    window = cx.op("avg_pool2d", sq, kernel=[size, 1], stride=[1, 1],
                   padding=[lo, 0, size - 1 - lo, 0], count_include_pad=True)  # fmt: skip
    alpha, beta, bias = at.get("alpha", 1e-4), at.get("beta", 0.75), at.get("bias", 1.0)
    d = cx.op("add", cx.op("mul", cx.reshape(window, shape), cx.param(np.array(alpha), like=x)),
              cx.param(np.array(bias), like=x))  # fmt: skip
    return [cx.op("div", x, cx.op("pow", d, cx.param(np.array(beta), like=x)))]


def lp_normalization(cx: Ctx, node: Any, at: Attrs) -> list:
    """x divided by its L1 or L2 norm along axis (a zero norm by 1)."""
    x = cx.sym(node.input[0])
    if not cx.dtype(x).is_float:
        raise Unsupported(f"LpNormalization of {cx.dtype(x).name}: only floating types")
    axis = axis_index(int(at.get("axis", -1)), len(cx.shape(x)))
    p = int(at.get("p", 2))
    if p not in (1, 2):
        raise Invalid(f"p={p}: LpNormalization takes p=1 or p=2")
    norm = cx.op("l1" if p == 1 else "l2", x, axes=[axis], keepdims=True)
    # A zero norm (all of a slice zero) divides by 1, as ONNX's reference does: the slice
    # stays zero instead of becoming nan.
    zero, one = cx.param(np.array(0), like=x), cx.param(np.array(1), like=x)
    norm = cx.op("where", cx.op("equal", norm, zero), one, norm)
    return [cx.op("div", x, norm)]


def mean_variance_normalization(cx: Ctx, node: Any, at: Attrs) -> list:
    """ONNX's function body: (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9) over axes."""
    x = cx.sym(node.input[0])
    if not cx.dtype(x).is_float:
        raise Unsupported(f"MeanVarianceNormalization of {cx.dtype(x).name}: only floats")
    rank = len(cx.shape(x))
    axes = sorted({axis_index(a, rank) for a in at.get("axes", [0, 2, 3])})
    mean = cx.op("mean", x, axes=axes, keepdims=True)
    mean_sq = cx.op("mean", cx.op("mul", x, x), axes=axes, keepdims=True)
    std = cx.op("sqrt", cx.op("sub", mean_sq, cx.op("mul", mean, mean)))
    std = cx.op("add", std, cx.param(np.array(1e-9), like=x))
    return [cx.op("div", cx.op("sub", x, mean), std)]


def group_norm(cx: Ctx, node: Any, at: Attrs) -> list:
    """Normalise each group of num_groups channels over its channels and space, then
    scale and shift per channel (opset 21; opset 18's per-group scale only where a group
    is one channel, since there the two agree)."""
    x = cx.sym(node.input[0])
    shape = cx.shape(x)
    if len(shape) < 3 or not cx.dtype(x).is_float:
        raise Unsupported("GroupNormalization needs a floating N,C,... input")
    n, c, groups = shape[0], shape[1], int(at.get("num_groups"))
    at.get("stash_type")
    if groups < 1 or c % groups:
        raise Invalid(f"num_groups={groups} must divide the {c} channels")
    scale, bias = (cx.const(name, "GroupNormalization scale and bias") for name in node.input[1:3])
    if scale.size != c and groups != c:
        raise Unsupported(f"a scale and bias of {scale.size} values per group (opset 18's "
                          f"form) for {c} channels in {groups} groups")  # fmt: skip
    y = cx.reshape(x, (n, groups, int(np.prod(shape[1:])) // groups))
    y = cx.reshape(cx.op("layernorm", y, axis=2, epsilon=float(at.get("epsilon", 1e-5))), shape)
    per_channel = (_channel(cx, v, len(shape), x) for v in (scale, bias))
    return [cx.op("scale_shift", y, *per_channel)]
