"""Shape and index ops: reshapes, transposes, concatenation, slicing, gathering, padding,
depth/space rearrangements, triangles and identity matrices."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ....device.dtypes import dtype as resolve_dtype
from .. import names
from ..state import Attrs, Ctx, Invalid, Unsupported, axis_index
from .common import axes_of


def _resolve_shape(in_shape: tuple[int, ...], shape: list[int], allowzero: bool) -> list[int]:
    if shape.count(-1) > 1:
        raise Invalid(f"shape {shape} has more than one -1; only one size can be inferred")
    if not allowzero and any(d == 0 for d in shape[len(in_shape) :]):
        raise Invalid(f"shape {shape}: a 0 copies the input's size at its position, but the "
                       f"input {in_shape} has only {len(in_shape)} dimensions")  # fmt: skip
    out = [in_shape[i] if d == 0 and not allowzero else d for i, d in enumerate(shape)]
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1]))
        out[out.index(-1)] = int(np.prod(in_shape)) // max(known, 1)
    return out


def reshape(cx: Ctx, node: Any, at: Attrs) -> list:
    x = cx.sym(node.input[0])
    shape = at.get("shape") if cx.opset < 5 else cx.ints(node.input[1], "shape")
    return [cx.reshape(x, tuple(_resolve_shape(cx.shape(x), shape, at.get("allowzero", 0))))]


def flatten(cx: Ctx, node: Any, at: Attrs) -> list:
    x = cx.sym(node.input[0])
    s = cx.shape(x)
    axis = int(at.get("axis", 1))
    if not -len(s) <= axis <= len(s):  # axis may be the rank; a negative one counts from it
        raise Invalid(f"axis {axis} is out of range for rank {len(s)} ({-len(s)}..{len(s)})")
    axis = axis + len(s) if axis < 0 else axis
    return [cx.reshape(x, (int(np.prod(s[:axis])), int(np.prod(s[axis:]))))]


def squeeze(cx: Ctx, node: Any, at: Attrs) -> list:
    x = cx.sym(node.input[0])
    s = cx.shape(x)
    axes = axes_of(cx, node, at)
    axes = {axis_index(a, len(s)) for a in axes} if axes else {i for i, d in enumerate(s) if d == 1}
    wide = sorted(a for a in axes if s[a] != 1)
    if wide:
        raise Invalid(f"axes {wide} of the input {s} are not of size 1; Squeeze removes "
                       "only axes of size 1")  # fmt: skip
    return [cx.reshape(x, tuple(d for i, d in enumerate(s) if i not in axes))]


def unsqueeze(cx: Ctx, node: Any, at: Attrs) -> list:
    x = cx.sym(node.input[0])
    out = list(cx.shape(x))
    axes = axes_of(cx, node, at) or []
    rank = len(out) + len(axes)
    where = sorted(axis_index(a, rank) for a in axes)
    if len(set(where)) != len(where):
        raise Invalid(f"axes {axes} name an axis twice")
    for a in where:
        out.insert(a, 1)
    return [cx.reshape(x, tuple(out))]


def transpose(cx: Ctx, node: Any, at: Attrs) -> list:
    return [cx.op("transpose", cx.sym(node.input[0]), perm=list(at.get("perm") or []))]


def concat(cx: Ctx, node: Any, at: Attrs) -> list:
    axis = at.get("axis", 1 if cx.opset < 4 else None)  # Concat-1 defaulted it to 1
    if axis is None:
        raise Invalid("Concat needs an axis attribute (from opset 4 on)")
    return [cx.op("concat", *(cx.sym(n) for n in node.input if n), axis=int(axis))]


def _clamp(v: int) -> int:
    return int(min(max(v, -(2**31) + 1), 2**31 - 1))


def slice_(cx: Ctx, node: Any, at: Attrs) -> list:
    x = cx.sym(node.input[0])
    if cx.opset < 10:
        starts, ends, axes, steps = at.get("starts"), at.get("ends"), at.get("axes"), None
    else:
        opt = [cx.ints(n, "Slice bounds") if n else None for n in list(node.input[1:]) + [""] * 4]
        starts, ends, axes, steps = opt[:4]
    return [cx.op("slice", x, starts=[_clamp(v) for v in starts], ends=[_clamp(v) for v in ends],
                  axes=list(axes or []), steps=list(steps or []))]  # fmt: skip


def gather(cx: Ctx, node: Any, at: Attrs) -> list:
    data, idx = cx.sym(node.input[0]), cx.sym(node.input[1])
    axis = int(at.get("axis", 0))
    if cx.is_const(node.input[1]):
        # Known indices are checked now: the device would only fail when the model runs.
        size = cx.shape(data)[axis_index(axis, len(cx.shape(data)))]
        bad = sorted({int(i) for i in np.asarray(cx.consts[node.input[1]]).reshape(-1)
                      if not -size <= i < size})  # fmt: skip
        if bad:
            raise Invalid(f"indices {bad[:8]} are out of range for axis {axis} of size "
                           f"{size} (valid: {-size}..{size - 1})")  # fmt: skip
    return [cx.op("gather", data, idx, axis=axis)]


def expand(cx: Ctx, node: Any, at: Attrs) -> list:
    x = cx.sym(node.input[0])
    target = tuple(cx.ints(node.input[1], "shape"))
    try:
        shape = np.broadcast_shapes(cx.shape(x), target)
    except (ValueError, RuntimeError):  # RuntimeError: more dimensions than numpy has
        raise Invalid(f"the input's shape {cx.shape(x)} does not broadcast to {target}; "
                       "each size must be 1 or equal to the other") from None  # fmt: skip
    return [cx.op("expand", x, shape=list(shape))]


def tile(cx: Ctx, node: Any, at: Attrs) -> list:
    x = cx.sym(node.input[0])
    s, reps = cx.shape(x), cx.ints(node.input[1], "repeats")
    if len(reps) != len(s) or any(r < 0 for r in reps):
        raise Invalid(f"repeats {reps} must hold one count >= 0 per axis of the input {s}")
    inter = [v for d in s for v in (1, d)]
    big = [v for r, d in zip(reps, s) for v in (r, d)]
    y = cx.op("expand", cx.reshape(x, tuple(inter)), shape=big)
    return [cx.reshape(y, tuple(r * d for r, d in zip(reps, s)))]


def split(cx: Ctx, node: Any, at: Attrs) -> list:
    x = cx.sym(node.input[0])
    axis = axis_index(int(at.get("axis", 0)), len(cx.shape(x)))
    dim = cx.shape(x)[axis]
    if at.has("split"):
        sizes = list(at.get("split"))
    elif len(node.input) > 1 and node.input[1]:
        sizes = cx.ints(node.input[1], "split")
    else:
        n = int(at.get("num_outputs", len(node.output)))
        if n < 1:
            raise Invalid(f"num_outputs={n} must be at least 1")
        each = -(-dim // n)
        sizes = [max(min(each, dim - i * each), 0) for i in range(n)]
    at.get("split"), at.get("num_outputs")
    if len(sizes) != len(node.output) or any(v < 0 for v in sizes) or sum(sizes) != dim:
        raise Invalid(f"split sizes {sizes} must be {len(node.output)} sizes >= 0 (one per "
                       f"output) that add up to {dim}, the size of axis {axis}")  # fmt: skip
    starts = np.cumsum([0, *sizes])
    return [cx.op("slice", x, starts=[int(a)], ends=[int(b)], axes=[axis])
            for a, b in itertools.pairwise(starts)]  # fmt: skip


def pad(cx: Ctx, node: Any, at: Attrs) -> list:
    x = cx.sym(node.input[0])
    rank = len(cx.shape(x))
    mode = at.get("mode", "constant")
    if cx.opset < 11:
        pads, value = list(at.get("pads") or at.get("paddings")), float(at.get("value", 0.0))
    else:
        pads = cx.ints(node.input[1], "pads")
        value = 0.0
        if len(node.input) > 2 and node.input[2]:
            value = float(np.asarray(cx.const(node.input[2], "constant_value")).reshape(-1)[0])
    axes = list(range(rank))
    if len(node.input) > 3 and node.input[3]:
        axes = [axis_index(a, rank, "Pad axis") for a in cx.ints(node.input[3], "axes")]
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise Unsupported(f"mode={mode}")
    n = len(axes)
    if len(pads) != 2 * n:
        raise Invalid(f"pads {pads} has {len(pads)} values; padding {n} axes needs {2 * n} "
                       "(all the begins, then all the ends)")  # fmt: skip
    every = [0] * (2 * rank)  # the pad kernel's: every axis's begin, then every end
    for i, ax in enumerate(axes):
        before, after = pads[i], pads[i + n]
        every[ax], every[ax + rank] = before, after
        left = cx.shape(x)[ax] + min(before, 0) + min(after, 0)  # negative pads crop first
        if left < 0:
            raise Invalid(f"negative pads {before}, {after} remove more than the "
                          f"{cx.shape(x)[ax]} elements of axis {ax}")  # fmt: skip
        if mode == "reflect" and max(before, after) >= left:
            raise Unsupported("reflect padding as wide as the axis")
    if not any(every):
        return [cx.op("copy", x)]
    return [cx.op("pad", x, pads=every, mode=mode, value=value)]


def trilu(cx: Ctx, node: Any, at: Attrs) -> list:
    """The upper (or lower) triangle of the last two axes from diagonal k: the trilu kernel,
    with k brought within the matrix (a diagonal past its corner keeps all or nothing, as
    the one at the corner does)."""
    x = cx.sym(node.input[0])
    shape = cx.shape(x)
    if len(shape) < 2:
        raise Invalid(f"Trilu needs an input of rank >= 2, not {shape}")
    k = cx.ints(node.input[1], "k")[0] if len(node.input) > 1 and node.input[1] else 0
    rows, cols = shape[-2:]
    k = max(-rows, min(cols, k))
    return [cx.op("trilu", x, upper=bool(at.get("upper", 1)), k=k)]


def eye_like(cx: Ctx, node: Any, at: Attrs) -> list:
    """Ones on diagonal k of a 2-D shape: a constant, since only the input's shape (and
    dtype, unless the dtype attribute gives one) matter."""
    from onnx import helper

    shape = cx.shape(node.input[0])
    if len(shape) != 2:
        raise Invalid(f"EyeLike takes a 2-D input, not shape {shape}")
    code = at.get("dtype") or names.BY_NUMPY[_numpy_dtype(cx, node.input[0])].code
    dtype = helper.tensor_dtype_to_np_dtype(code)
    return [np.eye(shape[0], shape[1], int(at.get("k", 0)), dtype=dtype)]


def _numpy_dtype(cx: Ctx, name: str) -> str:
    """The numpy dtype name of the ONNX type of `name`, as the model declares it."""
    if name in cx.consts:
        return cx.consts[name].dtype.name
    return resolve_dtype(cx.dtype_name(name)).read_dtype.name


def depth_to_space(cx: Ctx, node: Any, at: Attrs) -> list:
    """N,C,H,W to N,C/b^2,H*b,W*b: a reshape, a transpose and a reshape (DCR: depth
    holds the blocks first; CRD: the channels first)."""
    x = cx.sym(node.input[0])
    shape = cx.shape(x)
    b, mode = int(at.get("blocksize")), at.get("mode", "DCR")
    if len(shape) != 4 or b < 1 or shape[1] % (b * b):
        raise Invalid(f"DepthToSpace needs N,C,H,W with C divisible by blocksize^2 ({b}^2)")
    n, c, h, w = shape
    if mode == "DCR":
        y = cx.op("transpose", cx.reshape(x, (n, b, b, c // (b * b), h, w)),
                  perm=[0, 3, 4, 1, 5, 2])  # fmt: skip
    elif mode == "CRD":
        y = cx.op("transpose", cx.reshape(x, (n, c // (b * b), b, b, h, w)),
                  perm=[0, 1, 4, 2, 5, 3])  # fmt: skip
    else:
        raise Invalid(f"mode={mode}: DepthToSpace takes DCR or CRD")
    return [cx.reshape(y, (n, c // (b * b), h * b, w * b))]


def space_to_depth(cx: Ctx, node: Any, at: Attrs) -> list:
    """N,C,H,W to N,C*b^2,H/b,W/b, the inverse of DepthToSpace (DCR: the blocks become
    the leading part of the depth; CRD: the channels do)."""
    x = cx.sym(node.input[0])
    shape = cx.shape(x)
    b, mode = int(at.get("blocksize")), at.get("mode", "DCR")
    if len(shape) != 4 or b < 1 or shape[2] % b or shape[3] % b:
        raise Invalid(f"SpaceToDepth needs N,C,H,W with H and W divisible by blocksize {b}")
    if mode not in ("DCR", "CRD"):
        raise Invalid(f"mode={mode}: SpaceToDepth takes DCR or CRD")
    n, c, h, w = shape
    perm = [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]
    y = cx.op("transpose", cx.reshape(x, (n, c, h // b, b, w // b, b)), perm=perm)
    return [cx.reshape(y, (n, c * b * b, h // b, w // b))]
