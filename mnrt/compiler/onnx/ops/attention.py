"""Attention (opsets 23 to 25): scaled dot-product attention, composed of device kernels.

Q, K and V are brought to (batch, heads, sequence, head size) (3-D inputs are split into
heads); past_key / past_value are concatenated in front of K and V (the present outputs);
every mask becomes one additive bias of 0 and -inf. Grouped-query attention multiplies each
group of query heads with its shared KV head through a reshape of Q, so K and V are never
repeated.

The parts of the bias that depend only on shapes (is_causal and the sliding window when their
offset is the past length) are computed here, once, as a constant; the parts that depend on
input values (attn_mask, and nonpad_kv_seqlen's padding and per-batch offset) are device
work. A query row that the bias masks entirely gives zeros, not nan, in Y and in the mode-3
qk_matmul_output, as the spec says.

Float16 inputs are computed at the compile's float_dtype, as every float16 model is (in float
by default: within 2e-7 of the exact result on ONNX's node cases, where ONNX's reference,
rounding every step to float16, is up to 5e-4 from it).
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Any

import numpy as np

from ....device.dtypes import dtype as resolve_dtype
from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid, Unsupported, device_dtype_name
from .common import optional_input

_MODES = {0: "the raw QK product", 1: "after softcap", 2: "after the bias", 3: "softmax"}


def _split_heads(cx: Ctx, x: Symbol, heads: int, what: str) -> Symbol:
    """(batch, seq, heads * size) as (batch, heads, seq, size)."""
    b, s, hidden = cx.shape(x)
    if heads < 1 or hidden % heads:
        raise Invalid(f"{what}'s hidden size {hidden} is not a multiple of its {heads} heads")
    return cx.op("transpose", cx.reshape(x, (b, s, heads, hidden // heads)), perm=[0, 2, 1, 3])


def _heads(cx: Ctx, at: Attrs, q: Symbol, k: Symbol, v: Symbol) -> tuple[Symbol, ...]:
    """Q, K, V as 4-D (batch, heads, sequence, head size)."""
    ranks = {len(cx.shape(t)) for t in (q, k, v)}
    qh, kvh = at.get("q_num_heads"), at.get("kv_num_heads")
    if ranks == {3}:
        if not qh or not kvh:
            raise Invalid("3-D Q, K and V need the q_num_heads and kv_num_heads attributes")
        return (_split_heads(cx, q, int(qh), "Q"), _split_heads(cx, k, int(kvh), "K"),
                _split_heads(cx, v, int(kvh), "V"))  # fmt: skip
    if ranks != {4}:
        shapes = [cx.shape(t) for t in (q, k, v)]
        raise Invalid(f"Q, K and V must be all 3-D or all 4-D, got shapes {shapes}")
    if cx.opset >= 25 and (qh is not None or kvh is not None):
        raise Invalid("from opset 25, q_num_heads and kv_num_heads are for 3-D inputs only")
    for name, given, actual in (("q_num_heads", qh, cx.shape(q)[1]),
                                ("kv_num_heads", kvh, cx.shape(k)[1])):  # fmt: skip
        if given is not None and int(given) != actual:
            raise Invalid(f"{name}={given} but the 4-D input has {actual} heads")
    return q, k, v


def check_shapes(cx: Ctx, q: Symbol, k: Symbol, v: Symbol) -> None:
    """4-D Q, K and V that attention can combine: one batch, one head size for Q and K,
    K and V alike in heads and length, and Q's heads a multiple of theirs (GQA)."""
    (b, hq, _, d), (bk, hkv, skv, dk), (bv, hv, sv, _) = (cx.shape(t) for t in (q, k, v))
    if d != dk:
        raise Invalid(f"Q's head size {d} differs from K's {dk}")
    if not b == bk == bv or hkv != hv or skv != sv:
        raise Invalid(f"K {cx.shape(k)} and V {cx.shape(v)} must agree in batch, heads and "
                      f"sequence length, and with Q's batch {b}")  # fmt: skip
    if hq % hkv:
        raise Invalid(f"Q's {hq} heads are not a multiple of K and V's {hkv} heads")


