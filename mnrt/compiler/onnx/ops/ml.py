"""Classic machine-learning ops (the ai.onnx.ml domain, as sklearn-onnx writes them for a
scikit-learn pipeline's preprocessing and linear models): Binarizer, Scaler and Normalizer
are elementwise and row reductions, ArrayFeatureExtractor a gather of columns, and
LinearRegressor and LinearClassifier one GEMM with their coefficients (the classifier's
label an argmax of the scores, gathered from its integer labels)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid, Unsupported


def _as_float(cx: Ctx, x: Symbol) -> Symbol:
    """x as the float32 these ops answer in (the spec's tensor(float) output)."""
    if cx.dtype(x).name == "float":
        return x
    if not (cx.dtype(x).is_float or cx.dtype(x).is_integer):
        raise Unsupported(f"an input of {cx.dtype(x).name}: numbers only")
    return cx.op("cast", x, to="float")


def _floats(at: Attrs, name: str, count: int) -> np.ndarray:
    """A float list attribute of one value or `count` (one per column)."""
    values = np.asarray(at.get(name) or [], np.float64).reshape(-1)
    if values.size not in (1, count):
        raise Invalid(f"{name} holds {values.size} values; it needs 1 or {count} (one per column)")
    return values


def binarizer(cx: Ctx, node: Any, at: Attrs) -> list:
    """1 where x > threshold, else 0, in x's type."""
    x = cx.sym(node.input[0])
    threshold = cx.param(np.array(float(at.get("threshold", 0.0))), like=x, stem="threshold")
    return [cx.op("cast", cx.op("greater", x, threshold), to=cx.dtype(x).name)]


def array_feature_extractor(cx: Ctx, node: Any, at: Attrs) -> list:
    """The columns (last axis) the indices name, as onnxruntime takes them: the indices
    flattened, a 1-D input as one row."""
    x, idx = cx.sym(node.input[0]), cx.sym(node.input[1])
    if not cx.dtype(idx).is_integer:
        raise Invalid(f"Y's indices must be integers, not {cx.dtype(idx).name}")
    count = int(np.prod(cx.shape(idx)))
    picked = cx.op("gather", x, cx.reshape(idx, (count,)), axis=-1)
    if len(cx.shape(x)) == 1:
        picked = cx.reshape(picked, (1, count))
    return [picked]


def scaler(cx: Ctx, node: Any, at: Attrs) -> list:
    """(x - offset) * scale per column."""
    x = _as_float(cx, cx.sym(node.input[0]))
    columns = cx.shape(x)[-1] if cx.shape(x) else 1
    offset, scale = _floats(at, "offset", columns), _floats(at, "scale", columns)
    moved = cx.op("sub", x, cx.param(offset, like=x, stem="offset")) if offset.any() else x
    return [cx.op("mul", moved, cx.param(scale, like=x, stem="scale"))]


def normalizer(cx: Ctx, node: Any, at: Attrs) -> list:
    """Each row divided by its largest magnitude (MAX), sum of magnitudes (L1) or length
    (L2), at least 1e-30."""
    x = _as_float(cx, cx.sym(node.input[0]))
    norm = at.get("norm", "MAX")
    if len(cx.shape(x)) not in (1, 2):
        raise Invalid(f"X has shape {cx.shape(x)}; Normalizer takes [C] or [N, C]")
    axis = len(cx.shape(x)) - 1
    if norm == "MAX":
        size = cx.op("max", cx.op("abs", x), axes=[axis], keepdims=True)
    elif norm == "L1":
        size = cx.op("sum", cx.op("abs", x), axes=[axis], keepdims=True)
    elif norm == "L2":
        size = cx.op("sqrt", cx.op("sum", cx.op("mul", x, x), axes=[axis], keepdims=True))
    else:
        raise Invalid(f"norm={norm}: MAX, L1 or L2")
    floor = cx.param(np.array(1e-30), like=x, stem="norm_floor")
    return [cx.op("div", x, cx.op("maximum", size, floor))]


def linear_regressor(cx: Ctx, node: Any, at: Attrs) -> list:
    """X @ coefficients (targets rows of one coefficient per column) + intercepts."""
    x = _as_float(cx, cx.sym(node.input[0]))
    if len(cx.shape(x)) != 2:
        raise Invalid(f"X has shape {cx.shape(x)}; LinearRegressor takes [N, C]")
    transform = at.get("post_transform", "NONE")
    if transform != "NONE":
        raise Unsupported(f"post_transform={transform}")
    targets = int(at.get("targets", 1))
    coefficients = np.asarray(at.get("coefficients") or [], np.float64)
    columns = cx.shape(x)[1]
    if targets < 1 or coefficients.size != targets * columns:
        raise Invalid(f"coefficients hold {coefficients.size} values; {targets} target(s) of "
                      f"{columns} columns need {targets * columns}")  # fmt: skip
    weights = cx.param(coefficients.reshape(targets, columns).T, like=x, stem="coefficients")
    y = cx.op("gemm", x, weights)
    intercepts = _floats(at, "intercepts", targets) if at.get("intercepts") else None
    if intercepts is not None and intercepts.any():
        y = cx.op("add", y, cx.param(intercepts, like=x, stem="intercepts"))
    return [y]


def linear_classifier(cx: Ctx, node: Any, at: Attrs) -> list:
    """Scores X @ coefficients + intercepts, transformed (NONE, LOGISTIC or SOFTMAX), and
    the label of the largest. A binary model's one row of scores s becomes [-s, s], as
    ONNX's reference and, once transformed, onnxruntime take it (raw, they differ: refused)."""
    x = _as_float(cx, cx.sym(node.input[0]))
    if len(cx.shape(x)) != 2:
        raise Invalid(f"X has shape {cx.shape(x)}; LinearClassifier takes [N, C]")
    if at.get("classlabels_strings"):
        raise Unsupported("classlabels_strings: the device holds no strings (label with ints)")
    labels = [int(v) for v in at.get("classlabels_ints") or []]
    at.get("multi_class")
    columns = cx.shape(x)[1]
    coefficients = np.asarray(at.get("coefficients") or [], np.float64)
    if coefficients.size == 0 or coefficients.size % columns:
        raise Invalid(f"coefficients hold {coefficients.size} values, not a multiple of the "
                      f"{columns} columns")  # fmt: skip
    classes = coefficients.size // columns
    weights = coefficients.reshape(classes, columns).T
    intercepts = _floats(at, "intercepts", classes) if at.get("intercepts") else np.zeros(1)
    transform = at.get("post_transform", "NONE")
    if classes == 1 and len(labels) == 2 and transform == "NONE":
        raise Unsupported(
            "a binary model's raw scores (post_transform=NONE): onnxruntime gives [1 - s, s] "
            "and ONNX's reference [-s, s]; export it with LOGISTIC"
        )
    if classes == 1 and len(labels) == 2:  # binary: the second label's score, negated first
        weights = np.concatenate([-weights, weights], axis=1)
        intercepts = np.concatenate([-intercepts, intercepts])
    scores = cx.op("gemm", x, cx.param(weights, like=x, stem="coefficients"))
    if intercepts.any():
        scores = cx.op("add", scores, cx.param(intercepts, like=x, stem="intercepts"))
    if transform == "LOGISTIC":
        scores = cx.op("sigmoid", scores)
    elif transform == "SOFTMAX":
        scores = cx.op("softmax", scores, axis=1)
    elif transform != "NONE":
        raise Unsupported(f"post_transform={transform}")
    if len(labels) != cx.shape(scores)[1]:
        raise Invalid(f"{len(labels)} labels for {cx.shape(scores)[1]} classes (a binary model: "
                      "one row of coefficients, two labels)")  # fmt: skip
    best = cx.op("argmax", scores, axis=1, keepdims=False, select_last_index=False)
    label = cx.op("gather", cx.param(np.asarray(labels, np.int64)), best, axis=0)
    return [label, scores]
