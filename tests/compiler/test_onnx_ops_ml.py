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


def _classifier_model(node, x_shape, ml_opset):
    """A classifier's model: X in, its int64 labels and float scores out."""
    graph = helper.make_graph(
        [node], "ml", [helper.make_tensor_value_info("x", F, list(x_shape))],
        [helper.make_tensor_value_info("label", TensorProto.INT64, None),
         helper.make_tensor_value_info("y", F, None)],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("ai.onnx.ml", ml_opset)]
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
    binary_raw = _ml("LinearClassifier", ["x"], ["label", "y"], classlabels_ints=[0, 1],
                     coefficients=[1.0, 2.0])  # fmt: skip
    with pytest.raises(UnsupportedModelError, match="onnxruntime gives .1 - s, s."):
        from_onnx(_model([binary_raw], (3, 2), outputs=("label", "y")))


def _random_forest(rng, trees, depth, features, targets, modes=("BRANCH_LEQ",)):
    """Random trees as TreeEnsembleRegressor's attributes: each node a (tree, node) id, its
    children by node id, leaves of mode LEAF with a weight per target."""
    at = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values",
                          "nodes_modes", "nodes_truenodeids", "nodes_falsenodeids",
                          "nodes_missing_value_tracks_true", "target_treeids",
                          "target_nodeids", "target_ids", "target_weights")}  # fmt: skip
    for t in range(trees):
        count = [0]

        def grow(level, t=t, count=count):
            me = count[0]
            count[0] += 1
            leaf = level == depth or (level > 0 and rng.random() < 0.3)
            at["nodes_treeids"].append(t)
            at["nodes_nodeids"].append(me)
            at["nodes_featureids"].append(int(rng.integers(features)) if not leaf else 0)
            at["nodes_values"].append(
                float(np.round(rng.standard_normal(), 1)) if not leaf else 0.0
            )
            at["nodes_modes"].append("LEAF" if leaf else str(rng.choice(modes)))
            at["nodes_missing_value_tracks_true"].append(int(rng.random() < 0.5))
            slot = len(at["nodes_truenodeids"])
            at["nodes_truenodeids"].append(0)
            at["nodes_falsenodeids"].append(0)
            if leaf:
                for k in range(targets):
                    at["target_treeids"].append(t)
                    at["target_nodeids"].append(me)
                    at["target_ids"].append(k)
                    at["target_weights"].append(float(rng.standard_normal()))
            else:
                at["nodes_truenodeids"][slot] = grow(level + 1)
                at["nodes_falsenodeids"][slot] = grow(level + 1)
            return me

        grow(0)
    return at


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE"])
@pytest.mark.parametrize(
    "modes", [("BRANCH_LEQ",), ("BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")]
)
def test_tree_ensemble_regressor_matches_onnxruntime(ctx, aggregate, modes):
    """A random forest as sklearn-onnx writes one (TreeEnsembleRegressor), inputs with
    missing values, against onnxruntime's tree walk; the device runs no branch (gathers,
    comparisons and GEMMs)."""
    rng = np.random.default_rng(5)
    at = _random_forest(rng, trees=7, depth=4, features=5, targets=2, modes=modes)
    node = _ml("TreeEnsembleRegressor", ["x"], ["y"], n_targets=2, aggregate_function=aggregate,
               base_values=[0.5, -0.25], **at)  # fmt: skip
    x = np.round(rng.standard_normal((40, 5)), 1).astype(np.float32)  # ties with the splits
    x[rng.random(x.shape) < 0.1] = np.nan
    model = _model([node], x.shape)
    assert {n.op for n in from_onnx(model).nodes} >= {"gemm", "gather"}
    _against_onnxruntime(ctx, model, x)


def test_bad_tree_ensembles_are_refused_by_name():
    at = _random_forest(np.random.default_rng(1), trees=2, depth=2, features=3, targets=1)
    node = _ml("TreeEnsembleRegressor", ["x"], ["y"], aggregate_function="MAX", **at)
    with pytest.raises(UnsupportedModelError, match="aggregate_function=MAX"):
        from_onnx(_model([node], (4, 3)))
    at["nodes_truenodeids"][0] = 99
    node = _ml("TreeEnsembleRegressor", ["x"], ["y"], **at)
    with pytest.raises(InvalidModelError, match="tree 0 has 2 roots"):
        from_onnx(_model([node], (4, 3)))


@pytest.mark.parametrize(
    ("classes", "labels", "transform"),
    [(3, [4, 7, 9], "SOFTMAX"), (3, [0, 1, 2], "NONE"), (1, [10, 20], "LOGISTIC")],
    ids=["multiclass-softmax", "multiclass-raw", "binary-logistic"],
)  # fmt: skip
def test_linear_classifier_matches_onnxruntime(ctx, classes, labels, transform):
    """LogisticRegression as sklearn-onnx writes it (zipmap off): labels and scores."""
    x = RNG.standard_normal((8, 4)).astype(np.float32)
    node = _ml("LinearClassifier", ["x"], ["label", "y"], classlabels_ints=labels,
               coefficients=list(RNG.standard_normal(classes * 4)),
               intercepts=list(RNG.standard_normal(classes)), post_transform=transform)  # fmt: skip
    _against_onnxruntime(ctx, _classifier_model(node, x.shape, 1), x)


