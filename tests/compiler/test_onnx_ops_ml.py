"""ONNX converters of the classic machine-learning ops (ai.onnx.ml) against onnxruntime,
which implements that domain: a scikit-learn pipeline's preprocessing and linear model as
sklearn-onnx writes them, each op's variants, and the errors of a bad node."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import TensorProto, helper
from onnx_one_node import run

from mnrt.compiler.onnx import InvalidModelError, UnsupportedModelError, from_onnx

RNG = np.random.default_rng(31)
F = TensorProto.FLOAT


def _model(nodes, x_shape, outputs=("y",), x_type=F):
    graph = helper.make_graph(
        nodes, "ml", [helper.make_tensor_value_info("x", x_type, list(x_shape))],
        [helper.make_tensor_value_info(o, F, None) for o in outputs],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("ai.onnx.ml", 3)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 9
    return model


def _ml(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, domain="ai.onnx.ml", **attrs)


def _against_onnxruntime(ctx, model, x):
    ort = pytest.importorskip("onnxruntime")
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = run(ctx, model, {"x": x})
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_a_preprocessing_and_linear_regression_pipeline(ctx):
    """StandardScaler -> Normalizer -> LinearRegression (two targets), as one model."""
    x = RNG.standard_normal((6, 4)).astype(np.float32) * 3 + 1
    nodes = [
        _ml("Scaler", ["x"], ["scaled"], offset=[1.0, -0.5, 0.25, 2.0], scale=[0.5, 2.0, 1.0, 0.1]),
        _ml("Normalizer", ["scaled"], ["unit"], norm="L2"),
        _ml("LinearRegressor", ["unit"], ["y"], coefficients=list(RNG.standard_normal(8)),
            intercepts=[0.5, -1.0], targets=2),
    ]  # fmt: skip
    model = _model(nodes, x.shape)
    assert [n.op for n in from_onnx(model).nodes if n.op in ("gemm", "sqrt")] == ["sqrt", "gemm"]
    _against_onnxruntime(ctx, model, x)


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer_divides_each_row_by_its_norm(ctx, norm):
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    x[2] = 0  # a zero row stays zero (the norm is at least 1e-30)
    x[4] = [0.25, -2.0, -3.0]  # its largest magnitude is not its largest value
    model = _model([_ml("Normalizer", ["x"], ["y"], norm=norm)], x.shape)
    if norm != "MAX":
        _against_onnxruntime(ctx, model, x)
        return
    # MAX divides by the largest magnitude, as ONNX's reference and scikit-learn's
    # Normalizer(norm="max") do; onnxruntime divides by the largest value
    (got,) = run(ctx, model, {"x": x})
    np.testing.assert_allclose(got, x / np.maximum(np.abs(x).max(axis=1, keepdims=True), 1e-30))


def test_scaler_of_integers_answers_in_float(ctx):
    x = RNG.integers(-5, 5, (4, 2)).astype(np.int64)
    nodes = [_ml("Scaler", ["x"], ["y"], offset=[1.5, -0.5], scale=[0.5, 2.0])]
    _against_onnxruntime(ctx, _model(nodes, x.shape, x_type=TensorProto.INT64), x)


def test_binarizer_and_array_feature_extractor(ctx):
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    nodes = [_ml("Binarizer", ["x"], ["b"], threshold=0.25),
             helper.make_node("Constant", [], ["cols"],
                              value=helper.make_tensor("c", TensorProto.INT64, [1, 3], [4, 0, 4])),
             _ml("ArrayFeatureExtractor", ["b", "cols"], ["y"])]  # fmt: skip
    _against_onnxruntime(ctx, _model(nodes, x.shape), x)


def test_bad_ml_nodes_are_refused_by_name():
    nodes = [_ml("LinearRegressor", ["x"], ["y"], coefficients=[1.0, 2.0, 3.0], targets=2)]
    with pytest.raises(InvalidModelError, match="2 target.s. of 2 columns need 4"):
        from_onnx(_model(nodes, (3, 2)))
    nodes = [_ml("LinearRegressor", ["x"], ["y"], coefficients=[1.0, 2.0],
                 post_transform="PROBIT")]  # fmt: skip
    with pytest.raises(UnsupportedModelError, match="post_transform=PROBIT"):
        from_onnx(_model(nodes, (3, 2)))
    with pytest.raises(InvalidModelError, match="offset holds 3 values; it needs 1 or 2"):
        from_onnx(_model([_ml("Scaler", ["x"], ["y"], offset=[1.0, 2.0, 3.0])], (3, 2)))