def _allowed(rows: np.ndarray, cols: np.ndarray, causal: bool, left: int,
             right: int) -> np.ndarray:  # fmt: skip
    """Where query rows (absolute positions) may attend key cols: j <= i when causal,
    i - left <= j <= i + right for each bound that is not -1."""
    diff = rows - cols
    ok = np.ones(diff.shape, bool)
    if causal:
        ok &= diff >= 0
    if left >= 0:
        ok &= diff <= left
    if right >= 0:
        ok &= -diff <= right
    return ok


class _Bias:
    """The additive bias: a constant part (numpy, 0 / -inf) and device parts, summed."""

    def __init__(self, cx: Ctx, like: Symbol) -> None:
        self.cx, self.like = cx, like
        self.const: np.ndarray | None = None
        self.parts: list[Symbol] = []

    @cached_property
    def zero(self) -> Symbol:
        return self.cx.param(np.array(0), like=self.like, stem="zero")

    @cached_property
    def neg_inf(self) -> Symbol:
        return self.cx.param(np.array(-np.inf), like=self.like, stem="neg_inf")

    def add_const(self, allowed: np.ndarray) -> None:
        if allowed.all():
            return
        part = np.where(allowed, 0.0, -np.inf)
        self.const = part if self.const is None else self.const + part

    def add_allowed(self, allowed: Symbol) -> None:
        self.parts.append(self.cx.op("where", allowed, self.zero, self.neg_inf))

    def symbol(self) -> Symbol | None:
        parts = list(self.parts)
        if self.const is not None:
            parts.append(self.cx.param(self.const, like=self.like, stem="attn_bias"))
        if not parts:
            return None
        total = parts[0]
        for p in parts[1:]:
            total = self.cx.op("add", total, p)
        return total

    def masked_rows(self, total: Symbol) -> Symbol | None:
        """Bool, True for query rows with no key left to attend; None when there are none."""
        if not self.parts:
            if self.const is None or not np.isneginf(self.const).all(axis=-1).any():
                return None
            rows = np.isneginf(self.const).all(axis=-1, keepdims=True)
            return self.cx.param(rows, stem="masked_rows")
        row_max = self.cx.op("max", total, axes=[-1], keepdims=True)
        return self.cx.op("equal", row_max, self.neg_inf)


def _mask(cx: Ctx, bias: _Bias, name: str, full: tuple[int, ...]) -> None:
    """attn_mask: bool (True attends) or float (added); a last axis shorter than the total
    sequence is padded with masked positions."""
    m = cx.sym(name)
    dt, qdt = cx.dtype(m), cx.dtype(bias.like)
    if dt.name == "bool":
        m = cx.op("where", m, bias.zero, bias.neg_inf)
    elif dt.is_float:
        m = m if dt is qdt else cx.op("cast", m, to=qdt.name)
    else:
        raise Unsupported(f"an attn_mask of {dt.name} (bool or float masks are supported)")
    shape = cx.shape(m)
    if not 1 <= len(shape) <= 4 or shape[-1] > full[-1]:
        raise Invalid(f"attn_mask of shape {shape} does not fit the scores {full}")
    if shape[-1] < full[-1]:
        pad = cx.op("expand", bias.neg_inf, shape=[*shape[:-1], full[-1] - shape[-1]])
        m = cx.op("concat", m, pad, axis=-1)
        shape = cx.shape(m)
    try:
        fits = np.broadcast_shapes(shape, full) == full
    except ValueError:
        fits = False
    if not fits:
        raise Invalid(f"attn_mask of shape {shape} does not broadcast to the scores {full}")
    bias.parts.append(m)


