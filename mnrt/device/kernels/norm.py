"""Normalisations: softmax, log_softmax, layernorm and rmsnorm.

All are float-only. Half and IEEE float16 arrive widened to float32, so every statistic
(max, sum of exponentials, mean, variance) is taken in float32 and the result rounded once
by the store, as the device's float32 vector path does.
"""

from __future__ import annotations

import numpy as np

from ...errors import KernelAttributeError, ShapeError
from .common import normalize_axis, require_float, same_dtype, streaming_cost
from .registry import Attr, KernelDef, OutSpec, register


def _softmax(x: np.ndarray, axis: int, log: bool, out: np.ndarray | None) -> np.ndarray:
    """Shifted by the maximum so exp never overflows; a slice that is all -inf gives nan.
    Works in `out` (the destination, when it can take the result) instead of temporaries."""
    if x.size == 0:
        return np.empty_like(x)
    shifted = np.subtract(x, np.max(x, axis=axis, keepdims=True), out=out)
    if log:
        shifted -= np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
        return shifted
    e = np.exp(shifted, out=shifted)
    e /= np.sum(e, axis=axis, keepdims=True)
    return e


def _cost(flops: int):
    return lambda ins, outs, attrs: streaming_cost(ins, outs, flops)


def _softmax_kernel(name: str, log: bool, doc: str) -> KernelDef:
    def infer(ins, attrs):
        x = ins[0]
        require_float(name, x.dtype)
        normalize_axis(name, attrs["axis"], len(x.shape))
        return [OutSpec(x.shape, (x.dtype,))]

    def compute(ins, attrs, outs):
        x = ins[0]
        with np.errstate(invalid="ignore", divide="ignore"):
            return [_softmax(x, normalize_axis(name, attrs["axis"], x.ndim), log, outs[0].buf)]

    return KernelDef(
        name=name,
        doc=doc,
        inputs=("x",),
        outputs=("y",),
        attrs={"axis": Attr("int", -1, "axis the probabilities sum to one over")},
        infer=infer,
        compute=compute,
        cost=_cost(5),
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


def _layernorm(ins, attrs, outs):
    x, scale, bias = (*ins, None, None)[:3]
    if x.size == 0:
        return [np.empty_like(x)]
    axes = tuple(range(normalize_axis("layernorm", attrs["axis"], x.ndim), x.ndim))
    dest = outs[0].buf
    if dest is not None and any(p is not None and np.may_share_memory(dest, p) for p in ins[1:]):
        dest = None  # scale or bias bound to the output: read them before it is written
    centred = np.subtract(x, np.mean(x, axis=axes, keepdims=True), out=dest)
    var = np.mean(np.square(centred), axis=axes, keepdims=True)
    y = np.divide(centred, np.sqrt(var + x.dtype.type(attrs["epsilon"])), out=centred)
    if scale is not None:
        y *= scale
    if bias is not None:
        y += bias
    return [y]


def _rmsnorm(ins, attrs, outs):
    x, scale = (*ins, None)[:2]
    if x.size == 0:
        return [np.empty_like(x)]
    axes = tuple(range(normalize_axis("rmsnorm", attrs["axis"], x.ndim), x.ndim))
    ms = np.mean(np.square(x), axis=axes, keepdims=True)
    y = x / np.sqrt(ms + x.dtype.type(attrs["epsilon"]))
    if scale is not None:
        y *= scale
    return [y]


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
        compute=_layernorm,
        cost=_cost(8),
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
        compute=_rmsnorm,
        cost=_cost(5),
    )
)
