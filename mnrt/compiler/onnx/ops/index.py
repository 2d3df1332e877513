"""Ops that address elements by position: ArgMax/ArgMin, TopK, the Gather and Scatter
families (TensorScatter and Col2Im too), OneHot, CumSum/CumProd, ReverseSequence and Compress.

Index operands arrive as int32 or int64 (the device's index dtypes); positions the device
computes (ArgMax, TopK's indices) are int64, as ONNX says.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..fold import fold
from ..state import Attrs, Converter, Ctx, Invalid, Unsupported, axis_index


def arg(kernel: str) -> Converter:
    def imp(cx: Ctx, node: Any, at: Attrs) -> list:
        x = cx.sym(node.input[0])
        axis = axis_index(int(at.get("axis", 0)), len(cx.shape(x)))
        return [cx.op(kernel, x, axis=axis, keepdims=bool(at.get("keepdims", 1)),
                      select_last_index=bool(at.get("select_last_index", 0)))]  # fmt: skip

    return imp


def top_k(cx: Ctx, node: Any, at: Attrs) -> list:
    """K is an attribute before opset 10 and a constant input from it on."""
    x = cx.sym(node.input[0])
    if cx.opset < 10:
        k = int(at.get("k"))
    else:
        ks = cx.ints(node.input[1], "K")
        if len(ks) != 1:
            raise Invalid(f"K must hold one value, not {len(ks)}")
        k = ks[0]
    axis = axis_index(int(at.get("axis", -1)), len(cx.shape(x)))
    if not 0 <= k <= cx.shape(x)[axis]:
        raise Invalid(f"K={k} is not in 0..{cx.shape(x)[axis]}, the size of axis {axis}")
    values, indices = cx.op("topk", x, k=k, axis=axis, largest=bool(at.get("largest", 1)),
                            sorted=bool(at.get("sorted", 1)))  # fmt: skip
    return [values, indices]


def gather_elements(cx: Ctx, node: Any, at: Attrs) -> list:
    data, idx = cx.sym(node.input[0]), cx.sym(node.input[1])
    axis = axis_index(int(at.get("axis", 0)), len(cx.shape(data)))
    return [cx.op("gather_elements", data, idx, axis=axis)]


def gather_nd(cx: Ctx, node: Any, at: Attrs) -> list:
    data, idx = cx.sym(node.input[0]), cx.sym(node.input[1])
    return [cx.op("gather_nd", data, idx, batch_dims=int(at.get("batch_dims", 0)))]


def scatter_elements(cx: Ctx, node: Any, at: Attrs) -> list:
    """ScatterElements, and Scatter (its deprecated name before opset 11, no reduction)."""
    data, idx, upd = (cx.sym(n) for n in node.input[:3])
    axis = axis_index(int(at.get("axis", 0)), len(cx.shape(data)))
    reduction = at.get("reduction", "none") if node.op_type == "ScatterElements" else "none"
    ds, ids = cx.shape(data), cx.shape(idx)
    if len(ids) == len(ds) and any(i != d for k, (i, d) in enumerate(zip(ids, ds)) if k != axis):
        raise Unsupported(
            f"indices of shape {ids} smaller than data {ds} along axes other than {axis}: the "
            "device scatters whole rows of every other axis"
        )
    return [cx.op("scatter_elements", data, idx, upd, axis=axis, reduction=reduction)]


def tensor_scatter(cx: Ctx, node: Any, at: Attrs) -> list:
    """TensorScatter (opset 24), a KV cache's update: `update` written into the cache along
    `axis` from each batch row's write index (0 without write_indices; modulo the cache's
    length in circular mode). One scatter_elements, whose indices are the write index plus
    each update position: worked out at import when the write indices are known then, by
    an add (and a mod) on the device when a decode step passes them."""
    cache, update = cx.sym(node.input[0]), cx.sym(node.input[1])
    shape, ushape = cx.shape(cache), cx.shape(update)
    rank, mode = len(shape), at.get("mode", "linear")
    axis = axis_index(int(at.get("axis", -2)), rank)
    if mode not in ("linear", "circular"):
        raise Invalid(f"mode={mode!r}: TensorScatter takes 'linear' or 'circular'")
    if (
        axis == 0
        or len(ushape) != rank
        or ushape[axis] > shape[axis]
        or any(u != c for k, (u, c) in enumerate(zip(ushape, shape)) if k != axis)
    ):
        raise Invalid(f"update {ushape} must be the cache {shape} but for a sequence axis "
                      f"{axis} (not the batch axis) no longer than the cache's")  # fmt: skip
    seq = np.arange(ushape[axis], dtype=np.int64).reshape(
        [ushape[axis] if k == axis else 1 for k in range(rank)]
    )
    length = np.int64(shape[axis])
    written = len(node.input) > 2 and node.input[2]
    if not written or cx.is_const(node.input[2]):
        start = np.asarray(cx.const(node.input[2]) if written else np.zeros(shape[0], np.int64))
        index = start.astype(np.int64).reshape(-1, *[1] * (rank - 1)) + seq
        index = np.broadcast_to(index % length if mode == "circular" else index, ushape)
        return [cx.op("scatter_elements", cache, cx.param(np.ascontiguousarray(index)), update,
                      axis=axis, reduction="none")]  # fmt: skip
    start = cx.sym(node.input[2])
    index = cx.op("add", cx.reshape(start, (shape[0], *[1] * (rank - 1))),
                  cx.param(seq, like=start))  # fmt: skip
    if mode == "circular":
        index = cx.op("mod", index, cx.param(np.array(length), like=start))
    index = cx.op("expand", index, shape=list(ushape))
    return [cx.op("scatter_elements", cache, index, update, axis=axis, reduction="none")]


def col2im(cx: Ctx, node: Any, at: Attrs) -> list:
    """Col2Im (PyTorch's fold): each column's block added into its window of the padded
    image, then the padding cropped. One scatter_nd that adds (the blocks overlap) the
    columns, laid along rows, into a zero image, at the flat positions the shapes give,
    worked out at import; with the transposes that lay the columns along rows and the
    image back."""
    x = cx.sym(node.input[0])
    image, block = cx.ints(node.input[1], "image_shape"), cx.ints(node.input[2], "block_shape")
    d, (n, ck, blocks) = len(image), cx.shape(x)
    strides = list(at.get("strides") or [1] * d)
    dilations = list(at.get("dilations") or [1] * d)
    pads = list(at.get("pads") or [0] * (2 * d))
    taps = int(np.prod(block))
    if not d or len(block) != d or [len(strides), len(dilations), len(pads)] != [d, d, 2 * d] \
            or min([*image, *block, *strides, *dilations, taps]) < 1 or min(pads) < 0 \
            or ck % taps:  # fmt: skip
        raise Invalid(f"image_shape {image}, block_shape {block}, strides {strides}, "
                      f"dilations {dilations} and pads {pads} must agree with each other "
                      f"and with the input's {ck} rows of C * {taps}")  # fmt: skip
    padded = [size + pads[a] + pads[a + d] for a, size in enumerate(image)]
    counts = [(p - (dl * (b - 1) + 1)) // s + 1
              for p, b, s, dl in zip(padded, block, strides, dilations)]  # fmt: skip
    if min(counts) < 1 or int(np.prod(counts)) != blocks:
        raise Invalid(f"{blocks} columns, where the image and block shapes give {counts}")
    tap = np.indices(block).reshape(d, -1, 1) * np.array(dilations).reshape(d, 1, 1)
    start = np.indices(counts).reshape(d, 1, -1) * np.array(strides).reshape(d, 1, 1)
    flat = np.ravel_multi_index(tuple(tap + start), padded).reshape(-1, 1)
    c = ck // taps
    rows = cx.op("transpose", cx.reshape(x, (n * c, taps * blocks)), perm=[1, 0])
    zero = cx.op("fill", shape=[int(np.prod(padded)), n * c], value=0.0,
                 dtype=cx.dtype(x).name)  # fmt: skip
    added = cx.op("scatter_nd", zero, cx.param(flat.astype(np.int64)), rows, reduction="add")
    y = cx.reshape(cx.op("transpose", added, perm=[1, 0]), (n, c, *padded))
    if not any(pads):
        return [y]
    return [cx.op("slice", y, starts=pads[:d], ends=[b + i for b, i in zip(pads, image)],
                  axes=list(range(2, 2 + d)))]  # fmt: skip


def scatter_nd(cx: Ctx, node: Any, at: Attrs) -> list:
    data, idx, upd = (cx.sym(n) for n in node.input[:3])
    return [cx.op("scatter_nd", data, idx, upd, reduction=at.get("reduction", "none"))]


def one_hot(cx: Ctx, node: Any, at: Attrs) -> list:
    """depth must be known at import time (it is the output's size); the output has the
    dtype of `values` ([off, on])."""
    idx = cx.sym(node.input[0])
    depth = np.asarray(cx.const(node.input[1], "depth")).reshape(-1)
    if depth.size != 1:
        raise Invalid(f"depth must hold one value, not {depth.size}")
    if not np.isfinite(depth[0]) or int(depth[0]) < 1:
        raise Invalid(f"depth {depth[0]} must be a positive number")
    values = cx.sym(node.input[2])
    if cx.shape(values) != (2,):
        raise Invalid(f"values has shape {cx.shape(values)}; it must be [off_value, on_value]")
    axis = axis_index(int(at.get("axis", -1)), len(cx.shape(idx)) + 1)
    return [cx.op("onehot", idx, values, depth=int(depth[0]), axis=axis)]


def cumulative(kernel: str) -> Converter:
    """CumSum and CumProd: the axis is an input, which must be known at import time."""

    def imp(cx: Ctx, node: Any, at: Attrs) -> list:
        x = cx.sym(node.input[0])
        axes = cx.ints(node.input[1], "axis")
        if len(axes) != 1:
            raise Invalid(f"axis must hold one value, not {len(axes)}")
        axis = axis_index(axes[0], len(cx.shape(x)))
        return [cx.op(kernel, x, axis=axis, exclusive=bool(at.get("exclusive", 0)),
                      reverse=bool(at.get("reverse", 0)))]  # fmt: skip

    return imp


def reverse_sequence(cx: Ctx, node: Any, at: Attrs) -> list:
    x, lens = cx.sym(node.input[0]), cx.sym(node.input[1])
    rank = len(cx.shape(x))
    batch = axis_index(int(at.get("batch_axis", 1)), rank, "batch_axis")
    time = axis_index(int(at.get("time_axis", 0)), rank, "time_axis")
    return [cx.op("reverse_sequence", x, lens, batch_axis=batch, time_axis=time)]


def compress(cx: Ctx, node: Any, at: Attrs) -> list:
    """The positions where the condition holds, gathered: the condition decides the
    output's shape, so it must be known at import time."""
    x = cx.sym(node.input[0])
    cond = np.asarray(cx.const(node.input[1], "condition (it decides the output's shape)"))
    cond = cond.reshape(-1).astype(bool)
    if at.has("axis"):
        axis = axis_index(int(at.get("axis")), len(cx.shape(x)))
    else:
        at.get("axis")
        x, axis = cx.reshape(x, (int(np.prod(cx.shape(x))),)), 0
    if cond.size > cx.shape(x)[axis]:
        raise Invalid(f"condition has {cond.size} values, more than axis {axis}'s "
                      f"{cx.shape(x)[axis]}")  # fmt: skip
    picked = np.flatnonzero(cond).astype(np.int64)
    return [cx.op("gather", x, cx.param(picked, stem="compress_idx"), axis=axis)]


def data_dependent(cx: Ctx, node: Any, at: Attrs) -> list:
    """NonZero, Unique, NonMaxSuppression and MelWeightMatrix: the output's shape depends
    on the inputs' values, which the device's static buffers cannot follow, so they must
    be known at import time (an initializer, a folded node, or a graph input an example
    input gives) and the node is evaluated on the host."""
    why = f"the input of {node.op_type} (its output's shape depends on the values)"
    values = [cx.const(n, why) for n in node.input if n]
    folded = fold(node, values, cx.opsets)
    if folded is None:
        raise Invalid("ONNX's reference evaluator cannot evaluate it on these constants")
    for name in at.values:  # the evaluator applied every attribute
        at.get(name)
    results = iter(folded)
    return [next(results) if name else None for name in node.output]
