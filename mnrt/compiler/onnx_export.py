"""Graph IR to ONNX: the optimised model of codegen_dir (and `out_onnx`), and a way to run a
compiled graph in other ONNX runtimes for comparison.

One exporter per kernel, in a registry; a kernel without one (or a graph holding MN-Core
half values, which ONNX cannot express exactly: they are written as IEEE float16) is named
in the error. Needs the `onnx` extra.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ..device import dtypes as dt
from ..errors import InvalidArgumentError
from .ir import Graph, Node
from .onnx import names

# 18: the first with the Bitwise ops (names.UNARY/BINARY), and with every Reduce op's axes
# an input.
OPSET = 18


class ExportError(InvalidArgumentError):
    """A graph holds kernels that have no ONNX form here."""


class _Out:
    """The ONNX graph being written: nodes and initializers."""

    def __init__(self, helper: Any, numpy_helper: Any, shapes: dict[str, tuple]) -> None:
        self.helper, self.numpy_helper = helper, numpy_helper
        self.shapes = shapes
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.count = 0

    def const(self, array: np.ndarray) -> str:
        self.count += 1
        name = f"_const{self.count}"
        self.inits.append(self.numpy_helper.from_array(np.asarray(array), name))
        return name

    def temp(self) -> str:
        self.count += 1
        return f"_t{self.count}"

    def add(self, op: str, inputs: list[str], outputs: list[str], **attrs: Any) -> None:
        self.nodes.append(self.helper.make_node(op, inputs, outputs, **attrs))


def _same(op: str) -> Callable[[_Out, Node], None]:
    return lambda out, n: out.add(op, n.inputs, n.outputs)


def _gemm(out: _Out, n: Node) -> None:
    a, b, *c = n.inputs
    at = n.attrs
    for flag, name in (("trans_a", "a"), ("trans_b", "b")):
        if at[flag]:
            operand = a if name == "a" else b
            perm = list(range(len(out.shapes[operand])))
            perm[-1], perm[-2] = perm[-2], perm[-1]
            t = out.temp()
            out.add("Transpose", [operand], [t], perm=perm)
            a, b = (t, b) if name == "a" else (a, t)
    y = out.temp()
    out.add("MatMul", [a, b], [y])
    if at["alpha"] != 1.0:
        t = out.temp()
        out.add("Mul", [y, out.const(np.float32(at["alpha"]))], [t])
        y = t
    if c:
        bias = c[0]
        if at["beta"] != 1.0:
            t = out.temp()
            out.add("Mul", [bias, out.const(np.float32(at["beta"]))], [t])
            bias = t
        t = out.temp()
        out.add("Add", [y, bias], [t])
        y = t
    out.add("Identity", [y], n.outputs)


def _gelu(out: _Out, n: Node) -> None:
    (x,) = n.inputs
    scaled, erf, one, half = out.temp(), out.temp(), out.temp(), out.temp()
    out.add("Div", [x, out.const(np.float32(math.sqrt(2.0)))], [scaled])
    out.add("Erf", [scaled], [erf])
    out.add("Add", [erf, out.const(np.float32(1.0))], [one])
    out.add("Mul", [x, one], [half])
    out.add("Mul", [half, out.const(np.float32(0.5))], n.outputs)


def _layernorm(out: _Out, n: Node) -> None:
    x, *rest = n.inputs
    width = out.shapes[x][n.attrs["axis"] :]
    scale = rest[0] if rest else out.const(np.ones(width, np.float32))
    bias = rest[1] if len(rest) > 1 else out.const(np.zeros(width, np.float32))
    out.add("LayerNormalization", [x, scale, bias], n.outputs, axis=n.attrs["axis"],
            epsilon=n.attrs["epsilon"])  # fmt: skip


def _conv(out: _Out, n: Node) -> None:
    a = n.attrs
    out.add("Conv", n.inputs, n.outputs, strides=list(a["stride"]), pads=list(a["padding"]),
            dilations=list(a["dilation"]), group=a["groups"])  # fmt: skip


def _pool(op: str) -> Callable[[_Out, Node], None]:
    def export(out: _Out, n: Node) -> None:
        a = n.attrs
        attrs = {"kernel_shape": list(a["kernel"]), "strides": list(a["stride"] or a["kernel"]),
                 "pads": list(a["padding"]), "ceil_mode": int(a["ceil_mode"])}  # fmt: skip
        if op == "MaxPool":
            attrs["dilations"] = list(a["dilation"])
        else:
            attrs["count_include_pad"] = int(a["count_include_pad"])
        out.add(op, n.inputs, n.outputs, **attrs)

    return export


def _reduce(op: str) -> Callable[[_Out, Node], None]:
    def export(out: _Out, n: Node) -> None:
        axes = list(n.attrs["axes"]) or list(range(len(out.shapes[n.inputs[0]])))
        keep = int(n.attrs["keepdims"])
        out.add(op, [n.inputs[0], out.const(np.array(axes, np.int64))], n.outputs, keepdims=keep)

    return export


def _axis(op: str) -> Callable[[_Out, Node], None]:
    return lambda out, n: out.add(op, n.inputs, n.outputs, axis=n.attrs["axis"])


def _to_shape(op: str) -> Callable[[_Out, Node], None]:
    def export(out: _Out, n: Node) -> None:
        shape = out.const(np.array(n.attrs["shape"], np.int64))
        out.add(op, [n.inputs[0], shape], n.outputs)

    return export


def _transpose(out: _Out, n: Node) -> None:
    perm = list(n.attrs["perm"]) or list(range(len(out.shapes[n.inputs[0]])))[::-1]
    out.add("Transpose", n.inputs, n.outputs, perm=perm)


def _silu(out: _Out, n: Node) -> None:
    gate = out.temp()
    out.add("Sigmoid", n.inputs, [gate])
    out.add("Mul", [n.inputs[0], gate], n.outputs)


def _with_epilogue(export: Callable[[_Out, Node], None]) -> Callable[[_Out, Node], None]:
    """ONNX has no fused activation: a kernel with an epilogue exports as the kernel
    followed by the activation."""

    def wrapped(out: _Out, n: Node) -> None:
        act = n.attrs.get("epilogue", "none")
        if act == "none":
            export(out, n)
            return
        y = out.temp()
        export(out, Node(n.op, n.inputs, [y], n.attrs))
        _EXPORTERS[act](out, Node(act, [y], n.outputs, {"approximate": "none"}))

    return wrapped


def _cast(out: _Out, n: Node) -> None:
    out.add("Cast", n.inputs, n.outputs, to=names.onnx_code(dt.dtype(n.attrs["to"])))


_SAME = {
    **names.UNARY,
    **names.BINARY,
    **names.VARIADIC,
    "where": "Where",
    "copy": "Identity",
    "global_avg_pool2d": "GlobalAveragePool",
}
_EXPORTERS: dict[str, Callable[[_Out, Node], None]] = {
    **{kernel: _same(op) for kernel, op in _SAME.items()},
    "gemm": _with_epilogue(_gemm),
    "gelu": _gelu,
    "silu": _silu,
    "layernorm": _layernorm,
    "conv2d": _with_epilogue(_conv),
    "max_pool2d": _pool("MaxPool"),
    "avg_pool2d": _pool("AveragePool"),
    **{kernel: _reduce(op) for kernel, op in names.REDUCE.items()},
    "softmax": _axis("Softmax"),
    "log_softmax": _axis("LogSoftmax"),
    "concat": _axis("Concat"),
    "gather": _axis("Gather"),
    "transpose": _transpose,
    "reshape": _to_shape("Reshape"),
    "expand": _to_shape("Expand"),
    "cast": _cast,
}


def to_onnx(graph: Graph) -> Any:
    """The graph as an onnx.ModelProto (opset 18)."""
    try:
        import onnx
        from onnx import helper, numpy_helper
    except ImportError:
        raise InvalidArgumentError(
            "exporting to ONNX needs the onnx extra: pip install mnrt[onnx]"
        ) from None
    missing = sorted({n.op for n in graph.nodes if n.op not in _EXPORTERS})
    if missing:
        raise ExportError(
            f"graph '{graph.name}': no ONNX export for kernel(s) {', '.join(missing)}"
        )
    out = _Out(helper, numpy_helper, {name: v.shape for name, v in graph.values.items()})
    for node in graph.nodes:
        _EXPORTERS[node.op](out, node)
    for name in graph.params:
        v = graph.values[name]
        data = v.data.astype(np.float16 if v.dtype.is_half else v.dtype.read_dtype)
        out.inits.append(numpy_helper.from_array(data, name))

    def info(name: str) -> Any:
        v = graph.values[name]
        return helper.make_tensor_value_info(name, names.onnx_code(v.dtype), list(v.shape))

    model = helper.make_model(
        helper.make_graph(
            out.nodes,
            graph.name,
            [info(n) for n in graph.inputs],
            [info(n) for n in graph.outputs],
            out.inits,
        ),
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="mnrt",
    )
    onnx.checker.check_model(model)
    return model


def save(graph: Graph, path: str | os.PathLike) -> None:
    model = to_onnx(graph)  # first: without onnx installed it raises the error that says so
    import onnx

    onnx.save(model, os.fspath(path))


__all__ = ["ExportError", "save", "to_onnx"]
