"""Elementwise unary kernels: one table row each, sharing infer, compute and cost."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...errors import DTypeError
from .. import dtypes as dt
from .. import parallel
from .common import streaming_cost
from .registry import Attr, KernelDef, OutSpec, elementwise, largest, register

# Float32 erf from two polynomial fits (tools/fit_erf.py makes and checks them: within 1.5 ulp
# of the exact erf, about 13x faster than evaluating a float64 formula and rounding):
#   |z| < 1:  erf(z) = z + z * P(z^2)                 P: _ERF_NEAR, lowest power first
#   |z| >= 1: erf(|z|) = 1 - exp(-z^2) * Q(1 / (1 + |z|/2))    Q: _ERFC_FAR
_ERF_NEAR = tuple(
    np.float32(c)
    for c in (
        0.12837916612625122,
        -0.3761262595653534,
        0.11283581703901291,
        -0.026853691786527634,
        0.005188118200749159,
        -0.0008008472505025566,
        7.848467794246972e-05,
    )
)
_ERFC_FAR = tuple(
    np.float32(c)
    for c in (
        -0.00015636521857231855,
        0.28494274616241455,
        0.2595127522945404,
        0.34834960103034973,
        -0.10460395365953445,
        0.5643070936203003,
        -0.4717738926410675,
        0.11947548389434814,
    )
)
_math_erf = np.frompyfunc(math.erf, 1, 1)


def _horner(t: np.ndarray, coefs: tuple) -> np.ndarray:
    acc = t * coefs[-1]
    for c in coefs[-2:0:-1]:
        acc += c
        acc *= t
    acc += coefs[0]
    return acc


def _erf_near(z: np.ndarray, u: np.ndarray) -> np.ndarray:
    """erf(z) = z + z * P(z^2) for |z| < 1 (u is z * z)."""
    acc = _horner(u, _ERF_NEAR)
    acc *= z
    acc += z
    return acc


def _erf_far(z: np.ndarray, u: np.ndarray) -> np.ndarray:
    """erf(z) = sign(z) * (1 - exp(-z^2) * Q(1 / (1 + |z|/2))) for |z| >= 1. Overwrites u."""
    t = np.abs(z)
    t *= np.float32(0.5)
    t += np.float32(1)
    acc = _horner(np.reciprocal(t, out=t), _ERFC_FAR)
    acc *= np.exp(np.negative(u, out=u), out=u)  # erfc(|z|)
    np.subtract(np.float32(1), acc, out=acc)
    return np.copysign(acc, z, out=acc)  # erf is odd


def _pick(mask: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a where mask, else b, into b. Bitwise, because numpy's masked selection (where,
    copyto) costs some twenty arithmetic passes on an unpredictable mask."""
    take_a = np.negative(mask.astype(np.uint32))  # all ones or all zeros
    a_bits, b_bits = a.view(np.uint32), b.view(np.uint32)
    np.bitwise_xor(a_bits, b_bits, out=a_bits)
    a_bits &= take_a
    b_bits ^= a_bits
    return b


def _erf(x: np.ndarray) -> np.ndarray:
    """erf without scipy: libm's for float64; for float32 (which half and float16 compute
    in) the fit of each element's range. When few elements need the other fit (activations
    are mostly |z| < 1), the common fit runs over the whole array and the other only over
    those elements, gathered and scattered back; otherwise both run everywhere and each
    element picks its own. An element's result is the same either way: the choice is one
    of speed, never of results."""
    if x.dtype == np.float64:
        return _math_erf(x).astype(np.float64)
    shape, z = x.shape, x.reshape(-1)  # ufuncs give scalars, not arrays, for 0-d input
    u = z * z
    near = u < 1  # |z| < 1 exactly (z * z rounds below 1 for every float32 below 1); NaN: far
    n_near = np.count_nonzero(near)
    if 4 * min(n_near, z.size - n_near) > z.size:  # gathering a quarter costs a whole fit
        near_fit = _erf_near(z, u)
        return _pick(near, near_fit, _erf_far(z, u)).reshape(shape)
    mostly_near = 2 * n_near >= z.size
    other = np.flatnonzero(~near if mostly_near else near)
    z_other, u_other = z[other], u[other]  # gathered before the full fit overwrites u
    if mostly_near:
        out = _erf_near(z, u)
        out[other] = _erf_far(z_other, u_other)
    else:
        out = _erf_far(z, u)
        out[other] = _erf_near(z_other, u_other)
    return out.reshape(shape)


