"""Classic machine-learning ops (the ai.onnx.ml domain, as sklearn-onnx writes them for a
scikit-learn pipeline's preprocessing and linear models): Binarizer, Scaler, Imputer and
Normalizer are elementwise and row reductions, OneHotEncoder a comparison with the
categories, FeatureVectorizer a concatenation, ArrayFeatureExtractor a gather of columns,
LinearRegressor and LinearClassifier one GEMM with their coefficients (the classifier's
label an argmax of the scores, gathered from its integer labels), and SVMRegressor its
kernel against every support vector (a GEMM, or a distance for RBF) times the dual
coefficients."""

from __future__ import annotations

import math
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


def _rows(cx: Ctx, node: Any, op: str) -> Symbol:
    """The op's X, in float, checked to be a batch of rows [N, C]."""
    x = _as_float(cx, cx.sym(node.input[0]))
    if len(cx.shape(x)) != 2:
        raise Invalid(f"X has shape {cx.shape(x)}; {op} takes [N, C]")
    return x


def _untransformed(at: Attrs) -> None:
    """A regressor's post_transform: NONE only."""
    transform = at.get("post_transform", "NONE")
    if transform != "NONE":
        raise Unsupported(f"post_transform={transform}")


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
    x = _rows(cx, node, "LinearRegressor")
    _untransformed(at)
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
    x = _rows(cx, node, "LinearClassifier")
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


def imputer(cx: Ctx, node: Any, at: Attrs) -> list:
    """Missing values (NaN, or those equal to replaced_value_*) replaced by each column's
    imputed value (or the one value for every column)."""
    x = cx.sym(node.input[0])
    if len(cx.shape(x)) != 2:
        raise Invalid(f"X has shape {cx.shape(x)}; Imputer takes [N, C]")
    floats, ints = at.get("imputed_value_floats"), at.get("imputed_value_int64s")
    replaced = (float(at.get("replaced_value_float", 0.0)) if floats
                else float(at.get("replaced_value_int64", 0)))  # fmt: skip
    if not floats and not ints:
        raise Invalid("imputed_value_floats or imputed_value_int64s must give the values")
    values = _floats(at, "imputed_value_floats" if floats else "imputed_value_int64s",
                     cx.shape(x)[1])  # fmt: skip
    if math.isnan(replaced):
        missing = cx.op("isnan", x)
    else:
        missing = cx.op("equal", x, cx.param(np.array(replaced), like=x, stem="replaced"))
    return [cx.op("where", missing, cx.param(values, like=x, stem="imputed"), x)]


def feature_vectorizer(cx: Ctx, node: Any, at: Attrs) -> list:
    """The inputs' columns side by side, each cut or zero-padded to its inputdimensions
    entry (a 1-D input is one column), in float."""
    sizes = [int(v) for v in at.get("inputdimensions") or []]
    names = [n for n in node.input if n]
    if len(sizes) != len(names):
        raise Invalid(f"inputdimensions gives {len(sizes)} sizes for {len(names)} inputs")
    parts = []
    for name, size in zip(names, sizes):
        v = _as_float(cx, cx.sym(name))
        if len(cx.shape(v)) == 1:
            v = cx.reshape(v, (cx.shape(v)[0], 1))
        if len(cx.shape(v)) != 2:
            raise Invalid(f"input '{name}' has shape {cx.shape(v)}; each must be [N] or [N, C]")
        have = cx.shape(v)[1]
        if have > size:
            v = cx.op("slice", v, starts=[0], ends=[size], axes=[1])
        elif have < size:
            zeros = cx.op("fill", shape=[cx.shape(v)[0], size - have], value=0.0, dtype="float")
            v = cx.op("concat", v, zeros, axis=1)
        parts.append(v)
    return [parts[0] if len(parts) == 1 else cx.op("concat", *parts, axis=1)]