@pytest.mark.parametrize(
    ("classes", "labels", "transform"),
    [(3, [3, 5, 8], "SOFTMAX"), (3, [0, 1, 2], "NONE"), (1, [0, 1], "LOGISTIC")],
    ids=["multiclass-softmax", "multiclass-raw", "binary-logistic"],
)  # fmt: skip
def test_tree_ensemble_classifier_matches_onnxruntime(ctx, classes, labels, transform):
    """A random forest classifier (class weights per leaf; a binary one scores class 0
    alone): its labels and scores against onnxruntime's."""
    rng = np.random.default_rng(8)
    at = _random_forest(rng, trees=5, depth=3, features=4, targets=classes)
    at = {k.replace("target_", "class_"): v for k, v in at.items()}
    node = _ml("TreeEnsembleClassifier", ["x"], ["label", "y"], classlabels_int64s=labels,
               post_transform=transform, **at)  # fmt: skip
    x = np.round(rng.standard_normal((30, 4)), 1).astype(np.float32)
    _against_onnxruntime(ctx, _classifier_model(node, x.shape, 3), x)


def test_binary_tree_classifiers_raw_scores_are_refused_by_name():
    at = _random_forest(np.random.default_rng(3), trees=2, depth=2, features=3, targets=1)
    at = {k.replace("target_", "class_"): v for k, v in at.items()}
    node = _ml("TreeEnsembleClassifier", ["x"], ["label", "y"], classlabels_int64s=[0, 1], **at)
    with pytest.raises(UnsupportedModelError, match="ONNX's reference gives .1 - s, s."):
        from_onnx(_model([node], (4, 3), outputs=("label", "y")))


def test_a_pipeline_of_imputing_encoding_and_vectorizing(ctx):
    """SimpleImputer on the numbers, OneHotEncoder on the codes, and the two side by side
    (a ColumnTransformer), then a scaler: as sklearn-onnx writes it."""
    x = RNG.standard_normal((6, 3)).astype(np.float32)
    x[[0, 3], [1, 2]] = np.nan
    x[:, 0] = RNG.integers(0, 4, 6)
    nodes = [
        helper.make_node("Slice", ["x", "s0", "s1", "ax"], ["codes"]),
        helper.make_node("Slice", ["x", "s1", "s3", "ax"], ["numbers"]),
        _ml("Imputer", ["numbers"], ["filled"], imputed_value_floats=[0.5, -1.5],
            replaced_value_float=float("nan")),
        _ml("OneHotEncoder", ["codes"], ["hot"], cats_int64s=[0, 1, 3]),
        helper.make_node("Reshape", ["hot", "flat"], ["hot2"]),
        _ml("FeatureVectorizer", ["hot2", "filled"], ["joined"], inputdimensions=[3, 2]),
        _ml("Scaler", ["joined"], ["y"], offset=[0.0] * 5, scale=[2.0] * 5),
    ]  # fmt: skip
    model = _model(nodes, x.shape)
    for name, value in (("s0", [0]), ("s1", [1]), ("s3", [3]), ("ax", [1]), ("flat", [6, 3])):
        model.graph.initializer.append(helper.make_tensor(name, TensorProto.INT64, [len(value)],
                                                          value))  # fmt: skip
    _against_onnxruntime(ctx, model, x)


def test_imputer_of_a_given_value_and_feature_vectorizer_cuts_and_pads(ctx):
    x = RNG.integers(-2, 3, (5, 4)).astype(np.float32)
    nodes = [_ml("Imputer", ["x"], ["filled"], imputed_value_floats=[9.0],
                 replaced_value_float=0.0),
             _ml("FeatureVectorizer", ["filled", "x"], ["y"], inputdimensions=[2, 6])]  # fmt: skip
    _against_onnxruntime(ctx, _model(nodes, x.shape), x)


@pytest.mark.parametrize(
    ("kernel", "params", "one_class"),
    [("RBF", [0.3, 0.0, 0.0], 0), ("POLY", [0.5, 1.0, 3.0], 0), ("SIGMOID", [0.2, -0.1, 0.0], 0),
     ("LINEAR", [0.0, 0.0, 0.0], 0), ("RBF", [0.5, 0.0, 0.0], 1), (None, [0.0, 0.0, 0.0], 0)],
    ids=["rbf", "poly", "sigmoid", "linear", "one-class", "no-supports"],
)  # fmt: skip
def test_svm_regressor_matches_onnxruntime(ctx, kernel, params, one_class):
    """sklearn's SVR (and OneClassSVM, LinearSVR) as sklearn-onnx writes them."""
    x = RNG.standard_normal((10, 3)).astype(np.float32)
    if kernel is None:
        attrs = {"coefficients": [0.5, -1.0, 2.0], "n_supports": 0, "kernel_params": params}
    else:
        attrs = {"kernel_type": kernel, "kernel_params": params, "n_supports": 4,
                 "support_vectors": list(RNG.standard_normal(12)),
                 "coefficients": list(RNG.standard_normal(4))}  # fmt: skip
    node = _ml("SVMRegressor", ["x"], ["y"], rho=[0.25], one_class=one_class, **attrs)
    _against_onnxruntime(ctx, _model([node], x.shape), x)
