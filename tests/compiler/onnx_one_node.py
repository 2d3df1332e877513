"""Helpers for converter tests: a model of one ONNX node, compiled with mnrt and run, its
outputs compared with ONNX's reference evaluator (dtype, shape and values)."""

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
