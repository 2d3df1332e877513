"""LinearAttention (opset 27): attention through a recurrent (d_k x d_v) state per KV head,
with the linear, gated, delta and gated_delta update rules.

The recurrence is unrolled over the sequence, one step per token, in the order ONNX's
definition gives: decay the state (gated rules: state *= exp(decay_t)), correct the value by
what the state already retrieves for the key (delta rules: v_t = beta_t * (v_t - k_t @ state)),
add the outer product k_t^T v_t, and read q_t @ state. The chunked parallel forms that fast
kernels use need exp(-cumulative decay), which overflows where the recurrence does not, so
they are not used. Grouped query heads read their KV head's state through a reshape.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid, Unsupported
from .common import optional_input

_RULES = ("linear", "gated", "delta", "gated_delta")
# One step is about a dozen kernels: longer sequences would make graphs of tens of thousands.
_MAX_STEPS = 1024


def _per_head(cx: Ctx, x: Symbol, heads: int, what: str) -> Symbol:
    """(batch, T, heads * size) as (batch, heads, T, size)."""
    shape = cx.shape(x)
    if len(shape) != 3 or shape[2] % heads:
        raise Invalid(f"{what} must be (batch, T, {heads} heads * size), got shape {shape}")
    b, t, hidden = shape
    return cx.op("transpose", cx.reshape(x, (b, t, heads, hidden // heads)), perm=[0, 2, 1, 3])


def _rule(cx: Ctx, node: Any, at: Attrs) -> tuple[bool, bool]:
    """Whether the update rule gates (decays) the state and whether it corrects by delta;
    the inputs it needs must be present and the others absent."""
    rule = at.get("update_rule", "gated_delta")
    if rule not in _RULES:
        raise Invalid(f"update_rule '{rule}' is not one of {', '.join(_RULES)}")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    for name, index, needed in (("decay", 4, gating), ("beta", 5, delta)):
        if (optional_input(node, index) is not None) != needed:
            raise Invalid(f"update_rule '{rule}' {'requires' if needed else 'forbids'} {name}")
    return gating, delta


def _steps(cx: Ctx, x: Symbol, t: int) -> list[Symbol]:
    """The T slices of (batch, heads, T, size) along T, each (batch, heads, 1, size)."""
    return [cx.op("slice", x, starts=[i], ends=[i + 1], axes=[2]) for i in range(t)]


def linear_attention(cx: Ctx, node: Any, at: Attrs) -> list:
    hq, hkv = at.get("q_num_heads"), at.get("kv_num_heads")
    if not hq or not hkv or int(hq) <= 0 or int(hkv) <= 0 or int(hq) % int(hkv):
        raise Invalid(f"q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hkv})")
    hq, hkv = int(hq), int(hkv)
    at.get("chunk_size")  # a tuning hint of fast kernels: no effect on the result
    gating, delta = _rule(cx, node, at)
    q, k, v = (cx.sym(n) for n in node.input[:3])
    dt = cx.dtype(q)
    named = [(n, cx.sym(n)) for n in node.input[3:6] if n]
    if not dt.is_float or any(cx.dtype(s) is not dt for s in (k, v, *(s for _, s in named))):
        raise Unsupported("inputs of different dtypes (one float dtype is supported)")
    q4, k4, v4 = _per_head(cx, q, hq, "query"), _per_head(cx, k, hkv, "key"), \
        _per_head(cx, v, hkv, "value")  # fmt: skip
    b, _, t, dk = cx.shape(q4)
    dv = cx.shape(v4)[3]
    if cx.shape(k4) != (b, hkv, t, dk) or cx.shape(v4)[:3] != (b, hkv, t):
        raise Invalid(f"query {cx.shape(q)}, key {cx.shape(k)} and value {cx.shape(v)} must "
                      "agree in batch, sequence length and key size per head")  # fmt: skip
    if t < 1:
        raise Unsupported("an empty sequence (T = 0)")
    if t > _MAX_STEPS:
        raise Unsupported(f"a sequence of {t} steps (the recurrence is unrolled: at most "
                          f"{_MAX_STEPS})")  # fmt: skip

    past = optional_input(node, 3)
    if past is not None:
        state = cx.sym(past)
        if cx.shape(state) != (b, hkv, dk, dv):
            raise Invalid(f"past_state of shape {cx.shape(state)} must be {(b, hkv, dk, dv)}")
    else:
        state = cx.param(np.zeros((b, hkv, dk, dv)), like=q, stem="state")
    decays = _decays(cx, node, b, t, hkv, dk) if gating else None
    betas = _betas(cx, node, b, t, hkv) if delta else None
    qs, ks, vs = _steps(cx, q4, t), _steps(cx, k4, t), _steps(cx, v4, t)
    outs = []
    for i in range(t):
        if decays is not None:
            state = cx.op("mul", state, cx.op("exp", decays[i]))
        v_t = vs[i]
        if betas is not None:
            retrieved = cx.op("gemm", ks[i], state)
            v_t = cx.op("mul", betas[i], cx.op("sub", v_t, retrieved))
        outer = cx.op("mul", cx.reshape(ks[i], (b, hkv, dk, 1)), v_t)
        state = cx.op("add", state, outer)
        read = cx.op("gemm", cx.reshape(qs[i], (b, hkv, hq // hkv, dk)), state)
        outs.append(cx.reshape(read, (b, hq, 1, dv)))
    scale = float(at.get("scale", 0.0)) or 1 / math.sqrt(dk)
    y = cx.op("concat", *outs, axis=2) if len(outs) > 1 else outs[0]
    y = cx.op("mul", y, cx.param(np.array(scale), like=q, stem="scale"))
    y = cx.reshape(cx.op("transpose", y, perm=[0, 2, 1, 3]), (b, t, hq * dv))
    return [y, state]


def _decays(cx: Ctx, node: Any, b: int, t: int, hkv: int, dk: int) -> list[Symbol]:
    """decay (batch, T, kv_num_heads) or (batch, T, kv_num_heads * d_k), the log of the
    factor each step multiplies the state by, per step as (batch, heads, d_k or 1, 1)."""
    g = cx.sym(node.input[4])
    shape = cx.shape(g)
    if len(shape) != 3 or shape[:2] != (b, t) or shape[2] not in (hkv, hkv * dk):
        raise Invalid(f"decay of shape {shape} must be {(b, t, hkv)} or {(b, t, hkv * dk)}")
    width = 1 if shape[2] == hkv else dk
    g4 = _per_head(cx, g, hkv, "decay")
    return [cx.reshape(s, (b, hkv, width, 1)) for s in _steps(cx, g4, t)]


def _betas(cx: Ctx, node: Any, b: int, t: int, hkv: int) -> list[Symbol]:
    """beta (batch, T, kv_num_heads or 1), per step as (batch, heads or 1, 1, 1)."""
    beta = cx.sym(node.input[5])
    shape = cx.shape(beta)
    if len(shape) != 3 or shape[:2] != (b, t) or shape[2] not in (hkv, 1):
        raise Invalid(f"beta of shape {shape} must be {(b, t, hkv)} or {(b, t, 1)}")
    b4 = _per_head(cx, beta, shape[2], "beta")
    return _steps(cx, b4, t)
