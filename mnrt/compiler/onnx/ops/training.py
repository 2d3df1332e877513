"""ai.onnx.preview.training's optimizer steps: Adagrad, Momentum and Adam update every
tensor they are given (X1..Xn with their gradients and accumulators) by one step. The
learning rate R and step count T must be known at import time (initializers or example
inputs): the step's scalar coefficients (a decayed rate, Adam's bias correction, whether
this is the first step) are worked out from them in float64, as ONNX's reference does, and
the device computes each tensor's update elementwise in its own dtype."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid


def adagrad(cx: Ctx, node: Any, at: Attrs) -> list:
    """X' = X - r / (1 + T * decay) * G' / (sqrt(H') + epsilon), H' = H + G'^2, where
    G' = norm_coefficient * X + G."""
    r, t = _rate_and_step(cx, node)
    decay, epsilon = float(at.get("decay_factor", 0.0)), float(at.get("epsilon", 0.0))
    norm = float(at.get("norm_coefficient", 0.0))
    rate = r / (1 + t * decay)
    xs, hs = [], []
    for x, g, h in _groups(cx, node, 3):
        grad = _regularized(cx, x, g, norm)
        h_new = cx.op("add", h, cx.op("mul", grad, grad))
        scale = _plus(cx, cx.op("sqrt", h_new), epsilon)
        xs.append(cx.op("sub", x, _times(cx, cx.op("div", grad, scale), rate)))
        hs.append(h_new)
    return [*xs, *hs]


def momentum(cx: Ctx, node: Any, at: Attrs) -> list:
    """V' = alpha * V + beta' * G' (beta' = 1 at step 0), then X' = X - r * V' (standard)
    or X - r * (G' + alpha * V') (nesterov), G' = norm_coefficient * X + G."""
    r, t = _rate_and_step(cx, node)
    alpha, beta = float(at.get("alpha")), float(at.get("beta"))
    norm, mode = float(at.get("norm_coefficient")), at.get("mode")
    if mode not in ("standard", "nesterov"):
        raise Invalid(f"mode={mode!r} must be 'standard' or 'nesterov'")
    beta = beta if t > 0 else 1.0
    xs, vs = [], []
    for x, g, v in _groups(cx, node, 3):
        grad = _regularized(cx, x, g, norm)
        v_new = cx.op("add", _times(cx, v, alpha), _times(cx, grad, beta))
        step = v_new if mode == "standard" else cx.op("add", grad, _times(cx, v_new, alpha))
        xs.append(cx.op("sub", x, _times(cx, step, r)))
        vs.append(v_new)
    return [*xs, *vs]


def adam(cx: Ctx, node: Any, at: Attrs) -> list:
    """V' = alpha * V + (1 - alpha) * G', H' = beta * H + (1 - beta) * G'^2, then
    X' = (1 - norm_coefficient_post) * (X - r' * V' / (sqrt(H') + epsilon)), with r'
    bias-corrected from step 1 on (r * sqrt(1 - beta^T) / (1 - alpha^T))."""
    r, t = _rate_and_step(cx, node)
    alpha, beta = float(at.get("alpha", 0.9)), float(at.get("beta", 0.999))
    epsilon, norm = float(at.get("epsilon", 0.0)), float(at.get("norm_coefficient", 0.0))
    post = float(at.get("norm_coefficient_post", 0.0))
    rate = r * math.sqrt(1 - beta**t) / (1 - alpha**t) if t > 0 else r
    xs, vs, hs = [], [], []
    for x, g, v, h in _groups(cx, node, 4):
        grad = _regularized(cx, x, g, norm)
        v_new = cx.op("add", _times(cx, v, alpha), _times(cx, grad, 1 - alpha))
        h_new = cx.op("add", _times(cx, h, beta), _times(cx, cx.op("mul", grad, grad), 1 - beta))
        scale = _plus(cx, cx.op("sqrt", h_new), epsilon)
        x_new = cx.op("sub", x, _times(cx, cx.op("div", v_new, scale), rate))
        xs.append(_times(cx, x_new, 1 - post))
        vs.append(v_new)
        hs.append(h_new)
    return [*xs, *vs, *hs]


def _rate_and_step(cx: Ctx, node: Any) -> tuple[float, int]:
    rate = np.asarray(cx.const(node.input[0], "the learning rate R"))
    step = np.asarray(cx.const(node.input[1], "the step count T"))
    if rate.size != 1 or step.size != 1:
        raise Invalid(f"R and T must be scalars, not of {rate.size} and {step.size} values")
    return float(rate.reshape(-1)[0]), int(step.reshape(-1)[0])


def _groups(cx: Ctx, node: Any, kinds: int) -> list[tuple[Symbol, ...]]:
    """The tensors an optimizer updates, each with its gradient and accumulators: the
    inputs after R and T are `kinds` lists of equal length (all X, all G, ...)."""
    rest = list(node.input[2:])
    if not rest or len(rest) % kinds:
        raise Invalid(f"{len(rest)} inputs after R and T: {kinds} lists of equal length "
                      "(the tensors, their gradients and accumulators)")  # fmt: skip
    n = len(rest) // kinds
    return list(zip(*(map(cx.sym, rest[i * n : (i + 1) * n]) for i in range(kinds))))


def _regularized(cx: Ctx, x: Symbol, g: Symbol, norm: float) -> Symbol:
    return g if norm == 0 else cx.op("add", _times(cx, x, norm), g)


def _times(cx: Ctx, s: Symbol, factor: float) -> Symbol:
    return s if factor == 1 else cx.op("mul", s, cx.param(np.array(factor), like=s))


def _plus(cx: Ctx, s: Symbol, term: float) -> Symbol:
    return s if term == 0 else cx.op("add", s, cx.param(np.array(term), like=s))
