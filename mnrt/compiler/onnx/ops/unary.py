"""Elementwise ops of one operand: activations, IsInf, Clip, Cast, Identity and Dropout
(those that are one kernel each are in names.UNARY)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ....device.dtypes import DType
from ....device.dtypes import dtype as resolve_dtype
from ...builder import Symbol
from .. import names
from ..state import Attrs, Converter, Ctx, Invalid, Unsupported, device_dtype_name


def unary(kernel: str, **fixed: Any) -> Converter:
    return lambda cx, node, at: [cx.op(kernel, cx.sym(node.input[0]), **fixed)]


def gelu(cx: Ctx, node: Any, at: Attrs) -> list:
    return [cx.op("gelu", cx.sym(node.input[0]), approximate=at.get("approximate", "none"))]


def identity(cx: Ctx, node: Any, at: Attrs) -> list:
    return [cx.sym(node.input[0])]


def dropout(cx: Ctx, node: Any, at: Attrs) -> list:
    """Inference: the input, and a mask that keeps every element. Training mode (opset 12's
    training_mode input) with a ratio above 0 drops random elements, which the device has no
    generator for: refused, never silently skipped."""
    x = cx.sym(node.input[0])
    at.get("seed")
    ratio = at.get("ratio", 0.5)
    training = False
    if len(node.input) > 2 and node.input[2]:
        training = bool(np.asarray(cx.const(node.input[2], "training_mode")).reshape(-1)[0])
    if len(node.input) > 1 and node.input[1] and training:
        ratio = float(np.asarray(cx.const(node.input[1], "ratio")).reshape(-1)[0])
    if training and ratio > 0:
        raise Unsupported(
            f"training_mode=1 with ratio {ratio} drops random elements, and the device has "
            "no random generator; export the model for inference (training_mode=0)"
        )
    if len(node.output) < 2 or not node.output[1]:
        return [x]
    # The mask is bool from opset 10 on, of the input's type before.
    mask_dtype = "bool" if cx.opset >= 10 else cx.dtype(x).name
    return [x, cx.op("fill", shape=list(cx.shape(x)), value=1.0, dtype=mask_dtype)]


def activation(kernel: str, *attrs: str) -> Converter:
    """An ONNX activation of float inputs that is one device kernel (device/kernels/
    activation.py) of the same attributes, whose defaults are ONNX's: one kernel rather
    than the four to six of its formula, rounded once (bfloat16 and half rounded every
    step of the formula: Celu of bfloat16 lost two bits to exp(x) - 1)."""

    def imp(cx: Ctx, node: Any, at: Attrs) -> list:
        x = cx.sym(node.input[0])
        _float_only(cx, x, node.op_type)
        given = {name: float(at.get(name)) for name in attrs if at.has(name)}
        return [cx.op(kernel, x, **given)]

    return imp


leaky_relu = activation("leaky_relu", "alpha")  # QLinearLeakyRelu's table is made of it too


def prelu(cx: Ctx, node: Any, at: Attrs) -> list:
    """The prelu kernel (one, where its formula was three); an unsigned x is never below
    zero, so it is its own result. A slope of one per channel is laid along axis 1."""
    x, slope = cx.sym(node.input[0]), cx.sym(node.input[1])
    if cx.dtype(x).storage.kind == "u":
        return [x]
    xs, ss = cx.shape(x), cx.shape(slope)
    if len(ss) == 1 and len(xs) > 2 and ss[0] == xs[1] and ss[0] != xs[-1]:
        slope = cx.reshape(slope, (ss[0], *([1] * (len(xs) - 2))))
    return [cx.op("prelu", x, slope)]


def is_inf(cx: Ctx, node: Any, at: Attrs) -> list:
    x = cx.sym(node.input[0])
    pos, neg = bool(at.get("detect_positive", 1)), bool(at.get("detect_negative", 1))
    return [cx.op("isinf", x, detect_positive=pos, detect_negative=neg)]


def clip(cx: Ctx, node: Any, at: Attrs) -> list:
    """Bounds known at import time are parameters; others (PyTorch's clamp by a tensor's
    min or max) are device values, as maximum and minimum take them."""
    x = cx.sym(node.input[0])
    bounds = [at.get("min"), at.get("max")] if cx.opset < 11 else [None, None]
    if cx.opset >= 11:
        for i in (0, 1):
            name = node.input[i + 1] if len(node.input) > i + 1 else ""
            if name:
                bounds[i] = cx.consts[name] if cx.is_const(name) else cx.sym(name)
    for op, bound in zip(("maximum", "minimum"), bounds):
        if bound is not None:
            if not isinstance(bound, Symbol):
                bound = cx.param(np.asarray(bound), like=x)
            elif cx.shape(bound):
                raise Invalid(f"Clip's bounds must be scalars, not of shape {cx.shape(bound)}")
            x = cx.op(op, x, bound)
    return [x if bounds != [None, None] else cx.op("copy", x)]


def _cast_to(cx: Ctx, x: Symbol, to: str) -> list:
    """x as device dtype `to`: floats round to nearest even (bfloat16 and float16 too).
    Integer to integer wraps modulo the target's width, as numpy, C and onnxruntime do
    (the device's cast saturates, so a narrowing or a change of sign goes through `_wrap`)."""
    target = resolve_dtype(to)
    if target is cx.dtype(x):
        return [x]
    if cx.dtype(x).is_integer and target.is_integer and not _holds(target, cx.dtype(x)):
        return [_wrap(cx, x, target)]
    return [cx.op("cast", x, to=to)]


def cast(cx: Ctx, node: Any, at: Attrs) -> list:
    """saturate and round_mode concern only float8 and float4 targets, which have no device
    dtype: such a Cast is refused for its target whatever they say."""
    at.get("saturate"), at.get("round_mode")
    to = device_dtype_name(at.get("to"), "Cast")
    return _cast_to(cx, cx.sym(node.input[0]), to)


def cast_like(cx: Ctx, node: Any, at: Attrs) -> list:
    """A constant cast to a floating type stays a constant (a Pad value, a scale that a
    function body casts to its input's type must be known at import time), of the numpy
    type onnx gives that ONNX type (bfloat16: ml_dtypes', which rounds as the cast does and
    which the constant's later uses read as bfloat16)."""
    at.get("saturate"), at.get("round_mode")
    to = cx.dtype_name(node.input[1])
    if cx.is_const(node.input[0]) and resolve_dtype(to).is_float:
        elem = names.BY_DEVICE.get(to)
        numpy = elem.numpy if elem is not None else resolve_dtype(to).read_dtype
        return [np.asarray(cx.consts[node.input[0]]).astype(numpy)]
    return _cast_to(cx, cx.sym(node.input[0]), to)


def bit_cast(cx: Ctx, node: Any, at: Attrs) -> list:
    """BitCast (opset 26): the input's bits read as `to`, a type of the same width."""
    to = device_dtype_name(at.get("to"), "BitCast")
    x = cx.sym(node.input[0])
    if resolve_dtype(to).itemsize != cx.dtype(x).itemsize:
        raise Invalid(
            f"to is {to} ({resolve_dtype(to).itemsize * 8} bits) and the input "
            f"{cx.dtype(x).name} ({cx.dtype(x).itemsize * 8} bits): BitCast keeps the width"
        )
    return [cx.op("bitcast", x, to=to)]


def _holds(wide: DType, narrow: DType) -> bool:
    """Whether every value of integer dtype `narrow` is a value of `wide`."""
    a, b = np.iinfo(wide.storage), np.iinfo(narrow.storage)
    return a.min <= b.min and b.max <= a.max


def _wrap(cx: Ctx, x: Symbol, to: DType) -> Symbol:
    """Integer x as integer dtype `to`, modulo 2**bits: x is first made int64 (uint64's
    top bit becomes the sign, which is the same value modulo 2**64), then its low bits are
    kept and, for a signed target, sign-extended, in int64 where nothing overflows."""
    i64 = resolve_dtype("int64")

    def const(v: int, like: Symbol) -> Symbol:
        return cx.param(np.array(v), like=like)

    if cx.dtype(x).storage == np.uint64:
        low = cx.op("cast", cx.op("bitwise_and", x, const(2**63 - 1, x)), to="int64")
        top = cx.op("greater_equal", x, const(2**63, x))
        x = cx.op("where", top, cx.op("add", low, const(-(2**63), low)), low)
    elif cx.dtype(x) is not i64:
        x = cx.op("cast", x, to="int64")
    if to is i64:
        return x
    bits = 8 * to.itemsize
    if bits == 64:  # uint64: x mod 2**64 is x + 2**64 for negative x
        low = cx.op("cast", cx.op("bitwise_and", x, const(2**63 - 1, x)), to=to.name)
        neg = cx.op("less", x, const(0, x))
        return cx.op("where", neg, cx.op("add", low, const(2**63, low)), low)
    low = cx.op("bitwise_and", x, const(2**bits - 1, x))
    if to.is_signed:  # sign-extend the target's top bit
        half = const(2 ** (bits - 1), low)
        low = cx.op("sub", cx.op("bitwise_xor", low, half), half)
    return cx.op("cast", low, to=to.name)


def _scalar(cx: Ctx, value: float, like: Symbol) -> Symbol:
    return cx.param(np.array(value), like=like)


def _float_only(cx: Ctx, x: Symbol, op: str) -> None:
    if not cx.dtype(x).is_float:
        raise Unsupported(f"{op} of {cx.dtype(x).name}: only floating types")


def shrink(cx: Ctx, node: Any, at: Attrs) -> list:
    """x - bias above lambd, x + bias below -lambd, 0 between: the shrink kernel for
    floats; for integers, which it does not take, its formula, where the bounds and bias
    must be whole numbers (compared in the input's type they would change)."""
    x = cx.sym(node.input[0])
    lambd, bias = float(at.get("lambd", 0.5)), float(at.get("bias", 0.0))
    if cx.dtype(x).is_float:
        return [cx.op("shrink", x, lambd=lambd, bias=bias)]
    if not (lambd.is_integer() and bias.is_integer()):
        raise Unsupported(f"Shrink of {cx.dtype(x).name} with lambd={lambd}, bias={bias}: "
                          "integer inputs need whole-number lambd and bias")  # fmt: skip
    above = cx.op("sub", x, _scalar(cx, bias, x))
    below = cx.op("add", x, _scalar(cx, bias, x))
    zero = _scalar(cx, 0, x)
    inner = cx.op("where", cx.op("less", x, _scalar(cx, -lambd, x)), below, zero)
    return [cx.op("where", cx.op("greater", x, _scalar(cx, lambd, x)), above, inner)]


def swish(cx: Ctx, node: Any, at: Attrs) -> list:
    """x * sigmoid(alpha * x)."""
    x = cx.sym(node.input[0])
    _float_only(cx, x, "Swish")
    return [sigmoid_gated(cx, x, float(at.get("alpha", 1.0)))]


def sigmoid_gated(cx: Ctx, x: Symbol, alpha: float) -> Symbol:
    """x * sigmoid(alpha * x), the one silu kernel when alpha is 1: Swish, SwiGLU's gate
    and onnxruntime's QuickGelu are this with different alphas."""
    if alpha == 1.0:
        return cx.op("silu", x)
    return cx.op("mul", x, cx.op("sigmoid", cx.op("mul", x, _scalar(cx, alpha, x))))


def not_(cx: Ctx, node: Any, at: Attrs) -> list:
    x = cx.sym(node.input[0])
    if cx.dtype(x).name != "bool":
        raise Unsupported(f"Not of {cx.dtype(x).name}: only bool")
    return [cx.op("logical_not", x)]
