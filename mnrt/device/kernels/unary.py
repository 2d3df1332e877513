"""Elementwise unary kernels: one table row each, sharing infer, compute and cost."""

from __future__ import annotations

import math

import numpy as np

from ...errors import DTypeError
from .. import dtypes as dt
from .common import streaming_cost
from .registry import Attr, KernelDef, OutSpec, register

_INV_SQRT_PI_2 = 2.0 / math.sqrt(math.pi)
_ERF_SERIES_TERMS = 14
_math_erf = np.frompyfunc(math.erf, 1, 1)
# Numerical Recipes' erfc fit: erfc(z) ~ t * exp(-z^2 + sum_i c_i t^i), t = 1/(1 + z/2).
_ERFC_FIT = (
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
)


def _erf(x: np.ndarray) -> np.ndarray:
    """erf without scipy: libm's erf for float64; for float32 a Maclaurin series below 0.5
    and Press et al.'s Chebyshev fit of erfc (relative error < 1.2e-7) above, both
    evaluated in float64 so the float32 result is within an ulp or two."""
    if x.dtype == np.float64:
        return _math_erf(x).astype(np.float64)
    shape, x = x.shape, x.reshape(-1)  # ufuncs give scalars, not arrays, for 0-d input
    z = np.abs(x.astype(np.float64))
    # In place on a few buffers: the same IEEE operations as t * exp(-z*z + fit(t)) with a
    # fresh array per step, so the same bits (a NaN's sign aside, which numpy's loops do not
    # keep consistently anyway), in about a quarter less time.
    t = 1.0 / (1.0 + 0.5 * z)
    acc = np.full_like(z, _ERFC_FIT[-1])
    for coef in reversed(_ERFC_FIT[:-1]):
        np.multiply(t, acc, out=acc)
        acc += coef
    z2 = z * z
    step = np.negative(z2)
    large = np.exp(np.add(step, acc, out=acc), out=acc)
    np.multiply(t, large, out=large)
    np.subtract(1.0, large, out=large)
    # Series: erf(z) = 2/sqrt(pi) * sum (-1)^n z^(2n+1) / (n! (2n+1))
    term = z.copy()
    small = z.copy()
    for n in range(1, _ERF_SERIES_TERMS):
        np.divide(z2, -n, out=step)
        term *= step
        np.divide(term, 2 * n + 1, out=step)
        small += step
    small *= _INV_SQRT_PI_2
    return (np.sign(x) * np.where(z < 0.5, small, large)).astype(x.dtype).reshape(shape)


def _gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        inner = x.dtype.type(math.sqrt(2.0 / math.pi)) * (x + x.dtype.type(0.044715) * x**3)
        return x.dtype.type(0.5) * x * (1 + np.tanh(inner))
    return x.dtype.type(0.5) * x * (1 + _erf(x / x.dtype.type(math.sqrt(2.0))))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # Split by sign so exp never overflows.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


_FLOAT = (dt.DOUBLE, dt.FLOAT, dt.HALF, dt.FLOAT16)
_SIGNED = (*_FLOAT, dt.INT32)

# name: (function of (x, attrs, out), flops per element, dtypes allowed, one-line doc).
# `out` is the destination when it can take the result directly (else None): single-ufunc
# kernels write there instead of allocating and copying.
_OPS = {
    "relu": (lambda x, a, out: np.maximum(x, 0, out=out), 1, _SIGNED, "max(x, 0)"),
    "gelu": (
        lambda x, a, out: _gelu(x, a["approximate"]),
        14,
        _FLOAT,
        "x * Phi(x), exact (erf) or tanh approximation",
    ),
    "silu": (lambda x, a, out: x * _sigmoid(x), 5, _FLOAT, "x * sigmoid(x)"),
    "sigmoid": (lambda x, a, out: _sigmoid(x), 4, _FLOAT, "1 / (1 + exp(-x))"),
    "tanh": (lambda x, a, out: np.tanh(x, out=out), 4, _FLOAT, "hyperbolic tangent"),
    "exp": (lambda x, a, out: np.exp(x, out=out), 2, _FLOAT, "e ** x"),
    "log": (
        lambda x, a, out: np.log(x, out=out),
        2,
        _FLOAT,
        "natural logarithm (nan below 0, -inf at 0)",
    ),
    "sqrt": (lambda x, a, out: np.sqrt(x, out=out), 2, _FLOAT, "square root (nan below 0)"),
    "rsqrt": (lambda x, a, out: np.reciprocal(np.sqrt(x), out=out), 3, _FLOAT, "1 / sqrt(x)"),
    "neg": (lambda x, a, out: np.negative(x, out=out), 1, _SIGNED, "-x (int32 wraps)"),
    "abs": (lambda x, a, out: np.abs(x, out=out), 1, _SIGNED, "|x| (int32 wraps at the minimum)"),
    "erf": (lambda x, a, out: _erf(x), 10, _FLOAT, "Gauss error function"),
    "reciprocal": (lambda x, a, out: np.reciprocal(x, out=out), 1, _FLOAT, "1 / x"),
}
# Activations a matrix kernel (gemm, conv2d) may apply to its result before storing it,
# which a compiler pass fuses in from a following unary kernel.
EPILOGUES = ("none", "relu", "gelu", "sigmoid", "tanh", "silu")


def epilogue(name: str, y: np.ndarray) -> np.ndarray:
    """The result of a matrix kernel after its fused activation (in place when it can be)."""
    if name == "none":
        return y
    return _OPS[name][0](y, {"approximate": "none"}, y)


def epilogue_flops(name: str) -> int:
    return 0 if name == "none" else _OPS[name][1]


_ATTRS = {
    "gelu": {
        "approximate": Attr("str", "none", "'none' (erf) or 'tanh'", choices=("none", "tanh"))
    },
}


def _make(name: str, fn, flops: int, allowed: tuple, doc: str) -> KernelDef:
    def infer(ins, attrs):
        x = ins[0]
        if x.dtype not in allowed:
            raise DTypeError(
                f"kernel '{name}' takes {', '.join(d.name for d in allowed)}, not {x.dtype.name}"
            )
        return [OutSpec(x.shape, (x.dtype,))]

    def compute(ins, attrs, outs):
        return [fn(ins[0], attrs, outs[0].buf)]

    return KernelDef(
        name=name,
        doc=doc,
        inputs=("x",),
        outputs=("y",),
        attrs=_ATTRS.get(name, {}),
        infer=infer,
        compute=compute,
        cost=lambda ins, outs, attrs: streaming_cost(ins, outs, flops),
    )


for _name, (_fn, _flops, _allowed, _doc) in _OPS.items():
    register(_make(_name, _fn, _flops, _allowed, _doc))