def one_hot_encoder(cx: Ctx, node: Any, at: Attrs) -> list:
    """A new last axis, 1.0 at the input's category among cats_int64s (all 0.0 for one not
    among them); zeros=0, which makes an unknown category an error, is refused, as the
    device would have to stop the run on a value."""
    if at.get("cats_strings"):
        raise Unsupported("cats_strings: the device holds no strings (encode integers)")
    cats = [int(v) for v in at.get("cats_int64s") or []]
    if not cats:
        raise Invalid("cats_int64s must list the categories")
    if not int(at.get("zeros", 1)):
        raise Unsupported("zeros=0 (an unknown category an error, which a run would raise)")
    x = cx.sym(node.input[0])
    if cx.dtype(x).name != "int64":  # floats truncate, as onnxruntime compares them
        x = cx.op("cast", x, to="int64")
    same = cx.op("equal", cx.reshape(x, (*cx.shape(x), 1)),
                 cx.param(np.asarray(cats, np.int64), stem="categories"))  # fmt: skip
    return [cx.op("cast", same, to="float")]


def svm_regressor(cx: Ctx, node: Any, at: Attrs) -> list:
    """Sum over the support vectors of coefficient times kernel(x, vector), plus rho: the
    kernels LINEAR (x . v), POLY ((gamma x . v + coef0) ** degree), SIGMOID (tanh of the
    same) and RBF (exp(-gamma |x - v|^2), the squared distance as |x|^2 - 2 x . v + |v|^2);
    with no support vectors, x . coefficients + rho. one_class gives the sign, 1 or -1."""
    x = _rows(cx, node, "SVMRegressor")
    _untransformed(at)
    at.get("n_targets")
    columns = cx.shape(x)[1]
    coefficients = np.asarray(at.get("coefficients") or [], np.float64)
    rho = np.asarray(at.get("rho") or [0.0], np.float64)[:1]
    supports = int(at.get("n_supports", 0))
    kind = (at.get("kernel_type", "LINEAR") if supports else "LINEAR").upper()
    gamma, coef0, degree = [*(at.get("kernel_params") or []), 0.0, 0.0, 0.0][:3]

    def const(value: Any, stem: str) -> Symbol:
        return cx.param(np.asarray(value, np.float64), like=x, stem=stem)

    if supports == 0:
        if coefficients.size != columns:
            raise Invalid(f"{coefficients.size} coefficients for {columns} columns")
        y = cx.op("gemm", x, const(coefficients.reshape(columns, 1), "coefficients"))
    else:
        vectors = np.asarray(at.get("support_vectors") or [], np.float64)
        if vectors.size != supports * columns or coefficients.size != supports:
            raise Invalid(f"{supports} support vectors of {columns} columns need "
                          f"{supports * columns} values and {supports} coefficients")  # fmt: skip
        vectors = vectors.reshape(supports, columns)
        dots = cx.op("gemm", x, const(vectors.T, "support_vectors"))  # [N, supports]
        if kind == "LINEAR":
            k = dots
        elif kind in ("POLY", "SIGMOID"):
            k = cx.op("add", cx.op("mul", dots, const(gamma, "gamma")), const(coef0, "coef0"))
            k = (
                cx.op("tanh", k)
                if kind == "SIGMOID"
                else cx.op("pow", k, const(int(degree), "deg"))
            )
        elif kind == "RBF":
            norms = cx.op("sum", cx.op("mul", x, x), axes=[1], keepdims=True)
            far = cx.op("sub", cx.op("add", norms, const((vectors**2).sum(axis=1), "sv_norms")),
                        cx.op("mul", dots, const(2.0, "two")))  # fmt: skip
            far = cx.op("maximum", far, const(0.0, "zero"))  # rounding below zero
            k = cx.op("exp", cx.op("mul", far, const(-gamma, "minus_gamma")))
        else:
            raise Invalid(f"kernel_type={kind}: LINEAR, POLY, RBF or SIGMOID")
        y = cx.op("gemm", k, const(coefficients.reshape(supports, 1), "dual_coefficients"))
    y = cx.op("add", y, const(rho, "rho"))
    if int(at.get("one_class", 0)):
        positive = cx.op("cast", cx.op("greater", y, const(0.0, "zero")), to=cx.dtype(x).name)
        y = cx.op("sub", cx.op("mul", positive, const(2.0, "two")), const(1.0, "one"))
    return [y]
