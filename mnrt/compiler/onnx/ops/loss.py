"""Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (log_softmax, then the
same negative log-likelihood), with class weights, ignore_index and the three reductions.

Each target picks its class's value with gather_elements along the class axis (1); an
ignored target is first pointed at class 0 (ignore_index may lie outside 0..C-1, where a
gather would be out of range) and then given weight 0, so it adds nothing to the sum and
nothing to the weight total that `mean` divides by, as the ONNX spec says.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid

_REDUCTIONS = ("none", "sum", "mean")


def _nll(cx: Ctx, node: Any, at: Attrs, logp: Symbol, target: Symbol) -> Symbol:
    """-logp[n, target[n, ...], ...] * weight[target], reduced as the node says."""
    reduction = at.get("reduction", "mean")
    if reduction not in _REDUCTIONS:
        raise Invalid(f"reduction {reduction!r} must be one of {', '.join(_REDUCTIONS)}")
    shape, tshape = cx.shape(logp), cx.shape(target)
    if len(shape) < 2 or tshape != (shape[0], *shape[2:]):
        raise Invalid(
            f"target of shape {tshape} does not match input of shape {shape}: it must be "
            "(N, d1, ...) for an input of (N, C, d1, ...)"
        )
    if not cx.dtype(target).is_integer:
        raise Invalid(f"target is {cx.dtype(target).name}; it must hold integer class indices")
    ignored = None
    if at.has("ignore_index"):
        ii = cx.param(np.array(int(at.get("ignore_index"))), like=target)
        ignored = cx.op("equal", target, ii)
        target = cx.op("where", ignored, cx.param(np.array(0), like=target), target)
    picked = cx.op("gather_elements", logp, cx.reshape(target, (shape[0], 1, *shape[2:])),
                   axis=1)  # fmt: skip
    loss = cx.op("neg", cx.reshape(picked, tshape))
    weight = None
    if len(node.input) > 2 and node.input[2]:
        w = cx.sym(node.input[2])
        if cx.shape(w) != (shape[1],):
            raise Invalid(
                f"weight has shape {cx.shape(w)}; it must be ({shape[1]},), one per class"
            )
        weight = cx.op("gather", w, target, axis=0)
    if ignored is not None:
        zero = cx.param(np.array(0), like=loss)
        weight = cx.op("where", ignored, zero, weight if weight is not None else
                       cx.param(np.ones(tshape), like=loss))  # fmt: skip
    if weight is not None:
        loss = cx.op("mul", loss, weight)
    if reduction == "none":
        return loss
    total = cx.op("sum", loss, axes=[], keepdims=False)
    if reduction == "sum":
        return total
    if weight is None:
        return cx.op("div", total, cx.param(np.array(int(np.prod(tshape))), like=total))
    return cx.op("div", total, cx.op("sum", weight, axes=[], keepdims=False))


def nll_loss(cx: Ctx, node: Any, at: Attrs) -> list:
    return [_nll(cx, node, at, cx.sym(node.input[0]), cx.sym(node.input[1]))]


def softmax_cross_entropy(cx: Ctx, node: Any, at: Attrs) -> list:
    """The loss, and the log-probabilities as the optional second output."""
    logp = cx.op("log_softmax", cx.sym(node.input[0]), axis=1)
    return [_nll(cx, node, at, logp, cx.sym(node.input[1])), logp]