def _nonpad(cx: Ctx, bias: _Bias, name: str, sq: int, skv: int, causal: bool, left: int,
            right: int) -> None:  # fmt: skip
    """nonpad_kv_seqlen (an external cache): keys at or past each batch's count are padding,
    and the causal / window offset of batch b is nonpad_kv_seqlen[b] - q_sequence_length."""
    n = cx.sym(name)
    if not cx.dtype(n).is_integer or len(cx.shape(n)) != 1:
        raise Invalid(f"nonpad_kv_seqlen must be a 1-D integer vector, got "
                      f"{cx.dtype(n).name} {cx.shape(n)}")  # fmt: skip
    batch = cx.shape(n)[0]
    it = cx.dtype(n).storage  # the comparisons below are in nonpad_kv_seqlen's own dtype
    cols = np.arange(skv, dtype=it)
    pad_ok = cx.op("less", cx.param(cols), cx.reshape(n, (batch, 1)))
    bias.add_allowed(cx.reshape(pad_ok, (batch, 1, 1, skv)))
    if not (causal or left >= 0 or right >= 0):
        return
    # diff = (i + n[b] - sq) - j, the same rule as _allowed with a per-batch offset
    base = np.arange(sq, dtype=it)[:, None] - sq - cols[None, :]
    diff = cx.op("add", cx.param(base), cx.reshape(n, (batch, 1, 1)))
    conds = []
    if causal:
        conds.append(cx.op("greater_equal", diff, cx.param(np.array(0, it))))
    if left >= 0:
        conds.append(cx.op("less_equal", diff, cx.param(np.array(left, it))))
    if right >= 0:
        conds.append(cx.op("greater_equal", diff, cx.param(np.array(-right, it))))
    for c in conds:
        bias.add_allowed(cx.reshape(c, (batch, 1, sq, skv)))


