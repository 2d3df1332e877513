"""Normalisations: softmax, log_softmax, layernorm, rmsnorm, and scale_shift (an inference
BatchNormalization's one pass).

All are float-only. Half and IEEE float16 arrive widened to float32, so every statistic
(max, sum of exponentials, mean, variance) is taken in float32 and the result rounded once
by the store, as the device's float32 vector path does.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import KernelAttributeError, ShapeError
from .. import parallel
from .binary import broadcast_shape
from .common import normalize_axis, require_float, same_dtype, streaming_cost
from .registry import Attr, KernelDef, OutSpec, products, register
from .unary import EPILOGUES, epilogue, epilogue_flops


def _softmax(x: np.ndarray, axis: int, log: bool, out: np.ndarray) -> None:
    """Into out, shifted by the maximum so exp never overflows; a slice that is all -inf
    gives nan."""
    shifted = np.subtract(x, np.max(x, axis=axis, keepdims=True), out=out)
    if log:
        shifted -= np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    else:
        np.exp(shifted, out=shifted)
        shifted /= np.sum(shifted, axis=axis, keepdims=True)


_FLOPS = {"softmax": 5, "log_softmax": 5, "layernorm": 8, "rmsnorm": 5, "scale_shift": 2}


def _cost(name: str):
    return lambda ins, outs, attrs: streaming_cost(ins, outs, _FLOPS[name])


def _softmax_kernel(name: str, log: bool, doc: str) -> KernelDef:
    def infer(ins, attrs):
        x = ins[0]
        require_float(name, x.dtype)
        normalize_axis(name, attrs["axis"], len(x.shape))
        return [OutSpec(x.shape, (x.dtype,))]

    def compute(ins, attrs, outs):
        x = ins[0]
        if x.size == 0:
            return [np.empty_like(x)]
        with np.errstate(invalid="ignore", divide="ignore"):
            axis = normalize_axis(name, attrs["axis"], x.ndim)
            rows = lambda xr, outr: _softmax(xr, 1, log, outr)  # noqa: E731
            return [parallel.by_rows(rows, x, outs[0].buf, axis)]

    return KernelDef(
        name=name,
        doc=doc,
        inputs=("x",),
        outputs=("y",),
        attrs={"axis": Attr("int", -1, "axis the probabilities sum to one over")},
        infer=infer,
        compute=compute,
        cost=_cost(name),
        reduction=lambda ins, attrs: ins[0].shape[
            normalize_axis(name, attrs["axis"], len(ins[0].shape))
        ],
    )


def _norm_infer(name: str, params: tuple[str, ...]):
    """Infer for layernorm/rmsnorm: `params` names the optional per-feature inputs, each
    of which must have exactly the normalised shape x.shape[axis:]."""

    def infer(ins, attrs):
        x = ins[0]
        d = same_dtype(name, ins)
        require_float(name, d)
        axis = normalize_axis(name, attrs["axis"], len(x.shape))
        if attrs["epsilon"] < 0:
            raise KernelAttributeError(
                f"kernel '{name}': attribute 'epsilon' must be >= 0, got {attrs['epsilon']}"
            )
        for pname, p in zip(params, ins[1:], strict=False):
            if p is not None and p.shape != x.shape[axis:]:
                raise ShapeError(
                    f"kernel '{name}': {pname} must have the normalised shape "
                    f"{x.shape[axis:]} (x.shape[{axis}:]), got {p.shape}"
                )
        return [OutSpec(x.shape, (d,))]

    return infer


def _layernorm_rows(x, scale, bias, epsilon: float, out: np.ndarray) -> None:
    """Into out: each row of x (axis 0) normalised over all its other axes."""
    axes = tuple(range(1, x.ndim))
    centred = np.subtract(x, np.mean(x, axis=axes, keepdims=True), out=out)
    var = np.mean(np.square(centred), axis=axes, keepdims=True)
    np.divide(centred, np.sqrt(var + x.dtype.type(epsilon)), out=centred)
    if scale is not None:
        centred *= scale
    if bias is not None:
        centred += bias


def _rmsnorm_rows(x, scale, epsilon: float, out: np.ndarray) -> None:
    axes = tuple(range(1, x.ndim))
    ms = np.mean(np.square(x), axis=axes, keepdims=True)
    np.divide(x, np.sqrt(ms + x.dtype.type(epsilon)), out=out)
    if scale is not None:
        out *= scale


def _norm_compute(name: str, rows, n_params: int):
    """compute for layernorm/rmsnorm: `rows(x rows, *params, epsilon, out rows)`, params
    being the optional per-feature inputs (None when absent)."""

    def compute(ins, attrs, outs):
        x, params = ins[0], (*ins[1:], None, None)[:n_params]
        if x.size == 0:
            return [np.empty_like(x)]
        dest = outs[0].buf
        if dest is not None and any(p is not None and np.may_share_memory(dest, p) for p in params):
            dest = None  # scale or bias bound to the output: read them before it is written
        axis = normalize_axis(name, attrs["axis"], x.ndim)
        eps = attrs["epsilon"]
        fn = lambda xr, outr: rows(xr, *params, eps, outr)  # noqa: E731
        return [parallel.by_rows(fn, x, dest, axis)]

    return compute


def _normalised_length(ins, attrs) -> int:
    """Terms of a normalisation's statistics: every element from its axis to the end."""
    x = ins[0]
    return math.prod(x.shape[normalize_axis("norm", attrs["axis"], len(x.shape)) :])