def _gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        inner = x.dtype.type(math.sqrt(2.0 / math.pi)) * (x + x.dtype.type(0.044715) * x**3)
        return x.dtype.type(0.5) * x * (1 + np.tanh(inner))
    return x.dtype.type(0.5) * x * (1 + _erf(x / x.dtype.type(math.sqrt(2.0))))


_zeros: dict[np.dtype, np.ndarray] = {}


def _relu(x: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """max(x, 0) against an array of zeros: numpy's maximum runs its vector loop only when
    both operands are arrays (about 3x faster than against the scalar 0; same bits, NaN
    kept). The zeros are allocated once per dtype, grown as needed; never written, their
    pages stay the kernel's shared zero page."""
    zeros = _zeros.get(x.dtype)
    if zeros is None or zeros.size < x.size:
        zeros = np.zeros(max(x.size, 1 << 16), x.dtype)
        zeros.flags.writeable = False
        _zeros[x.dtype] = zeros
    return np.maximum(x, zeros[: x.size].reshape(x.shape), out=out)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # Split by sign so exp never overflows.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


_FLOAT = dt.FLOATS
_SIGNED = dt.SIGNED

# name: (function of (x, attrs, out), flops per element, dtypes allowed, one-line doc).
# `out` is the destination when it can take the result directly (else None): single-ufunc
# kernels write there instead of allocating and copying.
_OPS = {
    "relu": (lambda x, a, out: _relu(x, out), 1, _SIGNED, "max(x, 0)"),
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
    "neg": (lambda x, a, out: np.negative(x, out=out), 1, _SIGNED, "-x (integers wrap)"),
    "abs": (
        lambda x, a, out: np.abs(x, out=out),
        1,
        dt.NUMERIC,
        "|x| (signed integers wrap at the minimum)",
    ),
    "erf": (lambda x, a, out: _erf(x), 10, _FLOAT, "Gauss error function"),
    "reciprocal": (lambda x, a, out: np.reciprocal(x, out=out), 1, _FLOAT, "1 / x"),
    "sign": (lambda x, a, out: np.sign(x, out=out), 1, dt.NUMERIC, "-1, 0 or 1 (nan stays nan)"),
    "floor": (lambda x, a, out: np.floor(x, out=out), 1, _FLOAT, "largest integer <= x"),
    "ceil": (lambda x, a, out: np.ceil(x, out=out), 1, _FLOAT, "smallest integer >= x"),
    "round": (lambda x, a, out: np.rint(x, out=out), 1, _FLOAT, "nearest integer, ties to even"),
    "sin": (lambda x, a, out: np.sin(x, out=out), 8, _FLOAT, "sine (radians)"),
    "cos": (lambda x, a, out: np.cos(x, out=out), 8, _FLOAT, "cosine (radians)"),
    "tan": (lambda x, a, out: np.tan(x, out=out), 10, _FLOAT, "tangent (radians)"),
    "asin": (lambda x, a, out: np.arcsin(x, out=out), 10, _FLOAT, "arcsine (nan outside [-1, 1])"),
    "acos": (
        lambda x, a, out: np.arccos(x, out=out),
        10,
        _FLOAT,
        "arccosine (nan outside [-1, 1])",
    ),
    "atan": (lambda x, a, out: np.arctan(x, out=out), 10, _FLOAT, "arctangent"),
    "sinh": (lambda x, a, out: np.sinh(x, out=out), 6, _FLOAT, "hyperbolic sine"),
    "cosh": (lambda x, a, out: np.cosh(x, out=out), 6, _FLOAT, "hyperbolic cosine"),
    "asinh": (lambda x, a, out: np.arcsinh(x, out=out), 8, _FLOAT, "inverse hyperbolic sine"),
    "acosh": (
        lambda x, a, out: np.arccosh(x, out=out),
        8,
        _FLOAT,
        "inverse hyperbolic cosine (nan below 1)",
    ),
    "atanh": (
        lambda x, a, out: np.arctanh(x, out=out),
        8,
        _FLOAT,
        "inverse hyperbolic tangent (nan outside [-1, 1])",
    ),
    "softplus": (
        lambda x, a, out: np.logaddexp(x, x.dtype.type(0), out=out),
        4,
        _FLOAT,
        "log(1 + exp(x)), without overflow",
    ),
    "softsign": (lambda x, a, out: x / (1 + np.abs(x)), 3, _FLOAT, "x / (1 + |x|)"),
    "bitwise_not": (
        lambda x, a, out: np.invert(x, out=out),
        1,
        dt.INTEGERS,
        "~x, every bit flipped",
    ),
    "logical_not": (lambda x, a, out: np.logical_not(x, out=out), 1, (dt.BOOL,), "not x on bool"),
}
# Activations a matrix kernel (gemm, conv2d) may apply to its result before storing it,
# which a compiler pass fuses in from a following unary kernel.
EPILOGUES = ("none", "relu", "gelu", "sigmoid", "tanh", "silu")


def _elementwise(fn, x: np.ndarray, attrs: Mapping[str, Any], out: np.ndarray | None):
    """fn(x, attrs, out) into out (when it can take it), on several threads when large."""

    def rows(xr: np.ndarray, outr: np.ndarray) -> None:
        result = fn(xr, attrs, outr)
        if result is not outr:
            outr[...] = result

    return parallel.by_rows(rows, x, out, x.ndim)


def epilogue(name: str, y: np.ndarray) -> np.ndarray:
    """The result of a matrix kernel after its fused activation (in place when it can be)."""
    if name == "none":
        return y
    return _elementwise(_OPS[name][0], y, {"approximate": "none"}, y)


def epilogue_flops(name: str) -> int:
    return 0 if name == "none" else _OPS[name][1]


_ATTRS = {
    "gelu": {
        "approximate": Attr("str", "none", "'none' (erf) or 'tanh'", choices=("none", "tanh"))
    },
}


def make_unary(
    name: str,
    fn,
    flops: float,
    allowed: tuple,
    doc: str,
    attrs: Mapping[str, Attr] | None = None,
) -> KernelDef:
    """A one-input kernel computing fn(x, attrs, out) elementwise in x's compute dtype;
    `out` is the destination when it can take the result directly, else None."""

    def infer(ins, attrs):
        x = ins[0]
        if x.dtype not in allowed:
            raise DTypeError(
                f"kernel '{name}' takes {', '.join(d.name for d in allowed)}, not {x.dtype.name}"
            )
        return [OutSpec(x.shape, (x.dtype,))]

    def compute(ins, attrs, outs):
        return [_elementwise(fn, ins[0], attrs, outs[0].buf)]

    return KernelDef(
        name=name,
        doc=doc,
        inputs=("x",),
        outputs=("y",),
        attrs=dict(attrs or {}),
        infer=infer,
        compute=compute,
        cost=lambda ins, outs, attrs: streaming_cost(ins, outs, flops),
        reduction=elementwise,
        pointwise=True,
        # a function of one value: rounded as large as it is, or (erf, cos) as x is
        terms=largest,
    )


for _name, (_fn, _flops, _allowed, _doc) in _OPS.items():
    register(make_unary(_name, _fn, _flops, _allowed, _doc, _ATTRS.get(_name)))


# --- predicates: float in, bool out -------------------------------------------------------


def _isinf(x: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray:
    pos, neg = attrs["detect_positive"], attrs["detect_negative"]
    return (pos & (x == np.inf)) | (neg & (x == -np.inf))


# name: (function of (x, attrs), attribute schema, one-line doc)
_PREDICATES = {
    "isnan": (lambda x, attrs: np.isnan(x), {}, "x is nan, as bool"),
    "isinf": (
        _isinf,
        {
            "detect_positive": Attr("bool", True, "report +inf"),
            "detect_negative": Attr("bool", True, "report -inf"),
        },
        "x is an infinity (of the signs asked for), as bool",
    ),
}


def _make_predicate(name: str, fn, schema: dict, doc: str) -> KernelDef:
    def infer(ins, attrs):
        x = ins[0]
        if x.dtype not in _FLOAT:
            raise DTypeError(
                f"kernel '{name}' takes {', '.join(d.name for d in _FLOAT)}, not {x.dtype.name}"
            )
        return [OutSpec(x.shape, (dt.BOOL,))]

    return KernelDef(
        name=name,
        doc=doc,
        inputs=("x",),
        outputs=("y",),
        attrs=schema,
        infer=infer,
        compute=lambda ins, attrs, outs: [np.asarray(fn(ins[0], attrs))],
        cost=lambda ins, outs, attrs: streaming_cost(ins, outs),
    )


for _name, (_fn, _schema, _doc) in _PREDICATES.items():
    register(_make_predicate(_name, _fn, _schema, _doc))