def scaled_scores(cx: Ctx, q: Symbol, k: Symbol, scale: float | None) -> Symbol:
    """Q K^T * scale as (batch, q heads, q length, kv length), for 4-D Q and K whose head
    counts divide. Q and K are each scaled by sqrt(scale) first, as the spec says (it keeps
    the product in range); each group of query heads meets its KV head through a reshape."""
    b, hq, sq, d = cx.shape(q)
    hkv, skv = cx.shape(k)[1], cx.shape(k)[2]
    scale = 1 / math.sqrt(d) if scale is None else float(scale)
    if scale < 0:
        raise Unsupported(f"scale={scale}: Q and K are scaled by its square root")
    root = cx.param(np.array(math.sqrt(scale)), like=q, stem="sqrt_scale")
    qs, ks = cx.op("mul", q, root), cx.op("mul", k, root)
    qk = cx.op("gemm", cx.reshape(qs, (b, hkv, hq // hkv * sq, d)), ks, trans_b=True)
    return cx.reshape(qk, (b, hq, sq, skv))


def attend(cx: Ctx, probs: Symbol, v: Symbol) -> Symbol:
    """probs @ V as (batch, q heads, q length, v head size), each group of query heads
    reading its KV head's V."""
    b, hq, sq, skv = cx.shape(probs)
    hkv, dv = cx.shape(v)[1], cx.shape(v)[3]
    y = cx.op("gemm", cx.reshape(probs, (b, hkv, hq // hkv * sq, skv)), v)
    return cx.reshape(y, (b, hq, sq, dv))


def _window(at: Attrs) -> tuple[int, int]:
    left, right = int(at.get("left_window_size", -1)), int(at.get("right_window_size", -1))
    if left < -1 or right < -1:
        raise Invalid(f"left_window_size {left} and right_window_size {right} must be -1 or >= 0")
    return left, right


def attention(cx: Ctx, node: Any, at: Attrs) -> list:
    """Y, and present_key, present_value and qk_matmul_output where the model asks."""
    q, k, v = (cx.sym(n) for n in node.input[:3])
    dt = cx.dtype(q)
    if not dt.is_float or cx.dtype(k) is not dt or cx.dtype(v) is not dt:
        raise Unsupported(f"Q, K and V of {cx.dtype(q).name}, {cx.dtype(k).name} and "
                          f"{cx.dtype(v).name} (one float dtype is supported)")  # fmt: skip
    three_d = len(cx.shape(q)) == 3
    q, k, v = _heads(cx, at, q, k, v)
    check_shapes(cx, q, k, v)
    mask, past_k, past_v, nonpad = (optional_input(node, i) for i in (3, 4, 5, 6))
    if (past_k is None) != (past_v is None):
        raise Invalid("past_key and past_value must be given together")
    if nonpad is not None and past_k is not None:
        raise Invalid("nonpad_kv_seqlen cannot be combined with past_key and past_value")
    past = 0
    if past_k is not None:
        pk, pv = cx.sym(past_k), cx.sym(past_v)
        sk, sv = cx.shape(pk), cx.shape(pv)
        past = sk[2] if len(sk) == 4 and len(sv) == 4 and sk[2] == sv[2] else -1
        kk, vv = cx.shape(k), cx.shape(v)
        if past < 0 or (sk[:2], sk[3], sv[:2], sv[3]) != (kk[:2], kk[3], vv[:2], vv[3]):
            raise Invalid(f"past_key {cx.shape(pk)} and past_value {cx.shape(pv)} must be "
                          "(batch, kv_num_heads, past_sequence_length, head size)")  # fmt: skip
        k, v = cx.op("concat", pk, k, axis=2), cx.op("concat", pv, v, axis=2)
    b, hq, sq, _ = cx.shape(q)
    skv, dv = cx.shape(k)[2], cx.shape(v)[3]
    qk = scaled_scores(cx, q, k, at.get("scale"))
    raw = qk
    softcap = float(at.get("softcap", 0.0))
    if softcap > 0:
        cap = cx.param(np.array(softcap), like=q, stem="softcap")
        qk = cx.op("mul", cx.op("tanh", cx.op("div", qk, cap)), cap)

    causal = bool(at.get("is_causal", 0))
    left, right = _window(at)
    bias = _Bias(cx, q)
    full = (b, hq, sq, skv)
    if mask is not None:
        _mask(cx, bias, mask, full)
    if nonpad is not None:
        _nonpad(cx, bias, nonpad, sq, skv, causal, left, right)
    else:
        rows = np.arange(sq)[:, None] + past
        bias.add_const(_allowed(rows, np.arange(skv)[None, :], causal, left, right))
    total = bias.symbol()
    scores = qk if total is None else cx.op("add", qk, total)

    precision = at.get("softmax_precision")
    work = scores
    if precision is not None:
        pdt = device_dtype_name(int(precision), "softmax_precision")
        if not resolve_dtype(pdt).is_float:
            raise Invalid(f"softmax_precision={precision} is not a floating-point type")
        if pdt != dt.name:
            work = cx.op("cast", scores, to=pdt)
    probs = cx.op("softmax", work, axis=-1)
    masked = None if total is None else bias.masked_rows(total)
    if masked is not None:
        probs = cx.op("where", masked, cx.param(np.array(0), like=probs), probs)
    if cx.dtype(probs) is not dt:
        probs = cx.op("cast", probs, to=dt.name)

    y = attend(cx, probs, v)
    if three_d:
        y = cx.reshape(cx.op("transpose", y, perm=[0, 2, 1, 3]), (b, sq, hq * dv))
    outs: list = [y, k, v, _qk_output(node, at, softcap, raw, qk, scores, probs)]
    return [o if i < len(node.output) and node.output[i] else None for i, o in enumerate(outs)]


def _qk_output(node: Any, at: Attrs, softcap: float, raw: Symbol, capped: Symbol,
               scores: Symbol, probs: Symbol) -> Symbol | None:  # fmt: skip
    """The optional fourth output, as qk_matmul_output_mode says."""
    mode = int(at.get("qk_matmul_output_mode", 0))
    if mode not in _MODES:
        modes = ", ".join(f"{m} ({what})" for m, what in _MODES.items())
        raise Invalid(f"qk_matmul_output_mode={mode} is not one of {modes}")
    if len(node.output) < 4 or not node.output[3]:
        return None
    if mode == 0 and softcap > 0:
        # The spec says the raw product; onnx's reference (and its test data) gives it after
        # softcap. Refused until the two agree, rather than risk either number.
        raise Unsupported(
            "qk_matmul_output in mode 0 with softcap (the ONNX spec and its reference "
            "disagree on it); use mode 1 for the soft-capped value"
        )
    return (raw, capped, scores, probs)[mode]
