"""Parameterised activations (ONNX's Elu, Selu, Celu, LeakyRelu, ThresholdedRelu,
HardSigmoid, HardSwish, Mish, Shrink) and clip: one table row each, on the unary kernels'
machinery. They compute in the operand's compute dtype (float32 for half, bfloat16 and
float16); attribute defaults are ONNX's."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ...errors import DeviceExecutionError
from .. import dtypes as dt
from .registry import Attr, register
from .unary import make_unary

_FLOAT = dt.FLOATS


def _f32(v: float) -> float:
    """A default as ONNX stores it: attributes are float32, so 0.2 means float32(0.2)."""
    return float(np.float32(v))


_SELU_ALPHA = 1.67326319217681884765625  # ONNX Selu's defaults (float32 values)
_SELU_GAMMA = 1.05070102214813232421875


def _scalar(x: np.ndarray, v: float):
    """An attribute as a scalar of x's type, so float32 arithmetic stays float32."""
    return x.dtype.type(v)


def _elu(x, a, out):
    neg = _scalar(x, a["alpha"]) * np.expm1(np.minimum(x, 0))
    return np.where(x > 0, x, neg)


def _selu(x, a, out):
    alpha, gamma = _scalar(x, a["alpha"]), _scalar(x, a["gamma"])
    return gamma * np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


def _celu(x, a, out):
    alpha = _scalar(x, a["alpha"])
    return np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(x / alpha))


def _hard_sigmoid(x, a, out):
    return np.clip(_scalar(x, a["alpha"]) * x + _scalar(x, a["beta"]), 0, 1)


def _hard_swish(x, a, out):
    # ONNX defines it as HardSigmoid with alpha = 1/6 (a float32 attribute) and beta 0.5.
    return x * np.clip(_scalar(x, _f32(1 / 6)) * x + _scalar(x, 0.5), 0, 1)


def _mish(x, a, out):
    return x * np.tanh(np.logaddexp(x, _scalar(x, 0)))


def _shrink(x, a, out):
    lambd, bias = _scalar(x, a["lambd"]), _scalar(x, a["bias"])
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, _scalar(x, 0)))


def _int_bound(name: str, bound: float, info: np.iinfo, inward: Callable) -> int:
    """A clip bound of an integer dtype: rounded inward, saturated at the dtype's range (an
    infinite bound included, either way); nan is no integer at all."""
    if math.isnan(bound):
        raise DeviceExecutionError(f"kernel 'clip': {name} is nan, which bounds no integer")
    if math.isinf(bound):
        return info.max if bound > 0 else info.min
    return max(info.min, min(info.max, inward(bound)))


def _clip(x: np.ndarray, a: Mapping[str, Any], out):
    """Bounds as the dtype holds them: an integer's bounds round inward (ceil of the
    minimum, floor of the maximum) and saturate at its range, so no value passes through
    float."""
    lo, hi = a["min"], a["max"]
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        lo, hi = _int_bound("min", lo, info, math.ceil), _int_bound("max", hi, info, math.floor)
    lo, hi = x.dtype.type(lo), x.dtype.type(hi)
    return np.minimum(np.maximum(x, lo), hi, out=out)


# name: (function of (x, attrs, out), flops per element, dtypes, one-line doc, attributes)
_OPS = {
    "elu": (_elu, 4, _FLOAT, "x if x > 0 else alpha * (exp(x) - 1)",
            {"alpha": Attr("float", 1.0, "scale of the negative part")}),
    "selu": (_selu, 5, _FLOAT, "gamma * (x if x > 0 else alpha * (exp(x) - 1))",
             {"alpha": Attr("float", _SELU_ALPHA, "scale of the negative part"),
              "gamma": Attr("float", _SELU_GAMMA, "scale of the result")}),
    "celu": (_celu, 5, _FLOAT, "max(0, x) + min(0, alpha * (exp(x / alpha) - 1))",
             {"alpha": Attr("float", 1.0, "scale of the negative part (nonzero)")}),
    "leaky_relu": (lambda x, a, out: np.where(x >= 0, x, _scalar(x, a["alpha"]) * x), 2, _FLOAT,
                   "x if x >= 0 else alpha * x",
                   {"alpha": Attr("float", _f32(0.01), "slope of the negative part")}),
    "thresholded_relu": (lambda x, a, out: np.where(x > _scalar(x, a["alpha"]), x, 0), 1,
                         _FLOAT, "x if x > alpha else 0",
                         {"alpha": Attr("float", 1.0, "threshold")}),
    "hard_sigmoid": (_hard_sigmoid, 3, _FLOAT, "max(0, min(1, alpha * x + beta))",
                     {"alpha": Attr("float", _f32(0.2), "slope"),
                      "beta": Attr("float", 0.5, "offset")}),
    "hard_swish": (_hard_swish, 4, _FLOAT, "x * max(0, min(1, x / 6 + 1 / 2))", {}),
    "mish": (_mish, 8, _FLOAT, "x * tanh(log(1 + exp(x)))", {}),
    "shrink": (_shrink, 3, _FLOAT, "x + bias below -lambd, x - bias above lambd, else 0",
               {"lambd": Attr("float", 0.5, "half-width of the zeroed band"),
                "bias": Attr("float", 0.0, "moved toward zero outside the band")}),
    "clip": (_clip, 2, dt.NUMERIC, "x limited to [min, max] (integers: bounds rounded inward)",
             {"min": Attr("float", -math.inf, "lower bound"),
              "max": Attr("float", math.inf, "upper bound")}),
}  # fmt: skip

for _name, (_fn, _flops, _allowed, _doc, _attrs) in _OPS.items():
    register(make_unary(_name, _fn, _flops, _allowed, _doc, _attrs))
