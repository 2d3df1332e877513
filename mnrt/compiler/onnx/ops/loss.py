"""Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

The device has no per-element gather, so picking each sample's class is an equality with a
constant class index along axis 1 and a sum over that axis of the one selected value (and
zeros), which is exact. A target outside 0..C-1 (ignore_index) selects nothing, so its loss
and weight are 0, as ONNX says for ignored targets.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid, Unsupported
from .common import optional_input


def _nll(cx: Ctx, node: Any, at: Attrs, logp: Symbol, target: Symbol,
         weight: Symbol | None) -> Symbol:  # fmt: skip
    shape, tshape = cx.shape(logp), cx.shape(target)
    if len(shape) < 2 or tshape != (shape[0], *shape[2:]):
        raise Invalid(f"target of shape {tshape} must be the input's {shape} without axis 1")
    if not cx.dtype(logp).is_float:
        raise Unsupported(f"{node.op_type} of {cx.dtype(logp).name}: only floating types")
    c, rest = shape[1], [1] * (len(shape) - 2)
    reduction = at.get("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise Invalid(f"reduction={reduction}: takes none, sum or mean")
    t = cx.reshape(target, (shape[0], 1, *shape[2:]))
    classes = cx.param(np.arange(c).reshape(1, c, *rest), like=target)
    chosen = cx.op("equal", t, classes)
    zero = cx.param(np.array(0), like=logp)
    picked = cx.op("sum", cx.op("where", chosen, logp, zero), axes=[1], keepdims=False)
    if weight is not None:
        wb = cx.reshape(weight, (1, c, *rest))
        w = cx.op("sum", cx.op("where", chosen, wb, zero), axes=[1], keepdims=False)
    else:
        one = cx.param(np.array(1), like=logp)
        w = cx.op("sum", cx.op("where", chosen, one, zero), axes=[1], keepdims=False)
    if at.has("ignore_index") and 0 <= int(at.get("ignore_index")) < c:
        ignored = cx.op(
            "equal", target, cx.param(np.array(int(at.get("ignore_index"))), like=target)
        )
        w = cx.op("where", ignored, zero, w)
    at.get("ignore_index")
    loss = cx.op("neg", cx.op("mul", picked, w))
    if reduction == "none":
        return loss
    total = cx.op("sum", loss, axes=[], keepdims=False)
    if reduction == "sum":
        return total
    return cx.op("div", total, cx.op("sum", w, axes=[], keepdims=False))


def _optional(cx: Ctx, node: Any, index: int) -> Symbol | None:
    name = optional_input(node, index)
    return None if name is None else cx.sym(name)


def nll_loss(cx: Ctx, node: Any, at: Attrs) -> list:
    logp, target = cx.sym(node.input[0]), cx.sym(node.input[1])
    return [_nll(cx, node, at, logp, target, _optional(cx, node, 2))]


def softmax_cross_entropy_loss(cx: Ctx, node: Any, at: Attrs) -> list:
    """ONNX's function body: NLL of log_softmax over the classes (axis 1); log_prob is the
    optional second output."""
    scores, labels = cx.sym(node.input[0]), cx.sym(node.input[1])
    logp = cx.op("log_softmax", scores, axis=1)
    loss = _nll(cx, node, at, logp, labels, _optional(cx, node, 2))
    return [loss, logp] if len(node.output) > 1 and node.output[1] else [loss]
