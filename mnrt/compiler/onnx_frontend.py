"""The ONNX frontend: an ONNX model becomes a compiler Graph of device kernels.

    graph = from_onnx("model.onnx")

Every ONNX op has one small importer, registered in `IMPORTERS` (op type -> function). An
importer gets the import context, the node and its attributes, and returns one result per
ONNX output: a builder Symbol (a device value) or a numpy array (a value known at import
time). Shape-only computations (Shape, Constant, ConstantOfShape, the shape and axes inputs
of Reshape, Slice, Squeeze, ...) are such constants: a node whose inputs are all constants is
evaluated with numpy (the ONNX reference evaluator) instead of becoming a device node, and a
constant becomes a parameter only when a device kernel reads it.

ONNX int64 becomes int32 on the device (MN-Core has no int64). An op, attribute or mode the
device cannot run is an `UnsupportedModelError` listing every such node of the model at once.
A model that breaks the ONNX spec (a value read before it is defined or defined twice, a
missing or mistyped attribute, sizes that do not add up, an axis out of range) is an
`InvalidModelError` listing every such problem, and the unsupported nodes with them.
"""

from __future__ import annotations

import itertools
import os
import stat
from collections.abc import Callable
from typing import Any

import numpy as np

from ..device.dtypes import DType
from ..device.dtypes import dtype as resolve_dtype
from ..device.spec import MNCORE2
from ..errors import InvalidArgumentError, MnrtError
from .builder import GraphBuilder, Symbol
from .ir import Graph

__all__ = [
    "IMPORTERS",
    "InvalidModelError",
    "UnsupportedModelError",
    "evaluator_unreliable_ops",
    "from_onnx",
    "load_model",
    "supported_ops",
]


class UnsupportedModelError(InvalidArgumentError):
    """The model uses ops or attributes the device cannot run; the message lists them all."""


class InvalidModelError(InvalidArgumentError):
    """The model is not valid ONNX (or not ONNX at all); the message lists every problem."""


class _Unsupported(Exception):
    """One node cannot be imported: the reason (an attribute, a mode, a rank...)."""


class _Invalid(Exception):
    """One node breaks the ONNX spec: what is wrong with it (an axis, a size, a length...)."""


# ONNX TensorProto element type -> device dtype name (int64 is int32 on the device).
_ONNX_DTYPES = {
    1: "float",
    2: "uint8",
    6: "int32",
    7: "int32",
    9: "bool",
    10: "float16",
    11: "double",
}
# Attributes that old opsets carry and that change nothing at inference.
_IGNORED_ATTRS = {"consumed_inputs", "is_test", "momentum", "stash_type", "training_mode"}
_RANDOM_OPS = ("Random", "Bernoulli", "Multinomial")
# Ops where ONNX's reference evaluator (onnx 1.23) departs from the spec in some cases:
# Softmax/LogSoftmax below opset 13 (it ignores the 2-D coercion), BatchNormalization 9..13
# (training statistics), LRN (sums over the batch), GlobalMaxPool (wrong axes unless 2-D),
# SAME_LOWER pools (wrong shape), grouped ConvTranspose (raises).
_EVALUATOR_UNRELIABLE = ("Softmax", "LogSoftmax", "BatchNormalization", "LRN", "GlobalMaxPool",
                         "MaxPool", "AveragePool", "ConvTranspose")  # fmt: skip
# Never evaluated on the host, even on constants: Dropout, and those.
_NO_FOLD = {"Dropout", *_EVALUATOR_UNRELIABLE}


def evaluator_unreliable_ops(model: Any) -> list[str]:
    """The op types of `model`'s nodes (subgraphs included) that ONNX's reference evaluator
    computes wrongly in the way they are used here: goldens then come from mnrt's own
    float64 run of the imported graph instead."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    found: set[str] = set()

    def attr(node: Any, name: str, default: Any) -> Any:
        from onnx import helper

        a = next((a for a in node.attribute if a.name == name), None)
        return default if a is None else helper.get_attribute_value(a)

    def wrong(node: Any) -> bool:
        op = node.op_type
        if op in ("Softmax", "LogSoftmax"):
            return opset < 13
        if op == "BatchNormalization":
            return opset < 14
        if op in ("MaxPool", "AveragePool"):
            return attr(node, "auto_pad", b"NOTSET") in (b"SAME_LOWER", "SAME_LOWER")
        if op == "ConvTranspose":
            return attr(node, "group", 1) != 1
        return op in ("LRN", "GlobalMaxPool")

    def walk(graph: Any) -> None:
        for node in graph.node:
            if node.domain in ("", "ai.onnx") and wrong(node):
                found.add(node.op_type)
            for a in node.attribute:
                for sub in (*([a.g] if a.HasField("g") else []), *a.graphs):
                    walk(sub)

    walk(model.graph)
    return sorted(found)


class _Attrs:
    """A node's attributes; records which ones the importer read, so the rest are errors."""

    def __init__(self, node: Any) -> None:
        from onnx import helper

        self.values = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        self.read: set[str] = set()

    def get(self, name: str, default: Any = None) -> Any:
        self.read.add(name)
        v = self.values.get(name, default)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, list):
            v = [x.decode() if isinstance(x, bytes) else x for x in v]
        return v

    def has(self, name: str) -> bool:
        return name in self.values

    def unread(self) -> list[str]:
        return sorted(set(self.values) - self.read - _IGNORED_ATTRS)


class _Ctx:
    """Import state: the builder, and what each ONNX value name stands for."""

    def __init__(self, name: str, opset: int) -> None:
        self.b = GraphBuilder(name)
        self.opset = opset
        self.syms: dict[str, Symbol] = {}
        self.consts: dict[str, np.ndarray] = {}
        self.opsets: list[Any] = []
        self.inferred: dict[str, tuple[tuple[int, ...], int]] = {}  # ONNX shape inference
        self.checker: Any = None  # onnx's CheckerContext for this model's opsets
        self._count = 0

    # --- values ---------------------------------------------------------------------------

    def is_const(self, name: str) -> bool:
        return name in self.consts

    def const(self, name: str, what: str = "this input") -> np.ndarray:
        if name not in self.consts:
            raise _Unsupported(f"{what} ('{name}') must be known at import time")
        return self.consts[name]

    def ints(self, name: str, what: str = "this input") -> list[int]:
        return [int(v) for v in np.asarray(self.const(name, what)).reshape(-1)]

    def fresh(self, stem: str) -> str:
        while True:
            self._count += 1
            name = f"{stem}_{self._count}"
            if name not in self.b.graph.values:
                return name

    def sym(self, name: str) -> Symbol:
        """The device value for an ONNX name, making a constant a parameter on first use."""
        if name not in self.syms:
            data = self.const(name)
            pname = name if name not in self.b.graph.values else self.fresh(name)
            self.syms[name] = self.b.param(pname, _device_array(data))
        return self.syms[name]

    def param(self, data: np.ndarray, like: Symbol | None = None, stem: str = "const") -> Symbol:
        """A new parameter, in the dtype of `like` when given."""
        data = np.asarray(data)
        if like is not None:
            dt = self.dtype(like)
            return self.b.param(self.fresh(stem), data.astype(dt.compute), dtype=dt)
        return self.b.param(self.fresh(stem), _device_array(data))

    def shape(self, x: str) -> tuple[int, ...]:
        """The shape of a device value (a Symbol) or of an ONNX name."""
        if isinstance(x, Symbol):
            return tuple(self.b.graph.values[x].shape)
        if x in self.consts:
            return tuple(self.consts[x].shape)
        return tuple(self.b.graph.values[self.sym(x)].shape)

    def dtype(self, s: Symbol) -> DType:
        return self.b.graph.values[s].dtype

    def op(self, kernel: str, /, *inputs: Symbol, **attrs: Any) -> Symbol:
        return self.b.node(kernel, *inputs, **attrs)

    def reshape(self, s: Symbol, shape: tuple[int, ...]) -> Symbol:
        if tuple(self.b.graph.values[s].shape) == tuple(shape):
            return s
        return self.op("reshape", s, shape=[int(d) for d in shape])


