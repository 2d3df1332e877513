"""Helpers for converter tests: a model of one ONNX node, compiled with mnrt and run, its
outputs compared with ONNX's reference evaluator (dtype, shape and values) or with
onnxruntime's (for onnxruntime's own ops, and for models its quantization tool writes)."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import mnrt


def one_node_model(op: str, inputs: dict[str, np.ndarray], outputs: list[str],
                   inits: dict[str, np.ndarray] | None = None, opset: int = 21,
                   **attrs: Any) -> Any:  # fmt: skip
    """A model of one node `op` whose graph inputs are `inputs` (their dtypes and shapes)
    and whose initializers are `inits`; `outputs` are left for shape inference to type."""
    inits = inits or {}
    names = [*inputs, *inits]
    node = helper.make_node(op, names, outputs, **attrs)
    vis = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in inputs.items()
    ]
    outs = [helper.make_empty_tensor_value_info(n) for n in outputs]
    graph = helper.make_graph(
        [node],
        "t",
        vis,
        outs,
        initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def node_model(op: str, values: dict[str, np.ndarray | None], inputs: set[str], opset: int,
               /, domain: str = "", outputs: tuple[str, ...] = ("y",),
               **attrs: Any) -> Any:  # fmt: skip
    """A model of one `op` of `domain` reading `values` in their order (a value None leaves
    that optional input out): those named in `inputs` as graph inputs, the rest as
    initializers (one_node_model puts every graph input first). `outputs` name the node's
    outputs, an empty name leaving an optional one out. `opset` is the default domain's; an
    attribute of that name (QLinearSoftmax has one) is the node's."""
    given = {k: v for k, v in values.items() if v is not None}
    vis = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for k, v in given.items() if k in inputs]  # fmt: skip
    inits = [numpy_helper.from_array(v, k) for k, v in given.items() if k not in inputs]
    names = [k if v is not None else "" for k, v in values.items()]
    node = helper.make_node(op, names, list(outputs), domain=domain, **attrs)
    outs = [helper.make_empty_tensor_value_info(o) for o in outputs if o]
    graph = helper.make_graph([node], "t", vis, outs, initializer=inits)
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model


def onnxruntime_outputs(model: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's outputs by name, as onnxruntime's CPU provider computes them."""
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def run_both(ctx: mnrt.Context, model: Any, feeds: dict[str, np.ndarray]) -> tuple[dict, dict]:
    """mnrt's outputs and onnxruntime's, by name."""
    want = onnxruntime_outputs(model, feeds)
    compiled = ctx.compile(model, feeds, options={"float_dtype": "float"})
    got = {k: v.cpu() for k, v in compiled(feeds).items()}
    return got, want


def quantized_by_onnxruntime(model: Any, tmp_path: Any, batches: list[dict[str, np.ndarray]],
                             qoperator: bool, **options: Any) -> Any:  # fmt: skip
    """`model` statically quantized by onnxruntime's tool, calibrated on `batches`: in the
    QOperator format (integer ops, onnxruntime's com.microsoft ones among them) or QDQ;
    uint8 activations and int8 weights unless `options` say otherwise."""
    import onnx
    from onnxruntime import quantization as q

    src, dst = tmp_path / "float.onnx", tmp_path / "quantized.onnx"
    onnx.save(model, src)

    class Batches(q.CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter(batches)

        def get_next(self):
            return next(self.batches, None)

    fmt = q.QuantFormat.QOperator if qoperator else q.QuantFormat.QDQ
    options = {"activation_type": q.QuantType.QUInt8, "weight_type": q.QuantType.QInt8,
               **options}  # fmt: skip
    q.quantize_static(src, dst, Batches(), quant_format=fmt, **options)
    return onnx.load(dst)


def image_model(name: str, nodes: list, inits: dict[str, np.ndarray]) -> Any:
    """A float model of `nodes` from images x [2, 3, 8, 8] (see `images`) to scores
    y [2, 10]: what onnxruntime's quantization tool is given in the tests."""
    from onnx import TensorProto

    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def images(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """n batches of input for an `image_model`."""
    return [rng.standard_normal((2, 3, 8, 8)).astype(np.float32) for _ in range(n)]


def output_step(model: Any, name: str) -> float:
    """One step of the quantization output `name` is dequantized from: its scale."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    last = next(n for n in model.graph.node if name in n.output)
    return float(inits[last.input[1]])


def run(ctx: mnrt.Context, model: Any, feeds: dict[str, np.ndarray],
        float_dtype: str = "float") -> list[np.ndarray]:  # fmt: skip
    compiled = ctx.compile(model, feeds, options={"float_dtype": float_dtype})
    got = compiled(feeds)
    return [got[o.name].cpu() for o in model.graph.output]


def check(ctx: mnrt.Context, model: Any, feeds: dict[str, np.ndarray], rtol: float = 1e-5,
          atol: float = 1e-6) -> list[np.ndarray]:  # fmt: skip
    """mnrt's outputs equal the reference evaluator's in dtype and shape, and in value
    (exactly for integers and bools); returns mnrt's outputs."""
    want = ReferenceEvaluator(model).run(None, feeds)
    got = run(ctx, model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got
