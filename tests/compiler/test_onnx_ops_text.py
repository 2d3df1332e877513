"""The TfIdfVectorizer converter against onnxruntime: n-gram counts over integer token ids
with skips, every mode, weights, 1-D and 2-D input, and the errors of a bad node."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import TensorProto, helper
from onnx_one_node import run

import mnrt
from mnrt.compiler.onnx import InvalidModelError, UnsupportedModelError, from_onnx

RNG = np.random.default_rng(41)
# unigrams 2, 3, 5; bigrams (2, 3), (3, 3), (5, 2); trigram (2, 3, 5)
POOL = {"pool_int64s": [2, 3, 5, 2, 3, 3, 3, 5, 2, 2, 3, 5], "ngram_counts": [0, 3, 9],
        "ngram_indexes": [6, 0, 1, 2, 3, 4, 5]}  # fmt: skip


def _model(shape, **attrs):
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs)
    x = helper.make_tensor_value_info("x", TensorProto.INT64, shape)
    graph = helper.make_graph([node], "t", [x], [helper.make_tensor_value_info("y", 1, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize(
    ("mode", "grams", "skips", "weights"),
    [("TF", (1, 3), 0, None), ("TF", (1, 2), 2, None), ("TF", (2, 3), 1, None),
     ("IDF", (1, 3), 1, None), ("IDF", (1, 3), 1, [0.5, 1, 2, 3, 4, 5, 6]),
     ("TFIDF", (1, 2), 3, [1, 2, 0.5, 1, 1, 3, 0.25])],
    ids=["tf", "tf-skips", "tf-no-unigrams", "idf", "idf-weights", "tfidf-weights"],
)  # fmt: skip
@pytest.mark.parametrize("shape", [(4, 12), (9,)])
def test_tfidf_vectorizer_matches_onnxruntime(ctx, mode, grams, skips, weights, shape):
    ort = pytest.importorskip("onnxruntime")
    x = RNG.choice([2, 3, 5, 7], shape).astype(np.int64)
    attrs = {"mode": mode, "min_gram_length": grams[0], "max_gram_length": grams[1],
             "max_skip_count": skips, **POOL}  # fmt: skip
    if weights:
        attrs["weights"] = [float(w) for w in weights]
    model = _model(list(shape), **attrs)
    # ONNX's reference weighs output column i by weight i; the spec and onnxruntime, the
    # pool's n-gram i: where they differ, goldens come from mnrt's own run
    unreliable = mnrt.compiler.onnx.evaluator_unreliable_ops(model)
    assert unreliable == (["TfIdfVectorizer"] if weights else [])
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    (got,) = run(ctx, model, {"x": x})
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_bad_tfidf_vectorizers_are_refused_by_name():
    strings = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1,
                               max_gram_length=1, max_skip_count=0, pool_strings=["a", "b"],
                               ngram_counts=[0], ngram_indexes=[0, 1])  # fmt: skip
    model = _model([3])
    model.graph.node[0].CopyFrom(strings)
    with pytest.raises(UnsupportedModelError, match="pool_strings"):
        from_onnx(model)
    bad = _model([3], mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=0,
                 pool_int64s=[1, 2, 3], ngram_counts=[0, 2], ngram_indexes=[0, 1, 2])  # fmt: skip
    with pytest.raises(InvalidModelError, match="do not make n-grams of 2"):
        from_onnx(bad)


def test_a_column_index_past_the_device_is_refused_before_any_allocation():
    # ngram_indexes names the output column of each n-gram: one of 2**40 made the importer
    # allocate an (n-grams, 2**40) matrix (a fuzz of mutated node cases found it)
    far = {**POOL, "ngram_indexes": [6, 0, 1, 2**40, 3, 4, 5]}
    model = _model([9], mode="TF", min_gram_length=1, max_gram_length=3, max_skip_count=0, **far)
    with pytest.raises(InvalidModelError, match="n-gram-to-column matrix of shape \\(7, "):
        from_onnx(model)


def test_skips_longer_than_a_row_count_as_its_longest(ctx):
    # max_skip_count 2**31 looped over every distance up to it (a fuzz found the hang)
    x = RNG.choice([2, 3, 5, 7], (4, 12)).astype(np.int64)
    attrs = {"mode": "TF", "min_gram_length": 2, "max_gram_length": 3, **POOL}
    (far,) = run(ctx, _model([4, 12], max_skip_count=2**31, **attrs), {"x": x})
    (whole_row,) = run(ctx, _model([4, 12], max_skip_count=11, **attrs), {"x": x})
    np.testing.assert_array_equal(far, whole_row)