def _device_array(data: np.ndarray) -> np.ndarray:
    data = np.asarray(data)
    if data.dtype in (np.int64, np.uint64, np.int16, np.int8, np.uint16, np.uint32):
        i32 = np.iinfo(np.int32)
        if data.size and (data.min() < i32.min or data.max() > i32.max):
            # Wrapping would silently change the values (an index, a fill value...).
            raise _Unsupported(
                f"a constant of {data.dtype} holds values outside int32 "
                f"[{i32.min}, {i32.max}], and the device has no int64"
            )
        return data.astype(np.int32)
    return data


def _axis(axis: int, rank: int, what: str = "axis") -> int:
    """A possibly negative axis as 0..rank-1. Out of range is an error, not wrapped around:
    axis 5 of a rank-3 tensor is a mistake in the model, not axis 2."""
    if not -rank <= axis < rank:
        raise _Invalid(f"{what} {axis} is out of range for rank {rank} ({-rank}..{rank - 1})")
    return axis % rank


def _check_const_size(shape: tuple[int, ...], itemsize: int, what: str) -> None:
    """Refuse a constant the device could not hold before numpy tries to allocate it: a
    small shape input (ConstantOfShape([2**20, 2**20])) must not cost terabytes of host RAM."""
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise _Invalid(f"{what} has a negative size in its shape {tuple(dims)}")
    nbytes = int(np.prod(dims, dtype=object)) * itemsize
    if nbytes > MNCORE2.dram_bytes:
        raise _Invalid(
            f"{what} of shape {tuple(dims)} would take {nbytes} bytes, more than the "
            f"device's {MNCORE2.dram_bytes} bytes of DRAM; check the shape it is made from"
        )


def _device_dtype(elem_type: int, what: str) -> str:
    if elem_type not in _ONNX_DTYPES:
        from onnx import helper

        name = helper.tensor_dtype_to_np_dtype(elem_type) if elem_type else "undefined"
        raise _Unsupported(f"{what}: element type {name} has no device dtype")
    return _ONNX_DTYPES[elem_type]


Importer = Callable[[_Ctx, Any, _Attrs], list]
IMPORTERS: dict[str, Importer] = {}


def supported_ops() -> list[str]:
    return sorted(IMPORTERS)


# --- helpers shared by several importers -----------------------------------------------------


def _unary(kernel: str, **fixed: Any) -> Importer:
    return lambda cx, node, at: [cx.op(kernel, cx.sym(node.input[0]), **fixed)]


def _legacy_broadcast(cx: _Ctx, at: _Attrs, a: Symbol, b: Symbol) -> Symbol:
    """Opset < 7 binary ops: `broadcast=1, axis=k` aligns b with a's axis k."""
    if at.get("broadcast", 0) and at.has("axis"):
        ra, sb = len(cx.shape(a)), cx.shape(b)
        axis = _axis(at.get("axis"), ra)
        b = cx.reshape(b, (*sb, *([1] * (ra - axis - len(sb)))))
    return b


def _binary(kernel: str, cast_b: bool = False) -> Importer:
    def imp(cx: _Ctx, node: Any, at: _Attrs) -> list:
        a, b = cx.sym(node.input[0]), cx.sym(node.input[1])
        b = _legacy_broadcast(cx, at, a, b)
        if cast_b and cx.dtype(a) is not cx.dtype(b):
            b = cx.op("cast", b, to=cx.dtype(a).name)
        return [cx.op(kernel, a, b)]

    return imp


def _variadic(kernel: str, mean: bool = False) -> Importer:
    def imp(cx: _Ctx, node: Any, at: _Attrs) -> list:
        syms = [cx.sym(n) for n in node.input]
        y = syms[0]
        for s in syms[1:]:
            y = cx.op(kernel, y, s)
        if len(syms) == 1:
            y = cx.op("copy", y)
        if mean:
            y = cx.op("div", y, cx.param(np.array(len(syms)), like=y))
        return [y]

    return imp


def _axes(cx: _Ctx, node: Any, at: _Attrs, input_index: int = 1) -> list[int] | None:
    """Axes from the attribute (old opsets) or from an optional constant input."""
    if at.has("axes"):
        return [int(a) for a in at.get("axes")]
    at.get("axes")
    if len(node.input) > input_index and node.input[input_index]:
        return cx.ints(node.input[input_index], "axes")
    return None


def _reduce(kernel: str) -> Importer:
    def imp(cx: _Ctx, node: Any, at: _Attrs) -> list:
        x = cx.sym(node.input[0])
        axes = _axes(cx, node, at)
        keepdims = bool(at.get("keepdims", 1))
        if not axes:
            if at.get("noop_with_empty_axes", 0):
                return [cx.op("copy", x)]
            axes = []
        return [cx.op(kernel, x, axes=axes, keepdims=keepdims)]

    return imp


def _where_negative(cx: _Ctx, x: Symbol, neg: Symbol) -> Symbol:
    """x where x >= 0 else neg."""
    zero = cx.param(np.array(0), like=x)
    return cx.op("where", cx.op("less", x, zero), neg, x)