_AXIS_DOC = "first normalised axis; the statistics run over it and every later axis"


register(
    _softmax_kernel(
        "softmax", False, "exp(x) / sum(exp(x)) along axis, shifted by the max for stability"
    )
)
register(
    _softmax_kernel(
        "log_softmax", True, "x - log(sum(exp(x))) along axis, shifted by the max for stability"
    )
)

register(
    KernelDef(
        name="layernorm",
        doc="(x - mean) / sqrt(var + epsilon) * scale + bias over axis..end",
        inputs=("x", "scale?", "bias?"),
        outputs=("y",),
        attrs={
            "axis": Attr("int", -1, _AXIS_DOC),
            "epsilon": Attr("float", 1e-5, "added to the variance before the square root"),
        },
        infer=_norm_infer("layernorm", ("scale", "bias")),
        compute=_norm_compute("layernorm", _layernorm_rows, 2),
        cost=_cost("layernorm"),
        reduction=_normalised_length,
    )
)

register(
    KernelDef(
        name="rmsnorm",
        doc="x / sqrt(mean(x^2) + epsilon) * scale over axis..end",
        inputs=("x", "scale?"),
        outputs=("y",),
        attrs={
            "axis": Attr("int", -1, _AXIS_DOC),
            "epsilon": Attr("float", 1e-6, "added to the mean square before the square root"),
        },
        infer=_norm_infer("rmsnorm", ("scale",)),
        compute=_norm_compute("rmsnorm", _rmsnorm_rows, 1),
        cost=_cost("rmsnorm"),
        reduction=_normalised_length,
    )
)


# --- scale_shift -----------------------------------------------------------------------


def _scale_shift_infer(ins, attrs):
    x, scale, shift = ins
    d = same_dtype("scale_shift", ins)
    require_float("scale_shift", d)
    if broadcast_shape("scale_shift", x.shape, scale.shape, shift.shape) != x.shape:
        raise ShapeError(
            f"kernel 'scale_shift': scale {scale.shape} and shift {shift.shape} must "
            f"broadcast to x's shape {x.shape}"
        )
    return [OutSpec(x.shape, (d,))]


def _scale_shift(ins, attrs, outs):
    """x * scale, then + shift, then the epilogue's activation, each rounded to the working
    precision as a mul, an add and an activation kernel would (a float32 result is theirs
    to the bit); half and float16 round once, when stored. A shift bound to the output is
    read before the product overwrites it."""
    x, scale, shift = ins
    dest = outs[0].buf
    if dest is not None and np.may_share_memory(dest, shift):
        dest = None
    y = np.multiply(x, scale, out=dest)
    return [epilogue(attrs["epilogue"], np.add(y, shift, out=y))]


register(
    KernelDef(
        name="scale_shift",
        doc="x * scale + shift, scale and shift broadcast to x (an inference BatchNormalization)",
        inputs=("x", "scale", "shift"),
        outputs=("y",),
        attrs={"epilogue": Attr("str", "none", "activation of the result", choices=EPILOGUES)},
        infer=_scale_shift_infer,
        compute=_scale_shift,
        cost=lambda ins, outs, attrs: streaming_cost(
            ins, outs, _FLOPS["scale_shift"] + epilogue_flops(attrs["epilogue"])
        ),
        reduction=lambda ins, attrs: 2,  # the product and the shift
        pointwise=True,
        terms=products,  # the larger of |x * scale| and |shift|
    )
)
