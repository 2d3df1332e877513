"""Transformer building blocks that are a few device kernels each: RMSNormalization,
RotaryEmbedding and SwiGLU (opsets 23 and later). Attention has its own module."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid, Unsupported, axis_index
from . import unary


def _stash_type(at: Attrs) -> None:
    """stash_type names the precision of the statistics. The rmsnorm kernel keeps them in
    float for half and float16 inputs and in the input's precision otherwise: at least the
    float that stash_type=1 asks for. Any other stash_type is refused rather than met with
    less precision than the model asks for."""
    stash = int(at.get("stash_type", 1))
    if stash != 1:
        raise Unsupported(f"stash_type={stash}: the device keeps the statistics in float (1)")


def rms_norm(cx: Ctx, node: Any, at: Attrs) -> list:
    """The rmsnorm kernel over axis..end. A Scale of exactly the normalised shape goes into
    the kernel; one that only broadcasts to it (the spec allows that) is a following mul."""
    _stash_type(at)
    x, scale = cx.sym(node.input[0]), cx.sym(node.input[1])
    shape = cx.shape(x)
    axis = axis_index(int(at.get("axis", -1)), len(shape))
    eps = float(at.get("epsilon", 1e-5))
    if cx.dtype(scale) is not cx.dtype(x):
        raise Unsupported(f"Scale of {cx.dtype(scale).name} with X of {cx.dtype(x).name}")
    if cx.shape(scale) == shape[axis:]:
        return [cx.op("rmsnorm", x, scale, axis=axis, epsilon=eps)]
    y = cx.op("rmsnorm", x, axis=axis, epsilon=eps)
    try:
        fits = np.broadcast_shapes(cx.shape(scale), shape) == shape
    except ValueError:
        fits = False
    if not fits:
        raise Invalid(f"Scale of shape {cx.shape(scale)} does not broadcast to X {shape}")
    return [cx.op("mul", y, scale)]


def swiglu(cx: Ctx, node: Any, at: Attrs) -> list:
    """A * sigmoid(alpha * A) * B: silu when alpha is 1. A and B have one shape (no
    broadcasting, as the spec says)."""
    a, b = cx.sym(node.input[0]), cx.sym(node.input[1])
    if cx.shape(a) != cx.shape(b) or cx.dtype(a) is not cx.dtype(b):
        raise Invalid(f"A ({cx.shape(a)}, {cx.dtype(a).name}) and B ({cx.shape(b)}, "
                      f"{cx.dtype(b).name}) must have the same shape and dtype")  # fmt: skip
    return [cx.op("mul", unary.sigmoid_gated(cx, a, float(at.get("alpha", 1.0))), b)]


def _halves(cx: Ctx, x: Symbol, rot: int, interleaved: bool) -> tuple[Symbol, Symbol]:
    """The two components each rotated pair is made of: even and odd positions of the
    rotated part when interleaved, its first and second halves otherwise."""
    if interleaved:
        return (cx.op("slice", x, starts=[0], ends=[rot], axes=[-1], steps=[2]),
                cx.op("slice", x, starts=[1], ends=[rot], axes=[-1], steps=[2]))  # fmt: skip
    half = rot // 2
    return (cx.op("slice", x, starts=[0], ends=[half], axes=[-1]),
            cx.op("slice", x, starts=[half], ends=[rot], axes=[-1]))  # fmt: skip


def _cache(cx: Ctx, node: Any, index: int, lead: tuple[int, int], half: int) -> Symbol:
    """cos_cache or sin_cache as (batch, seq, half): gathered at position_ids when given."""
    name = "cos_cache" if index == 1 else "sin_cache"
    c = cx.sym(node.input[index])
    pos = node.input[3] if len(node.input) > 3 and node.input[3] else None
    if pos is not None:
        c = cx.op("gather", c, cx.sym(pos), axis=0)
    if cx.shape(c) != (*lead, half):
        given = "with" if pos is not None else "without"
        raise Invalid(
            f"{name} {given} position_ids gives shape {cx.shape(c)}; the input needs "
            f"{(*lead, half)} (batch, sequence, rotary_embedding_dim / 2)"
        )
    return c


def rotary_embedding(cx: Ctx, node: Any, at: Attrs) -> list:
    """Rotate pairs of features by position-dependent angles. The input keeps its layout:
    a 4-D (batch, heads, seq, head) input takes the caches as (batch, 1, seq, half), a 3-D
    (batch, seq, heads * head) one is viewed as (batch, seq, heads, head) and takes them as
    (batch, seq, 1, half); no transpose is needed."""
    x = cx.sym(node.input[0])
    shape = cx.shape(x)
    heads = at.get("num_heads")
    if len(shape) == 3:
        if not heads or int(heads) < 1 or shape[2] % int(heads):
            raise Invalid(f"a 3-D input {shape} needs num_heads dividing its last size; "
                          f"got num_heads={heads}")  # fmt: skip
        view = (shape[0], shape[1], int(heads), shape[2] // int(heads))
        lead, cache_view = (shape[0], shape[1]), (shape[0], shape[1], 1)
    elif len(shape) == 4:
        view = shape
        lead, cache_view = (shape[0], shape[2]), (shape[0], 1, shape[2])
    else:
        raise Invalid(f"the input must be 3-D or 4-D, got shape {shape}")
    head = view[-1]
    rot = int(at.get("rotary_embedding_dim", 0)) or head
    if rot % 2 or rot > head:
        raise Invalid(f"rotary_embedding_dim {rot} must be even and at most the head size {head}")
    interleaved = bool(at.get("interleaved", 0))
    xv = cx.reshape(x, view)
    cos, sin = (cx.reshape(_cache(cx, node, i, lead, rot // 2), (*cache_view, rot // 2))
                for i in (1, 2))  # fmt: skip
    if cx.dtype(cos) is not cx.dtype(x) or cx.dtype(sin) is not cx.dtype(x):
        raise Invalid("cos_cache and sin_cache must have the input's dtype")
    x1, x2 = _halves(cx, xv, rot, interleaved)
    real = cx.op("sub", cx.op("mul", cos, x1), cx.op("mul", sin, x2))
    imag = cx.op("add", cx.op("mul", sin, x1), cx.op("mul", cos, x2))
    if interleaved:
        pair = (*view[:-1], rot // 2, 1)
        both = cx.op("concat", cx.reshape(real, pair), cx.reshape(imag, pair), axis=-1)
        rotated = cx.reshape(both, (*view[:-1], rot))
    else:
        rotated = cx.op("concat", real, imag, axis=-1)
    if rot < head:
        rest = cx.op("slice", xv, starts=[rot], ends=[head], axes=[-1])
        rotated = cx.op("concat", rotated, rest, axis=-1)
    return [cx.reshape(rotated, shape)]