class _Window:
    """Per-spatial-axis kernel, stride, dilation and begin/end padding of a Conv or pool."""

    def __init__(self, at: _Attrs, size: tuple[int, ...], kernel: list[int]) -> None:
        r = len(size) - 2
        self.kernel = list(kernel)
        self.stride = list(at.get("strides") or [1] * r)
        self.dilation = list(at.get("dilations") or [1] * r)
        auto = at.get("auto_pad", "NOTSET")
        pads = (at.get("pads") if auto == "NOTSET" else None) or [0] * (2 * r)
        _check_window(r, self.kernel, self.stride, self.dilation, list(pads))
        if auto in ("NOTSET", "VALID"):
            self.begin, self.end = list(pads[:r]), list(pads[r:])
        elif auto in ("SAME_UPPER", "SAME_LOWER"):
            self.begin, self.end = [], []
            for n, k, s, d in zip(size[-r:], self.kernel, self.stride, self.dilation):
                total = max(0, (-(-n // s) - 1) * s + (k - 1) * d + 1 - n)
                self.begin.append(total // 2 if auto == "SAME_UPPER" else total - total // 2)
                self.end.append(total - self.begin[-1])
        else:
            raise _Unsupported(f"auto_pad={auto}")

    def attrs2d(self, axes: slice = slice(None), rows: bool = False) -> dict:
        """The device attributes for the spatial axes `axes` (one or two of them); one axis
        becomes the columns of the 2-D window, or its rows when `rows`."""
        k, s, d = self.kernel[axes], self.stride[axes], self.dilation[axes]
        b, e = self.begin[axes], self.end[axes]
        if len(k) == 1 and rows:
            k, s, d, b, e = [*k, 1], [*s, 1], [*d, 1], [*b, 0], [*e, 0]
        elif len(k) == 1:
            k, s, d, b, e = [1, *k], [1, *s], [1, *d], [0, *b], [0, *e]
        return {"kernel": k, "stride": s, "dilation": d, "padding": [b[0], b[1], e[0], e[1]]}


def _check_window(r: int, kernel: list, stride: list, dilation: list, pads: list) -> None:
    """One kernel size, stride and dilation per spatial axis, two pads: a wrong length would
    otherwise pool or convolve over other axes than the model says, or fail as an IndexError."""
    for what, v, n in (("kernel_shape", kernel, r), ("strides", stride, r),
                       ("dilations", dilation, r), ("pads", pads, 2 * r)):  # fmt: skip
        if len(v) != n:
            raise _Invalid(f"{what} {list(v)} has {len(v)} values; the input has {r} spatial "
                           f"dimensions, so it needs {n}")  # fmt: skip
    for what, v in (("kernel_shape", kernel), ("strides", stride), ("dilations", dilation)):
        if any(int(d) < 1 for d in v):
            raise _Invalid(f"{what} {list(v)} must hold sizes >= 1")
    if any(int(p) < 0 for p in pads):
        raise _Invalid(f"pads {list(pads)} must not be negative")


def _as4d(cx: _Ctx, x: Symbol) -> Symbol:
    """N,C,L as N,C,1,L so that a 2-D kernel applies."""
    s = cx.shape(x)
    return cx.reshape(x, (s[0], s[1], 1, s[2])) if len(s) == 3 else x


def _spatial_rank(cx: _Ctx, x: Symbol, what: str, allowed: tuple[int, ...] = (1, 2)) -> int:
    rank = len(cx.shape(x)) - 2
    if rank not in allowed:
        raise _Unsupported(f"{what} over {rank} spatial dimensions")
    return rank


def _from4d(cx: _Ctx, y: Symbol, rank: int) -> Symbol:
    if rank == 1:
        s = cx.shape(y)
        return cx.reshape(y, (s[0], s[1], s[3]))
    return y


def _only_first_output(node: Any, what: str) -> None:
    if any(node.output[1:]):
        raise _Unsupported(f"{what}: only the first output is supported")


def _softmax(kernel: str) -> Importer:
    def imp(cx: _Ctx, node: Any, at: _Attrs) -> list:
        x = cx.sym(node.input[0])
        shape = cx.shape(x)
        if cx.opset >= 13:
            return [cx.op(kernel, x, axis=int(at.get("axis", -1)))]
        axis = _axis(int(at.get("axis", 1)), max(len(shape), 1))
        flat = (int(np.prod(shape[:axis])), int(np.prod(shape[axis:])))
        return [cx.reshape(cx.op(kernel, cx.reshape(x, flat), axis=-1), shape)]

    return imp


def _register(names: str) -> Callable[[Importer], Importer]:
    def deco(fn: Importer) -> Importer:
        for name in names.split():
            IMPORTERS[name] = fn
        return fn

    return deco


# --- elementwise -----------------------------------------------------------------------------

IMPORTERS.update(
    {
        "Relu": _unary("relu"),
        "Sigmoid": _unary("sigmoid"),
        "Tanh": _unary("tanh"),
        "Exp": _unary("exp"),
        "Log": _unary("log"),
        "Sqrt": _unary("sqrt"),
        "Neg": _unary("neg"),
        "Abs": _unary("abs"),
        "Reciprocal": _unary("reciprocal"),
        "Erf": _unary("erf"),
        "Add": _binary("add"),
        "Sub": _binary("sub"),
        "Mul": _binary("mul"),
        "Div": _binary("div"),
        "Pow": _binary("pow", cast_b=True),
        "Equal": _binary("equal"),
        "Less": _binary("less"),
        "Greater": _binary("greater"),
        "LessOrEqual": _binary("less_equal"),
        "GreaterOrEqual": _binary("greater_equal"),
        "Max": _variadic("maximum"),
        "Min": _variadic("minimum"),
        "Sum": _variadic("add"),
        "Mean": _variadic("add", mean=True),
        "ReduceMean": _reduce("mean"),
        "ReduceSum": _reduce("sum"),
        "ReduceMax": _reduce("max"),
        "ReduceMin": _reduce("min"),
        "Softmax": _softmax("softmax"),
        "LogSoftmax": _softmax("log_softmax"),
    }
)


@_register("Gelu")
def _gelu(cx: _Ctx, node: Any, at: _Attrs) -> list:
    return [cx.op("gelu", cx.sym(node.input[0]), approximate=at.get("approximate", "none"))]


@_register("Identity Dropout")
def _identity(cx: _Ctx, node: Any, at: _Attrs) -> list:
    at.get("ratio"), at.get("seed")
    _only_first_output(node, node.op_type)
    return [cx.sym(node.input[0])]


@_register("Where")
def _where(cx: _Ctx, node: Any, at: _Attrs) -> list:
    return [cx.op("where", *(cx.sym(n) for n in node.input))]


@_register("LeakyRelu")
def _leaky_relu(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x = cx.sym(node.input[0])
    alpha = cx.param(np.array(at.get("alpha", 0.01)), like=x)
    return [_where_negative(cx, x, cx.op("mul", x, alpha))]


@_register("PRelu")
def _prelu(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x, slope = cx.sym(node.input[0]), cx.sym(node.input[1])
    xs, ss = cx.shape(x), cx.shape(slope)
    if len(ss) == 1 and len(xs) > 2 and ss[0] == xs[1] and ss[0] != xs[-1]:
        slope = cx.reshape(slope, (ss[0], *([1] * (len(xs) - 2))))
    return [_where_negative(cx, x, cx.op("mul", x, slope))]


@_register("Elu Selu")
def _elu(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x = cx.sym(node.input[0])
    selu = node.op_type == "Selu"
    alpha = at.get("alpha", 1.67326319217681884765625 if selu else 1.0)
    neg = cx.op("mul", cx.op("sub", cx.op("exp", x), cx.param(np.array(1), like=x)),
                cx.param(np.array(alpha), like=x))  # fmt: skip
    y = _where_negative(cx, x, neg)
    if selu:
        y = cx.op("mul", y, cx.param(np.array(at.get("gamma", 1.05070102214813232421875)), like=x))
    return [y]


@_register("Softplus")
def _softplus(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x = cx.sym(node.input[0])
    return [cx.op("log", cx.op("add", cx.op("exp", x), cx.param(np.array(1), like=x)))]


@_register("Softsign")
def _softsign(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x = cx.sym(node.input[0])
    return [cx.op("div", x, cx.op("add", cx.op("abs", x), cx.param(np.array(1), like=x)))]


@_register("HardSigmoid")
def _hard_sigmoid(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x = cx.sym(node.input[0])
    y = cx.op("add", cx.op("mul", x, cx.param(np.array(at.get("alpha", 0.2)), like=x)),
              cx.param(np.array(at.get("beta", 0.5)), like=x))  # fmt: skip
    y = cx.op("maximum", y, cx.param(np.array(0), like=x))
    return [cx.op("minimum", y, cx.param(np.array(1), like=x))]


@_register("Clip")
def _clip(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x = cx.sym(node.input[0])
    lo = at.get("min") if cx.opset < 11 else None
    hi = at.get("max") if cx.opset < 11 else None
    if cx.opset >= 11:
        if len(node.input) > 1 and node.input[1]:
            lo = cx.const(node.input[1], "min")
        if len(node.input) > 2 and node.input[2]:
            hi = cx.const(node.input[2], "max")
    if lo is not None:
        x = cx.op("maximum", x, cx.param(np.asarray(lo), like=x))
    if hi is not None:
        x = cx.op("minimum", x, cx.param(np.asarray(hi), like=x))
    return [x if lo is not None or hi is not None else cx.op("copy", x)]


@_register("Cast")
def _cast(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x = cx.sym(node.input[0])
    to = _device_dtype(at.get("to"), "Cast")
    if resolve_dtype(to) is cx.dtype(x):
        return [x]
    return [cx.op("cast", x, to=to)]


# --- linear algebra and convolution ----------------------------------------------------------


@_register("MatMul")
def _matmul(cx: _Ctx, node: Any, at: _Attrs) -> list:
    a, b = cx.sym(node.input[0]), cx.sym(node.input[1])
    sa, sb = cx.shape(a), cx.shape(b)
    if len(sa) == 1:
        a = cx.reshape(a, (1, sa[0]))
    if len(sb) == 1:
        b = cx.reshape(b, (sb[0], 1))
    y = cx.op("gemm", a, b)
    out = list(cx.shape(y))
    if len(sa) == 1:
        out.pop(-2)
    if len(sb) == 1:
        out.pop(-1)
    return [cx.reshape(y, tuple(out))]


@_register("Gemm")
def _gemm(cx: _Ctx, node: Any, at: _Attrs) -> list:
    ins = [cx.sym(n) for n in node.input if n]
    at.get("broadcast")
    return [
        cx.op(
            "gemm",
            *ins,
            trans_a=bool(at.get("transA", 0)),
            trans_b=bool(at.get("transB", 0)),
            alpha=float(at.get("alpha", 1.0)),
            beta=float(at.get("beta", 1.0)),
        )
    ]


def _conv2d(cx: _Ctx, x: Symbol, w: Symbol, bias: list[Symbol], win: _Window, groups: int,
            axes: slice = slice(None)) -> Symbol:  # fmt: skip
    a = win.attrs2d(axes)
    del a["kernel"]
    return cx.op("conv2d", x, w, *bias, groups=groups, **a)


@_register("Conv")
def _conv(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x = cx.sym(node.input[0])
    rank = _spatial_rank(cx, x, "Conv", (1, 2, 3))
    ws = cx.shape(node.input[1])
    if len(ws) != rank + 2:
        raise _Invalid(f"weights '{node.input[1]}' of shape {ws} must have rank {rank + 2} "
                       f"(M, C/group, kernel...) for an input of rank {rank + 2}")  # fmt: skip
    if at.get("kernel_shape") and list(at.get("kernel_shape")) != list(ws[2:]):
        raise _Invalid(f"kernel_shape {at.get('kernel_shape')} differs from the weights' "
                       f"kernel {list(ws[2:])}")  # fmt: skip
    win = _Window(at, cx.shape(x), list(ws[2:]))
    groups = int(at.get("group", 1))
    bias = [cx.sym(node.input[2])] if len(node.input) > 2 and node.input[2] else []
    if rank == 3:
        return [_conv3d(cx, x, cx.const(node.input[1], "Conv3d weights"), bias, win, groups)]
    w = cx.sym(node.input[1])
    if rank == 1:
        w = cx.reshape(w, (ws[0], ws[1], 1, ws[2]))
    return [_from4d(cx, _conv2d(cx, _as4d(cx, x), w, bias, win, groups), rank)]


def _conv3d(cx: _Ctx, x: Symbol, w: np.ndarray, bias: list[Symbol], win: _Window,
            groups: int) -> Symbol:  # fmt: skip
    """A 3-D convolution as one 2-D convolution per depth tap of the kernel, summed."""
    x = _pad_axis(cx, x, 2, win.begin[0], win.end[0], "constant", 0.0)
    n, c, depth, h, wd = cx.shape(x)
    kd, s, d = win.kernel[0], win.stride[0], win.dilation[0]
    out_d = (depth - (kd - 1) * d - 1) // s + 1
    if out_d < 1:
        raise _Invalid(f"the dilated kernel depth {(kd - 1) * d + 1} does not fit the padded "
                       f"input depth {depth}; pad the input or use a smaller kernel")  # fmt: skip
    y = None
    for tap in range(kd):
        start = tap * d
        xs = cx.op("slice", x, starts=[start], ends=[start + (out_d - 1) * s + 1], axes=[2],
                   steps=[s])  # fmt: skip
        xs = cx.reshape(cx.op("transpose", xs, perm=[0, 2, 1, 3, 4]), (n * out_d, c, h, wd))
        part = _conv2d(cx, xs, cx.param(w[:, :, tap], like=x), [], win, groups, slice(1, 3))
        y = part if y is None else cx.op("add", y, part)
    _, o, oh, ow = cx.shape(y)
    y = cx.op("transpose", cx.reshape(y, (n, out_d, o, oh, ow)), perm=[0, 2, 1, 3, 4])
    if bias:
        y = cx.op("add", y, cx.reshape(bias[0], (o, 1, 1, 1)))
    return y


@_register("ConvTranspose")
def _conv_transpose(cx: _Ctx, node: Any, at: _Attrs) -> list:
    """Zero-insert x by the stride, pad, and convolve with the flipped, transposed kernel."""
    x0 = cx.sym(node.input[0])
    rank = _spatial_rank(cx, x0, "ConvTranspose")
    if at.get("output_shape") or at.get("auto_pad", "NOTSET") != "NOTSET":
        raise _Unsupported("output_shape / auto_pad")
    w = cx.const(node.input[1], "ConvTranspose weights")
    at.get("kernel_shape")
    g = int(at.get("group", 1))
    if w.ndim != rank + 2 or g < 1 or w.shape[0] % g:
        raise _Invalid(f"weights of shape {w.shape} must be (C, M/group, kernel...) of rank "
                       f"{rank + 2}, with group={g} dividing C")  # fmt: skip
    cin, cog, *k = w.shape
    win = _Window(at, cx.shape(x0), k)
    extra = list(at.get("output_padding") or [0] * rank)
    # [Cin, Cout/g, k...] -> [Cout, Cin/g, k...], flipped in space.
    wt = w.reshape(g, cin // g, cog, *k).swapaxes(1, 2).reshape(g * cog, cin // g, *k)
    wt = np.ascontiguousarray(np.flip(wt, axis=tuple(range(2, 2 + rank))))
    x = _as4d(cx, x0)
    off = 2 + (2 - rank)
    pads = []
    for i in range(rank):
        x = _zero_insert(cx, x, off + i, win.stride[i])
        before = win.dilation[i] * (k[i] - 1) - win.begin[i]
        after = win.dilation[i] * (k[i] - 1) - win.end[i] + extra[i]
        x = _pad_axis(cx, x, off + i, min(before, 0), min(after, 0), "constant", 0.0)
        pads.append((max(before, 0), max(after, 0)))
    if rank == 1:
        wt, pads = wt.reshape(*wt.shape[:2], 1, wt.shape[2]), [(0, 0), *pads]
    dil = [1, *win.dilation] if rank == 1 else win.dilation
    bias = [cx.sym(node.input[2])] if len(node.input) > 2 and node.input[2] else []
    y = cx.op("conv2d", x, cx.param(wt, like=x0), *bias, stride=[1, 1], dilation=dil,
              padding=[pads[0][0], pads[1][0], pads[0][1], pads[1][1]], groups=g)  # fmt: skip
    return [_from4d(cx, y, rank)]


def _zero_insert(cx: _Ctx, x: Symbol, ax: int, s: int) -> Symbol:
    """s - 1 zeros between neighbours along ax: length n becomes (n - 1) * s + 1."""
    if s == 1:
        return x
    shape = list(cx.shape(x))
    n = shape[ax]
    col = cx.reshape(x, (*shape[: ax + 1], 1, *shape[ax + 1 :]))
    zeros = cx.op("fill", shape=[*shape[: ax + 1], s - 1, *shape[ax + 1 :]], value=0.0,
                  dtype=cx.dtype(x).name)  # fmt: skip
    y = cx.reshape(cx.op("concat", col, zeros, axis=ax + 1),
                   (*shape[:ax], n * s, *shape[ax + 1 :]))  # fmt: skip
    return cx.op("slice", y, starts=[0], ends=[(n - 1) * s + 1], axes=[ax])


def _pool(kernel: str) -> Importer:
    def imp(cx: _Ctx, node: Any, at: _Attrs) -> list:
        _only_first_output(node, node.op_type)
        x = cx.sym(node.input[0])
        rank = _spatial_rank(cx, x, node.op_type, (1, 2, 3))
        win = _Window(at, cx.shape(x), list(at.get("kernel_shape")))
        extra = {"ceil_mode": bool(at.get("ceil_mode", 0))}
        if kernel == "avg_pool2d":
            if any(d != 1 for d in win.dilation):
                raise _Unsupported("AveragePool with dilations")
            extra["count_include_pad"] = bool(at.get("count_include_pad", 0))
        elif at.get("storage_order", 0):
            raise _Unsupported("storage_order=1")

        def pool(v: Symbol, axes: slice, rows: bool = False) -> Symbol:
            a = win.attrs2d(axes, rows)
            if kernel == "avg_pool2d":
                del a["dilation"]
            return cx.op(kernel, v, **a, **extra)

        if rank < 3:
            return [_from4d(cx, pool(_as4d(cx, x), slice(None)), rank)]
        # Windows are boxes, so a 3-D max or mean is a 2-D one over H, W then one over D.
        n, c, d, h, w = cx.shape(x)
        y = pool(cx.reshape(x, (n, c * d, h, w)), slice(1, 3))
        oh, ow = cx.shape(y)[2:]
        y = pool(cx.reshape(y, (n, c, d, oh * ow)), slice(0, 1), rows=True)
        return [cx.reshape(y, (n, c, cx.shape(y)[2], oh, ow))]

    return imp


IMPORTERS["MaxPool"] = _pool("max_pool2d")
IMPORTERS["AveragePool"] = _pool("avg_pool2d")


@_register("GlobalAveragePool GlobalMaxPool")
def _global_pool(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x = cx.sym(node.input[0])
    rank = len(cx.shape(x))
    if node.op_type == "GlobalAveragePool" and rank == 4:
        return [cx.op("global_avg_pool2d", x)]
    kernel = "mean" if node.op_type == "GlobalAveragePool" else "max"
    return [cx.op(kernel, x, axes=list(range(2, rank)), keepdims=True)]


def _channel(cx: _Ctx, v: np.ndarray, rank: int, like: Symbol) -> Symbol:
    """A per-channel vector shaped to broadcast over N,C,... of the given rank."""
    return cx.param(np.asarray(v).reshape(-1, *([1] * (rank - 2))), like=like)


@_register("BatchNormalization")
def _batch_norm(cx: _Ctx, node: Any, at: _Attrs) -> list:
    _only_first_output(node, "BatchNormalization")
    if not at.get("spatial", 1):
        raise _Unsupported("spatial=0")
    x = cx.sym(node.input[0])
    scale, bias, mean, var = (cx.const(n, "BatchNormalization statistics").astype(np.float64)
                              for n in node.input[1:5])  # fmt: skip
    channels = cx.shape(x)[1] if len(cx.shape(x)) > 1 else 1
    stats = [v.shape for v in (scale, bias, mean, var)]
    if any(shape != (channels,) for shape in stats):
        raise _Invalid(f"scale, B, mean and var must each hold one value per channel "
                       f"({channels}); got shapes {stats}")  # fmt: skip
    s = scale / np.sqrt(var + float(at.get("epsilon", 1e-5)))
    t = bias - mean * s
    rank = len(cx.shape(x))
    return [cx.op("add", cx.op("mul", x, _channel(cx, s, rank, x)), _channel(cx, t, rank, x))]


@_register("InstanceNormalization")
def _instance_norm(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x = cx.sym(node.input[0])
    rank = len(cx.shape(x))
    y = cx.op("layernorm", x, axis=2, epsilon=float(at.get("epsilon", 1e-5)))
    y = cx.op("mul", y, _channel(cx, cx.const(node.input[1], "scale"), rank, x))
    return [cx.op("add", y, _channel(cx, cx.const(node.input[2], "bias"), rank, x))]


@_register("LayerNormalization")
def _layer_norm(cx: _Ctx, node: Any, at: _Attrs) -> list:
    _only_first_output(node, "LayerNormalization")
    ins = [cx.sym(n) for n in node.input if n]
    return [cx.op("layernorm", *ins, axis=int(at.get("axis", -1)),
                  epsilon=float(at.get("epsilon", 1e-5)))]  # fmt: skip


@_register("LRN")
def _lrn(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x = cx.sym(node.input[0])
    shape = cx.shape(x)
    if len(shape) < 3:
        raise _Unsupported("LRN needs N,C,... input")
    size = int(at.get("size"))
    n, c, rest = shape[0], shape[1], int(np.prod(shape[2:]))
    sq = cx.reshape(cx.op("mul", x, x), (n, 1, c, rest))
    lo = (size - 1) // 2
    window = cx.op("avg_pool2d", sq, kernel=[size, 1], stride=[1, 1],
                   padding=[lo, 0, size - 1 - lo, 0], count_include_pad=True)  # fmt: skip
    alpha, beta, bias = at.get("alpha", 1e-4), at.get("beta", 0.75), at.get("bias", 1.0)
    d = cx.op("add", cx.op("mul", cx.reshape(window, shape), cx.param(np.array(alpha), like=x)),
              cx.param(np.array(bias), like=x))  # fmt: skip
    return [cx.op("div", x, cx.op("pow", d, cx.param(np.array(beta), like=x)))]


# --- shapes ----------------------------------------------------------------------------------


def _resolve_shape(in_shape: tuple[int, ...], shape: list[int], allowzero: bool) -> list[int]:
    if shape.count(-1) > 1:
        raise _Invalid(f"shape {shape} has more than one -1; only one size can be inferred")
    if not allowzero and any(d == 0 for d in shape[len(in_shape) :]):
        raise _Invalid(f"shape {shape}: a 0 copies the input's size at its position, but the "
                       f"input {in_shape} has only {len(in_shape)} dimensions")  # fmt: skip
    out = [in_shape[i] if d == 0 and not allowzero else d for i, d in enumerate(shape)]
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1]))
        out[out.index(-1)] = int(np.prod(in_shape)) // max(known, 1)
    return out


@_register("Reshape")
def _reshape(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x = cx.sym(node.input[0])
    shape = at.get("shape") if cx.opset < 5 else cx.ints(node.input[1], "shape")
    return [cx.reshape(x, tuple(_resolve_shape(cx.shape(x), shape, at.get("allowzero", 0))))]


@_register("Flatten")
def _flatten(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x = cx.sym(node.input[0])
    s = cx.shape(x)
    axis = int(at.get("axis", 1))
    if not -len(s) <= axis <= len(s):  # axis may be the rank; a negative one counts from it
        raise _Invalid(f"axis {axis} is out of range for rank {len(s)} ({-len(s)}..{len(s)})")
    axis = axis + len(s) if axis < 0 else axis
    return [cx.reshape(x, (int(np.prod(s[:axis])), int(np.prod(s[axis:]))))]


@_register("Squeeze")
def _squeeze(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x = cx.sym(node.input[0])
    s = cx.shape(x)
    axes = _axes(cx, node, at)
    axes = {_axis(a, len(s)) for a in axes} if axes else {i for i, d in enumerate(s) if d == 1}
    wide = sorted(a for a in axes if s[a] != 1)
    if wide:
        raise _Invalid(f"axes {wide} of the input {s} are not of size 1; Squeeze removes "
                       "only axes of size 1")  # fmt: skip
    return [cx.reshape(x, tuple(d for i, d in enumerate(s) if i not in axes))]


@_register("Unsqueeze")
def _unsqueeze(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x = cx.sym(node.input[0])
    out = list(cx.shape(x))
    axes = _axes(cx, node, at) or []
    rank = len(out) + len(axes)
    where = sorted(_axis(a, rank) for a in axes)
    if len(set(where)) != len(where):
        raise _Invalid(f"axes {axes} name an axis twice")
    for a in where:
        out.insert(a, 1)
    return [cx.reshape(x, tuple(out))]


@_register("Transpose")
def _transpose(cx: _Ctx, node: Any, at: _Attrs) -> list:
    return [cx.op("transpose", cx.sym(node.input[0]), perm=list(at.get("perm") or []))]


@_register("Concat")
def _concat(cx: _Ctx, node: Any, at: _Attrs) -> list:
    axis = at.get("axis", 1 if cx.opset < 4 else None)  # Concat-1 defaulted it to 1
    if axis is None:
        raise _Invalid("Concat needs an axis attribute (from opset 4 on)")
    return [cx.op("concat", *(cx.sym(n) for n in node.input if n), axis=int(axis))]


def _clamp(v: int) -> int:
    return int(min(max(v, -(2**31) + 1), 2**31 - 1))


@_register("Slice")
def _slice(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x = cx.sym(node.input[0])
    if cx.opset < 10:
        starts, ends, axes, steps = at.get("starts"), at.get("ends"), at.get("axes"), None
    else:
        opt = [cx.ints(n, "Slice bounds") if n else None for n in list(node.input[1:]) + [""] * 4]
        starts, ends, axes, steps = opt[:4]
    return [cx.op("slice", x, starts=[_clamp(v) for v in starts], ends=[_clamp(v) for v in ends],
                  axes=list(axes or []), steps=list(steps or []))]  # fmt: skip


@_register("Gather")
def _gather(cx: _Ctx, node: Any, at: _Attrs) -> list:
    data, idx = cx.sym(node.input[0]), cx.sym(node.input[1])
    axis = int(at.get("axis", 0))
    if cx.is_const(node.input[1]):
        # Known indices are checked now: the device would only fail when the model runs.
        size = cx.shape(data)[_axis(axis, len(cx.shape(data)))]
        bad = sorted({int(i) for i in np.asarray(cx.consts[node.input[1]]).reshape(-1)
                      if not -size <= i < size})  # fmt: skip
        if bad:
            raise _Invalid(f"indices {bad[:8]} are out of range for axis {axis} of size "
                           f"{size} (valid: {-size}..{size - 1})")  # fmt: skip
    return [cx.op("gather", data, idx, axis=axis)]


@_register("Expand")
def _expand(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x = cx.sym(node.input[0])
    target = tuple(cx.ints(node.input[1], "shape"))
    try:
        shape = np.broadcast_shapes(cx.shape(x), target)
    except ValueError:
        raise _Invalid(f"the input's shape {cx.shape(x)} does not broadcast to {target}; "
                       "each size must be 1 or equal to the other") from None  # fmt: skip
    return [cx.op("expand", x, shape=list(shape))]


@_register("Tile")
def _tile(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x = cx.sym(node.input[0])
    s, reps = cx.shape(x), cx.ints(node.input[1], "repeats")
    if len(reps) != len(s) or any(r < 0 for r in reps):
        raise _Invalid(f"repeats {reps} must hold one count >= 0 per axis of the input {s}")
    inter = [v for d in s for v in (1, d)]
    big = [v for r, d in zip(reps, s) for v in (r, d)]
    y = cx.op("expand", cx.reshape(x, tuple(inter)), shape=big)
    return [cx.reshape(y, tuple(r * d for r, d in zip(reps, s)))]


@_register("Split")
def _split(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x = cx.sym(node.input[0])
    axis = _axis(int(at.get("axis", 0)), len(cx.shape(x)))
    dim = cx.shape(x)[axis]
    if at.has("split"):
        sizes = list(at.get("split"))
    elif len(node.input) > 1 and node.input[1]:
        sizes = cx.ints(node.input[1], "split")
    else:
        n = int(at.get("num_outputs", len(node.output)))
        if n < 1:
            raise _Invalid(f"num_outputs={n} must be at least 1")
        each = -(-dim // n)
        sizes = [max(min(each, dim - i * each), 0) for i in range(n)]
    at.get("split"), at.get("num_outputs")
    if len(sizes) != len(node.output) or any(v < 0 for v in sizes) or sum(sizes) != dim:
        raise _Invalid(f"split sizes {sizes} must be {len(node.output)} sizes >= 0 (one per "
                       f"output) that add up to {dim}, the size of axis {axis}")  # fmt: skip
    starts = np.cumsum([0, *sizes])
    return [cx.op("slice", x, starts=[int(a)], ends=[int(b)], axes=[axis])
            for a, b in itertools.pairwise(starts)]  # fmt: skip


@_register("Pad")
def _pad(cx: _Ctx, node: Any, at: _Attrs) -> list:
    x = cx.sym(node.input[0])
    rank = len(cx.shape(x))
    mode = at.get("mode", "constant")
    if cx.opset < 11:
        pads, value = list(at.get("pads") or at.get("paddings")), float(at.get("value", 0.0))
    else:
        pads = cx.ints(node.input[1], "pads")
        value = 0.0
        if len(node.input) > 2 and node.input[2]:
            value = float(np.asarray(cx.const(node.input[2], "constant_value")).reshape(-1)[0])
    axes = list(range(rank))
    if len(node.input) > 3 and node.input[3]:
        axes = [_axis(a, rank, "Pad axis") for a in cx.ints(node.input[3], "axes")]
    if mode not in ("constant", "reflect", "edge"):
        raise _Unsupported(f"mode={mode}")
    n = len(axes)
    if len(pads) != 2 * n:
        raise _Invalid(f"pads {pads} has {len(pads)} values; padding {n} axes needs {2 * n} "
                       "(all the begins, then all the ends)")  # fmt: skip
    for i, ax in enumerate(axes):
        x = _pad_axis(cx, x, ax, pads[i], pads[i + n], mode, value)
    return [x if any(pads) else cx.op("copy", x)]


def _pad_axis(cx: _Ctx, x: Symbol, ax: int, before: int, after: int, mode: str,
              value: float) -> Symbol:  # fmt: skip
    if before < 0 or after < 0:
        dim = cx.shape(x)[ax]
        if dim + min(before, 0) + min(after, 0) < 0:
            raise _Invalid(f"negative pads {before}, {after} remove more than the {dim} "
                           f"elements of axis {ax}")  # fmt: skip
        x = cx.op("slice", x, starts=[max(-before, 0)], ends=[dim - max(-after, 0)], axes=[ax])
        before, after = max(before, 0), max(after, 0)
    if not before and not after:
        return x
    dim = cx.shape(x)[ax]

    def piece(count: int, at_start: bool) -> Symbol:
        shape = list(cx.shape(x))
        if mode == "constant":
            shape[ax] = count
            return cx.op("fill", shape=shape, value=value, dtype=cx.dtype(x).name)
        if mode == "edge":
            edge = cx.op("slice", x, starts=[0 if at_start else dim - 1],
                         ends=[1 if at_start else dim], axes=[ax])  # fmt: skip
            shape[ax] = count
            return cx.op("expand", edge, shape=shape)
        if count >= dim:
            raise _Unsupported("reflect padding as wide as the axis")
        if at_start:
            return cx.op("slice", x, starts=[count], ends=[0], axes=[ax], steps=[-1])
        end = dim - 2 - count if dim - 2 - count >= 0 else -dim - 1  # -1 would mean the last
        return cx.op("slice", x, starts=[dim - 2], ends=[end], axes=[ax], steps=[-1])

    parts = ([piece(before, True)] if before else []) + [x]
    parts += [piece(after, False)] if after else []
    return cx.op("concat", *parts, axis=ax)


# --- import-time constants -------------------------------------------------------------------


@_register("Constant")
def _constant(cx: _Ctx, node: Any, at: _Attrs) -> list:
    from onnx import numpy_helper

    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if at.has(key):
            v = at.get(key)
            if key == "value":
                return [numpy_helper.to_array(v)]
            dt = np.float32 if "float" in key else np.int64
            return [np.asarray(v, dtype=dt)]
    raise _Unsupported(f"attribute {sorted(at.values)}")


@_register("Shape")
def _shape(cx: _Ctx, node: Any, at: _Attrs) -> list:
    s = np.asarray(cx.shape(node.input[0]), dtype=np.int64)
    start, end = at.get("start", 0), at.get("end", None)
    return [s[start:end]]


@_register("Size")
def _size(cx: _Ctx, node: Any, at: _Attrs) -> list:
    return [np.asarray(int(np.prod(cx.shape(node.input[0]))), dtype=np.int64)]


@_register("ConstantOfShape")
def _constant_of_shape(cx: _Ctx, node: Any, at: _Attrs) -> list:
    from onnx import numpy_helper

    shape = cx.ints(node.input[0], "shape")
    v = at.get("value")
    fill = numpy_helper.to_array(v).reshape(-1) if v is not None else np.zeros(1, np.float32)
    _check_const_size(tuple(shape), fill.dtype.itemsize, "ConstantOfShape's output")
    return [np.full(shape, fill[0], dtype=fill.dtype)]


# --- the driver ------------------------------------------------------------------------------


def _fold(node: Any, inputs: list[np.ndarray], opsets: list[Any]) -> list[np.ndarray] | None:
    """Evaluate one node whose inputs are all constants with the ONNX reference evaluator."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [n for n in node.input if n]
    ins = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in zip(names, inputs)
    ]
    outs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
    graph = helper.make_graph([node], "fold", ins, outs)
    try:
        model = helper.make_model(graph, opset_imports=opsets)
        results = ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))
    except Exception:
        return None
    return [np.asarray(r) for r in results]


class _Problems:
    """What is wrong with a model, collected over all its nodes so one error lists it all."""

    def __init__(self) -> None:
        self.invalid: list[str] = []
        self.unsupported: list[str] = []

    def raise_any(self, name: str) -> None:
        if self.invalid:
            extra = f" and {len(self.unsupported)} unsupported" if self.unsupported else ""
            raise InvalidModelError(
                f"ONNX model '{name}' has {len(self.invalid)} invalid{extra} node(s) (fix the "
                "model; onnx.checker.check_model explains ONNX's rules):\n  "
                + "\n  ".join(self.invalid + self.unsupported)
            )
        if self.unsupported:
            raise UnsupportedModelError(
                f"ONNX model '{name}' has {len(self.unsupported)} unsupported node(s):\n  "
                + "\n  ".join(self.unsupported)
            )


def _label(node: Any) -> str:
    return f"{node.name or '(unnamed)'} ({node.op_type})"


def _spec_problem(node: Any, checker_ctx: Any) -> str | None:
    """What ONNX's own node checker finds wrong with a node of a known op (the number of
    inputs, a missing or mistyped attribute), or None. Ops ONNX does not know at this opset
    are left to the importers, which list them as unsupported unless they can import them."""
    from onnx import AttributeProto, checker, defs

    if not defs.has(node.op_type, node.domain):
        return None
    if any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute):
        return None  # the checker would not see the outer values its subgraphs may read
    try:
        checker.check_node(node, checker_ctx)
    except checker.ValidationError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return None if first.startswith("No Op registered") else first
    return None


def _check_node(cx: _Ctx, node: Any, problems: _Problems, poisoned: set[str]) -> None:
    label = _label(node)
    importer = IMPORTERS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    ins = [n for n in node.input if n]
    spec = _spec_problem(node, cx.checker)
    if spec is not None:
        problems.invalid.append(f"{label}: {spec}")
        poisoned.update(node.output)
        return
    if any(n in poisoned for n in ins):
        if importer is None:
            problems.unsupported.append(f"{label}: op {node.op_type} is not supported")
        poisoned.update(node.output)
        return
    if ins and all(cx.is_const(n) for n in ins) and node.op_type not in _NO_FOLD \
            and not node.op_type.startswith(_RANDOM_OPS):  # fmt: skip
        try:
            _check_folded_size(cx, node)
        except _Invalid as e:
            problems.invalid.append(f"{label}: {e}")
            poisoned.update(node.output)
            return
        folded = _fold(node, [cx.consts[n] for n in ins], cx.opsets)
        if folded is not None:
            for name, v in zip([n for n in node.output if n], folded):
                cx.consts[name] = v
            return
    if importer is None:
        problems.unsupported.append(f"{label}: op {node.op_type} is not supported")
        poisoned.update(node.output)
        return
    results = _run_importer(cx, node, importer, label, problems)
    if results is None:
        poisoned.update(node.output)
        return
    for name, r in zip(node.output, results):
        if not name:
            continue
        if isinstance(r, np.ndarray):
            cx.consts[name] = r
        else:
            cx.syms[name] = r


def _run_importer(cx: _Ctx, node: Any, importer: Importer, label: str,
                  problems: _Problems) -> list | None:  # fmt: skip
    """The importer's results, or None with the reason recorded in `problems`. A Python
    error of an importer (an index past a list, a bad reshape) means the node is not what
    the ONNX spec allows in some way no check caught: it is reported as such, with the node,
    never as a traceback. Kernel shape and dtype errors (MnrtError) propagate as they are."""
    at = _Attrs(node)
    try:
        results = importer(cx, node, at)
        extra = at.unread()
        if extra:
            raise _Unsupported("attribute " + ", ".join(extra) + " is not supported")
        return results
    except _Unsupported as e:
        problems.unsupported.append(f"{label}: {e}")
    except _Invalid as e:
        problems.invalid.append(f"{label}: {e}")
    except MnrtError:
        raise
    except (ArithmeticError, IndexError, KeyError, TypeError, ValueError) as e:
        problems.invalid.append(
            f"{label}: cannot import it ({type(e).__name__}: {e}); check its attributes "
            "and input shapes against the ONNX spec"
        )
    return None


def _check_folded_size(cx: _Ctx, node: Any) -> None:
    """Before a node of constants is evaluated on the host, refuse outputs that ONNX shape
    inference says the device could not hold (Range to 2**40, Expand to a huge shape)."""
    from onnx import helper

    for name in node.output:
        if name in cx.inferred:
            shape, elem_type = cx.inferred[name]
            itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).itemsize
            _check_const_size(shape, itemsize, f"'{name}'")


def _import_onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise InvalidArgumentError(
            "the ONNX frontend needs the onnx package: pip install mnrt[onnx]"
        ) from None
    return onnx


def load_model(path: str | os.PathLike) -> Any:
    """Read an ONNX file and its external data. A file that is missing, empty, truncated or
    not ONNX, or whose external data is missing, is an InvalidModelError naming the file."""
    onnx = _import_onnx()
    path = os.fspath(path)
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):  # a FIFO would wait for a writer, /dev/zero never end
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise InvalidModelError(f"{path} is {kind}, not an ONNX model")
        empty = os.path.getsize(path) == 0
        model = None if empty else onnx.load(path)
    except OSError as e:
        raise InvalidModelError(f"cannot read ONNX model {path}: {e.strerror or e}") from None
    except Exception as e:  # protobuf's DecodeError, onnx's ValidationError of external data
        raise InvalidModelError(
            f"{path} is not a readable ONNX model ({type(e).__name__}: {e}); give a complete "
            ".onnx file, with its external data files where the model says they are"
        ) from None
    if model is None:
        raise InvalidModelError(f"{path} is empty, not an ONNX model")
    return model


def _check_opset(model: Any) -> int:
    """The default domain's opset; one newer than the installed onnx knows is refused (its
    ops' meaning is unknown here), as is a version below 1."""
    from onnx import defs

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    newest = defs.onnx_opset_version()
    if not 1 <= opset <= newest:
        raise InvalidModelError(
            f"ONNX model imports opset {opset} of the default domain; the installed onnx "
            f"knows opsets 1..{newest}: export the model with an opset in that range"
        )
    return opset


def _check_structure(g: Any) -> None:
    """Every value defined once, before any node reads it; every graph output defined and
    listed once. Checked up front: the importers assume it."""
    problems = []
    defined = {i.name for i in g.initializer} | {i.name for i in g.input}
    for node in g.node:
        for name in node.input:
            if name and name not in defined:
                problems.append(
                    f"{_label(node)} reads '{name}', which no graph input, initializer or "
                    "earlier node defines (nodes must be in topological order, without cycles)"
                )
        for name in node.output:
            if name and name in defined:
                problems.append(f"{_label(node)} defines '{name}' again; a value has one producer")
            defined.add(name)
    listed: set[str] = set()
    for out in g.output:
        if out.name in listed:
            problems.append(f"graph output '{out.name}' is listed twice")
        elif out.name not in defined:
            problems.append(f"graph output '{out.name}' is not defined by any node or input")
        listed.add(out.name)
    if not g.output:
        problems.append("it declares no graph outputs, so there is nothing to compute")
    if problems:
        raise InvalidModelError(
            f"ONNX model '{g.name or 'onnx'}' is invalid:\n  " + "\n  ".join(problems)
        )


def _initializer(init: Any) -> np.ndarray:
    from onnx import numpy_helper

    if any(d < 0 for d in init.dims):
        raise InvalidModelError(f"initializer '{init.name}' has negative dims {list(init.dims)}")
    try:
        return numpy_helper.to_array(init)
    except Exception as e:  # data shorter than its dims, external data not found...
        raise InvalidModelError(
            f"initializer '{init.name}' (dims {list(init.dims)}) cannot be read: {e}"
        ) from None


def _inferred_shapes(g: Any) -> dict[str, tuple[tuple[int, ...], int]]:
    """Static shapes and element types ONNX shape inference found for the graph's values."""
    shapes = {}
    for v in [*g.value_info, *g.output]:
        tt = v.type.tensor_type
        dims = tt.shape.dim
        if v.type.HasField("tensor_type") and tt.HasField("shape") and tt.elem_type \
                and all(d.HasField("dim_value") for d in dims):  # fmt: skip
            shapes[v.name] = (tuple(d.dim_value for d in dims), tt.elem_type)
    return shapes


def _input_dtype(inp: Any) -> str:
    """The device dtype of a graph input, which must be a tensor of concrete shape."""
    if not inp.type.HasField("tensor_type"):
        kind = inp.type.WhichOneof("value") or "untyped value"
        raise _Unsupported(f"input '{inp.name}' is a {kind}, not a tensor")
    return _device_dtype(inp.type.tensor_type.elem_type, f"input '{inp.name}'")


def from_onnx(model: Any) -> Graph:
    """Import an ONNX model (a ModelProto or a path) as a compiler Graph."""
    onnx = _import_onnx()
    if isinstance(model, (str, os.PathLike)):
        model = load_model(model)
    if not isinstance(model, onnx.ModelProto):
        raise InvalidArgumentError(f"from_onnx takes an onnx.ModelProto or a path, not {model!r}")
    opset = _check_opset(model)
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception as e:
        raise InvalidArgumentError(f"ONNX shape inference failed: {e}") from None
    g = model.graph
    _check_structure(g)
    cx = _Ctx(g.name or "onnx", opset)
    cx.opsets = list(model.opset_import)
    cx.inferred = _inferred_shapes(g)
    cx.checker = onnx.checker.C.CheckerContext()
    cx.checker.ir_version = model.ir_version
    cx.checker.opset_imports = {o.domain: o.version for o in model.opset_import}

    for init in g.initializer:
        cx.consts[init.name] = _initializer(init)
    problems = _Problems()
    poisoned: set[str] = set()  # values of unsupported inputs and nodes: not listed again
    for inp in g.input:
        if inp.name in cx.consts:
            continue
        try:
            dt = _input_dtype(inp)
        except _Unsupported as e:
            problems.unsupported.append(str(e))
            poisoned.add(inp.name)
            continue
        tt = inp.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if not tt.HasField("shape") or None in dims:
            raise InvalidArgumentError(
                f"ONNX input '{inp.name}' has a symbolic or missing dimension; "
                "give a concrete shape (e.g. with onnx.tools.update_model_dims)"
            )
        cx.syms[inp.name] = cx.b.input(inp.name, tuple(dims), dt)

    cx.b.reserve(out.name for out in g.output)
    for node in g.node:
        _check_node(cx, node, problems, poisoned)
    problems.raise_any(g.name)
    for out in g.output:
        try:
            _add_output(cx, out.name)
        except _Unsupported as e:
            problems.unsupported.append(f"output '{out.name}': {e}")
    problems.raise_any(g.name)
    return cx.b.build()


def _add_output(cx: _Ctx, name: str) -> None:
    """Make the value of ONNX name `name` a graph output of that name. A value that is an
    input, a parameter or already another output (Identity aliases two names) is copied."""
    if name not in cx.syms and name in cx.consts:  # a constant output (of Shape, say)
        cx.syms[name] = cx.param(cx.consts[name], stem=name)
    s = cx.sym(name)
    v = cx.b.graph.values[s]
    if v.role != "temp" or s in cx.b.graph.outputs:
        s = cx.op("copy", s)
    if name in cx.b.graph.values and name != s:
        raise InvalidArgumentError(
            f"ONNX output '{name}' is also the name of a graph input or initializer; "
            "rename the output (e.g. add an Identity node) so every value has one name"
        )
    cx.b.output(s, name)
    for k, sym in cx.syms.items():  # the builder renamed s: other ONNX names follow it
        if sym == s:
            cx.syms[k] = Symbol(name)
