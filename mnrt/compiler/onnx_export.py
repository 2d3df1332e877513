"""Graph IR to ONNX: the optimised model of codegen_dir (and `out_onnx`), and a way to run a
compiled graph in other ONNX runtimes for comparison.

One exporter per kernel, in a registry; a kernel without one (or a graph holding MN-Core
half values, which ONNX cannot express exactly: they are written as IEEE float16) is named
in the error. Needs the `onnx` extra.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..device import dtypes as dt
from ..device.kernels import TensorSpec, chain
from ..errors import InvalidArgumentError
from ..format.files import write_atomically
from ..user_warning import warn
from . import onnx_export_ops
from .ir import Graph, Node
from .onnx import names
from .onnx_emit import OPSET, Emitter, ExportError


def _same(op: str) -> Callable[[Emitter, Node], None]:
    return lambda out, n: out.add(op, n.inputs, n.outputs)


def _gemm(out: Emitter, n: Node) -> None:
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


def _gelu(out: Emitter, n: Node) -> None:
    """Gelu as its formula: the op (with `approximate`) arrives in opset 20, after OPSET.
    The tanh form is 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the erf form
    0.5 x (1 + erf(x / sqrt(2))); they differ by up to 4e-4, so each exports as itself."""
    (x,) = n.inputs
    inner, curve, one, half = out.temp(), out.temp(), out.temp(), out.temp()
    if n.attrs.get("approximate", "none") == "tanh":
        cube, cubic, poly = out.temp(), out.temp(), out.temp()
        out.add("Pow", [x, out.const(np.float32(3.0))], [cube])
        out.add("Mul", [cube, out.const(np.float32(0.044715))], [cubic])
        out.add("Add", [x, cubic], [poly])
        out.add("Mul", [poly, out.const(np.float32(math.sqrt(2.0 / math.pi)))], [inner])
        out.add("Tanh", [inner], [curve])
    else:
        out.add("Div", [x, out.const(np.float32(math.sqrt(2.0)))], [inner])
        out.add("Erf", [inner], [curve])
    out.add("Add", [curve, out.const(np.float32(1.0))], [one])
    out.add("Mul", [x, one], [half])
    out.add("Mul", [half, out.const(np.float32(0.5))], n.outputs)


def _layernorm(out: Emitter, n: Node) -> None:
    x, *rest = n.inputs
    width = out.shapes[x][n.attrs["axis"] :]
    scale = rest[0] if rest else out.const(np.ones(width, np.float32))
    bias = rest[1] if len(rest) > 1 else out.const(np.zeros(width, np.float32))
    out.add("LayerNormalization", [x, scale, bias], n.outputs, axis=n.attrs["axis"],
            epsilon=n.attrs["epsilon"])  # fmt: skip


def _conv(out: Emitter, n: Node) -> None:
    a = n.attrs
    out.add("Conv", n.inputs, n.outputs, strides=list(a["stride"]), pads=list(a["padding"]),
            dilations=list(a["dilation"]), group=a["groups"])  # fmt: skip


def _pool(op: str) -> Callable[[Emitter, Node], None]:
    def export(out: Emitter, n: Node) -> None:
        a = n.attrs
        attrs = {"kernel_shape": list(a["kernel"]), "strides": list(a["stride"] or a["kernel"]),
                 "pads": list(a["padding"]), "ceil_mode": int(a["ceil_mode"])}  # fmt: skip
        if op == "MaxPool":
            attrs["dilations"] = list(a["dilation"])
        elif any(d != 1 for d in a["dilation"]):
            raise ExportError(
                f"avg_pool2d node '{n.name}': dilation {list(a['dilation'])} has no ONNX form "
                f"before opset 19 (this exporter writes opset {OPSET})"
            )
        else:
            attrs["count_include_pad"] = int(a["count_include_pad"])
        out.add(op, n.inputs, n.outputs, **attrs)

    return export


def _reduce(op: str) -> Callable[[Emitter, Node], None]:
    def export(out: Emitter, n: Node) -> None:
        axes = list(n.attrs["axes"]) or list(range(len(out.shapes[n.inputs[0]])))
        keep = int(n.attrs["keepdims"])
        out.add(op, [n.inputs[0], out.const(np.array(axes, np.int64))], n.outputs, keepdims=keep)

    return export


def _axis(op: str) -> Callable[[Emitter, Node], None]:
    return lambda out, n: out.add(op, n.inputs, n.outputs, axis=n.attrs["axis"])


def _to_shape(op: str) -> Callable[[Emitter, Node], None]:
    def export(out: Emitter, n: Node) -> None:
        shape = out.const(np.array(n.attrs["shape"], np.int64))
        out.add(op, [n.inputs[0], shape], n.outputs)

    return export


def _transpose(out: Emitter, n: Node) -> None:
    perm = list(n.attrs["perm"]) or list(range(len(out.shapes[n.inputs[0]])))[::-1]
    out.add("Transpose", n.inputs, n.outputs, perm=perm)


def _silu(out: Emitter, n: Node) -> None:
    gate = out.temp()
    out.add("Sigmoid", n.inputs, [gate])
    out.add("Mul", [n.inputs[0], gate], n.outputs)


def _scale_shift(out: Emitter, n: Node) -> None:
    """x * scale + shift, a Mul and an Add (BatchNormalization would need a mean and a
    variance, and its rounding is the runtime's)."""
    x, scale, shift = n.inputs
    scaled = out.temp()
    out.add("Mul", [x, scale], [scaled])
    out.add("Add", [scaled, shift], n.outputs)


def _with_epilogue(export: Callable[[Emitter, Node], None]) -> Callable[[Emitter, Node], None]:
    """ONNX has no fused activation: a kernel with an epilogue exports as the kernel
    followed by the activation."""

    def wrapped(out: Emitter, n: Node) -> None:
        act = n.attrs.get("epilogue", "none")
        if act == "none":
            export(out, n)
            return
        y = out.temp()
        export(out, Node(n.op, n.inputs, [y], n.attrs))
        _EXPORTERS[act](out, Node(act, [y], n.outputs, {"approximate": "none"}))

    return wrapped


def _chain(out: Emitter, n: Node) -> None:
    """A chain exports as its steps, one ONNX node (or a few) each, in order, each on the
    result before it and the chain's operands it takes; the tapped step's result under
    the chain's second output's name; an input it widens as it loads it through a Cast."""
    ins = [TensorSpec(out.shapes[v], out.dtypes[v]) for v in n.inputs]
    steps = chain.plan(n.attrs, ins)
    tap = n.attrs.get("tap", chain.NO_TAP)
    given = list(n.inputs)
    for k, name in enumerate(n.attrs.get("widen", "").split(",") if n.attrs.get("widen") else ()):
        if name:
            given[k] = out.temp()
            out.shapes[given[k]], out.dtypes[given[k]] = ins[k].shape, dt.dtype(name)
            _cast(out, Node("cast", [n.inputs[k]], [given[k]], {"to": name}))
    x = given[0]
    for i, step in enumerate(steps):
        y = n.outputs[0] if i + 1 == len(steps) else n.outputs[1] if i == tap else out.temp()
        out.shapes[y], out.dtypes[y] = step.y.shape, step.y.dtype
        _EXPORTERS[step.op](out, Node(step.op, step.inputs(x, given), [y], dict(step.attrs)))
        x = y


def _cast(out: Emitter, n: Node) -> None:
    """ONNX's Cast wraps integers and leaves floats out of an integer's range undefined; the
    device's cast saturates both and makes nan 0 (device/kernels/misc.py), so the value is
    limited first, as the device limits it."""
    src, to = out.dtypes[n.inputs[0]], dt.dtype(n.attrs["to"])
    code = names.onnx_code(to)
    if not to.is_integer or not (src.is_float or src.is_integer):
        out.add("Cast", n.inputs, n.outputs, to=code)
        return
    x, info = n.inputs[0], np.iinfo(to.storage)
    kind = out.helper.tensor_dtype_to_np_dtype(names.onnx_code(src))
    if src.is_integer:
        have = np.iinfo(kind)
        if have.min >= info.min and have.max <= info.max:
            out.add("Cast", [x], n.outputs, to=code)
            return
        bounds = [kind.type(max(have.min, info.min)), kind.type(min(have.max, info.max))]
        limited = out.temp()
        out.add("Clip", [x, *map(out.const, bounds)], [limited])
        out.add("Cast", [limited], n.outputs, to=code)
        return
    nan, finite = out.temp(), out.temp()
    out.add("IsNaN", [x], [nan])
    out.add("Where", [nan, out.const(np.zeros((), kind)), x], [finite])
    # A bound the float type cannot hold exactly (int32's maximum in float32 rounds up to
    # 2**31) is reached by values Cast cannot take: a Where gives them the bound.
    lo, hi = kind.type(info.min), kind.type(info.max)
    clipped, cast = out.temp(), out.temp()
    out.add("Clip", [finite, out.const(lo), out.const(hi)], [clipped])
    steps = [("GreaterOrEqual", hi, info.max)] if float(hi) > info.max else []
    steps += [("LessOrEqual", lo, info.min)] if float(lo) < info.min else []
    out.add("Cast", [clipped], [cast] if steps else n.outputs, to=code)
    for i, (compare, bound, value) in enumerate(steps):
        beyond = out.temp()
        out.add(compare, [finite, out.const(bound)], [beyond])
        result = n.outputs[0] if i == len(steps) - 1 else out.temp()
        out.add("Where", [beyond, out.const(np.array(value, to.storage)), cast], [result])
        cast = result


_SAME = {
    **names.UNARY,
    **names.BINARY,
    **names.VARIADIC,
    "where": "Where",
    "copy": "Identity",
    "relayout": "Identity",  # a layout switch moves values, it does not change them
    "global_avg_pool2d": "GlobalAveragePool",
}
# Reductions that are one ONNX op each but that the frontend builds from others (ReduceL1
# as abs then sum), so names.REDUCE, which both directions share, does not hold them.
_REDUCE_MORE = {"l1": "ReduceL1", "l2": "ReduceL2", "log_sum": "ReduceLogSum",
                "logsumexp": "ReduceLogSumExp", "sum_square": "ReduceSumSquare"}  # fmt: skip
_EXPORTERS: dict[str, Callable[[Emitter, Node], None]] = {
    **{kernel: _same(op) for kernel, op in _SAME.items()},
    "gemm": _with_epilogue(_gemm),
    "gelu": _gelu,
    "silu": _silu,
    "layernorm": _layernorm,
    "conv2d": _with_epilogue(_conv),
    "scale_shift": _with_epilogue(_scale_shift),
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
    "chain": _chain,
    **{kernel: _reduce(op) for kernel, op in _REDUCE_MORE.items()},
    **onnx_export_ops.EXPORTERS,
}  # fmt: skip


def _ops(node: Node) -> list[str]:
    """The kernels a node exports as: a chain's steps, else its own."""
    if node.op == chain.NAME:
        return [op for op, _ in chain.steps_of(node.attrs)]
    return [node.op]


def to_onnx(graph: Graph) -> Any:
    """The graph as an onnx.ModelProto (opset 18), checked by ONNX's checker."""
    model = _unchecked_model(graph)
    import onnx

    onnx.checker.check_model(model)
    return model


def save(
    graph: Graph,
    path: str | os.PathLike,
    weights_in: tuple[str, Mapping[str, tuple[int, int]]] | None = None,
) -> None:
    """Write the graph as an ONNX file, replacing `path` whole or not at all. `weights_in`
    names a file in the same folder that already holds parameters' bytes, as exported, and
    where (value name -> offset, length; see serialize.save_arrays): those become ONNX
    external data pointing there instead of another copy of the weights (VGG-19 has 548
    MB). The rest is serialised once, and the written file is what ONNX's checker reads."""
    model = _unchecked_model(graph, weights_in)  # first: without onnx it raises the error
    import onnx

    data = model.SerializeToString()
    del model
    write_atomically(path, data)  # MnrtError: cannot write it
    try:
        onnx.checker.check_model(os.fspath(path))
    except onnx.checker.ValidationError as e:
        Path(path).unlink(missing_ok=True)
        raise ExportError(
            f"graph '{graph.name}': the exported model is not valid ONNX: {e}"
        ) from None


def _unchecked_model(
    graph: Graph, weights_in: tuple[str, Mapping[str, tuple[int, int]]] | None = None
) -> Any:
    try:
        import onnx
        from onnx import helper, numpy_helper
    except ImportError:
        raise InvalidArgumentError(
            "exporting to ONNX needs the onnx extra: pip install mnrt[onnx]"
        ) from None
    missing = sorted({op for n in graph.nodes for op in _ops(n) if op not in _EXPORTERS})
    if missing:
        raise ExportError(
            f"graph '{graph.name}': no ONNX export for kernel(s) {', '.join(missing)}"
        )
    out = Emitter(helper, numpy_helper, graph)
    for node in graph.nodes:
        _EXPORTERS[node.op](out, node)

    def info(name: str) -> Any:
        v = graph.values[name]
        return helper.make_tensor_value_info(name, names.onnx_code(v.dtype), list(v.shape))

    # The weights go into the model's own graph, not through make_graph and make_model,
    # which copy every tensor (twice).
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
    for name in graph.params:
        v = graph.values[name]
        want = np.dtype("<f2") if v.dtype.is_half else v.dtype.read_dtype.newbyteorder("<")
        data = v.data if v.data.dtype == want else _as(v.data, want, name)
        tensor = model.graph.initializer.add()
        tensor.name = name
        tensor.dims.extend(data.shape)
        tensor.data_type = helper.np_dtype_to_tensor_dtype(data.dtype)
        where = weights_in[1].get(name) if weights_in is not None and data is v.data else None
        if where is not None and where[1]:  # the file holds these very bytes
            tensor.data_location = onnx.TensorProto.EXTERNAL
            for key, value in zip(("location", "offset", "length"), (weights_in[0], *where)):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, str(value)
        else:
            tensor.raw_data = data.tobytes()
    return model


__all__ = ["ExportError", "save", "to_onnx"]


def _as(data: np.ndarray, dtype: np.dtype, name: str) -> np.ndarray:
    """A parameter in the dtype ONNX stores it in: MN-Core's half (1-6-9 bits, largest
    about 4.3e9) as IEEE float16 (largest 65504), where larger values become infinite:
    said once per parameter, rather than by numpy's bare overflow warning."""
    with np.errstate(over="ignore"):
        out = data.astype(dtype)
    lost = int(np.count_nonzero(np.isinf(out) & np.isfinite(data)))
    if lost:
        warn(
            f"parameter '{name}': {lost} of its {data.size} values are beyond {dtype.name}'s "
            f"range (largest {float(np.finfo(dtype).max):g}), so the exported ONNX holds "
            "them as infinity (the compiled program keeps them)"
        )
    return out
