"""Index kernels (gather_elements, gather_nd, scatter_elements, scatter_nd, onehot) and
position kernels (argmax, argmin, topk) against ONNX's reference evaluator: the definition
the ONNX node tests check against. Results must be exact (no arithmetic, or integer
positions); indices out of range must raise a device error, never read or write."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_harness import infer, onnx_reference, operand, run, run_all, spec

from mnrt.device import dtypes as dt
from mnrt.errors import DeviceExecutionError, DTypeError, ShapeError

pytest.importorskip("onnx")


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# --- gather_elements / scatter_elements --------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    seed=st.integers(0, 2**31),
    data=st.data(),
)
def test_gather_elements_matches_onnx(shape, seed, data):
    rng = _rng(seed)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    a = axis % len(shape)
    idx_shape = list(shape)
    idx_shape[a] = data.draw(st.integers(1, 5))
    x = rng.standard_normal(shape).astype(np.float32)
    idx = rng.integers(-shape[a], shape[a], idx_shape).astype(np.int64)
    got = run("gather_elements", operand(x), operand(idx), axis=axis)
    (want,) = onnx_reference("GatherElements", x, idx, axis=a)  # its reference needs a >= 0
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", ["float", "int64", "int8", "uint32"])
def test_scatter_elements_matches_onnx(reduction, dtype):
    d = dt.dtype(dtype)
    rng = _rng(1)
    x = rng.integers(0, 5, (3, 4)).astype(d.storage)
    upd = rng.integers(0, 5, (2, 4)).astype(d.storage)
    # Distinct rows per column for 'none' (ONNX leaves the order of duplicates open).
    idx = np.stack([rng.permutation(3)[:2] for _ in range(4)], axis=1).astype(np.int64)
    if reduction != "none":
        idx[1] = idx[0]  # duplicates combine
    got = run("scatter_elements", operand(x, d), operand(idx), operand(upd, d), axis=0,
              reduction=reduction)  # fmt: skip
    (want,) = onnx_reference("ScatterElements", x, idx, upd, axis=0, reduction=reduction)
    np.testing.assert_array_equal(got, want)


def test_scatter_elements_negative_axis_and_indices():
    x = np.zeros((2, 5), np.float32)
    idx = np.array([[-1, 0], [1, -2]], np.int32)
    upd = np.array([[1, 2], [3, 4]], np.float32)
    got = run("scatter_elements", operand(x), operand(idx), operand(upd), axis=-1)
    np.testing.assert_array_equal(got, [[2, 0, 0, 0, 1], [0, 3, 0, 4, 0]])


# --- gather_nd / scatter_nd ---------------------------------------------------------------


@pytest.mark.parametrize(
    "data_shape,idx,batch_dims",
    [
        ((2, 2), [[0, 0], [1, 1]], 0),
        ((2, 2), [[1], [0]], 0),
        ((2, 2, 2), [[0, 1], [1, 0]], 0),
        ((2, 2, 2), [[[0, 1]], [[1, 0]]], 0),
        ((2, 2, 2), [[1], [0]], 1),
        ((2, 3, 4), [[[-1, 2], [0, 0]], [[1, -4], [2, 3]]], 1),
    ],
)
def test_gather_nd_matches_onnx(data_shape, idx, batch_dims):
    x = np.arange(np.prod(data_shape), dtype=np.int64).reshape(data_shape)
    i = np.array(idx, np.int64)
    got = run("gather_nd", operand(x), operand(i), batch_dims=batch_dims)
    (want,) = onnx_reference("GatherND", x, i, batch_dims=batch_dims)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_matches_onnx(reduction):
    x = np.arange(1, 65, dtype=np.float32).reshape(4, 4, 4)
    idx = np.array([[0], [2]] if reduction == "none" else [[0], [0]], np.int64)
    upd = _rng(2).integers(1, 9, (2, 4, 4)).astype(np.float32)
    got = run("scatter_nd", operand(x), operand(idx), operand(upd), reduction=reduction)
    (want,) = onnx_reference("ScatterND", x, idx, upd, reduction=reduction)
    np.testing.assert_array_equal(got, want)


def test_scatter_nd_elementwise_tuples_on_int64_above_2_to_53():
    big = 2**60 + 1
    x = np.full((2, 3), big, np.int64)
    idx = np.array([[0, 1], [1, 2], [0, 1]], np.int64)
    upd = np.array([1, 2, 3], np.int64)
    got = run("scatter_nd", operand(x), operand(idx), operand(upd), reduction="add")
    assert got.tolist() == [[big, big + 4, big], [big, big, big + 2]]


# --- onehot ----------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_onehot_matches_onnx(axis):
    idx = np.array([[1, -1, 9], [0, 2, -4]], np.int64)  # 9 and -4 are out of range
    values = np.array([2, 7], np.float32)
    got = run("onehot", operand(idx), operand(values), depth=3, axis=axis)
    (want,) = onnx_reference("OneHot", idx, np.array(3, np.int64), values, axis=axis)
    np.testing.assert_array_equal(got, want)


def test_onehot_float_indices_truncate():
    idx = np.array([1.9, -0.5, 2.0], np.float32)
    got = run("onehot", operand(idx), operand(np.array([0, 1], np.int32)), depth=3)
    assert got.tolist() == [[0, 1, 0], [1, 0, 0], [0, 0, 1]]


# --- out of range and shape/dtype errors ------------------------------------------------


@pytest.mark.parametrize(
    "name,ins,attrs",
    [
        ("gather_elements", [np.zeros((2, 2)), np.array([[0, 2]])], {}),
        ("gather_nd", [np.zeros((2, 2)), np.array([[0, -3]])], {}),
        ("scatter_elements", [np.zeros((2, 2)), np.array([[5, 0]]), np.zeros((1, 2))], {}),
        ("scatter_nd", [np.zeros((2, 2)), np.array([[2]]), np.zeros((1, 2))], {}),
    ],
)
def test_indices_out_of_range_are_device_errors(name, ins, attrs):
    data, idx, *rest = ins
    ops = [operand(data.astype(np.float32)), operand(idx.astype(np.int64))]
    ops += [operand(r.astype(np.float32)) for r in rest]
    with pytest.raises(DeviceExecutionError, match=f"kernel '{name}': index .* out of range"):
        run(name, *ops, **attrs)


@pytest.mark.parametrize(
    "name,specs,attrs,error,match",
    [
        ("gather_elements", [spec((2, 2)), spec((2, 2))], {}, DTypeError, "int32 or int64"),
        ("gather_elements", [spec((2, 2)), spec((3, 2), "int64")], {"axis": 1}, ShapeError, "rank"),
        ("gather_nd", [spec((2, 2)), spec((1, 3), "int64")], {}, ShapeError, "index tuples"),
        ("gather_nd", [spec((2, 2)), spec((3, 1), "int64")], {"batch_dims": 1}, ShapeError,
         "batch"),
        ("scatter_nd", [spec((2, 2)), spec((1, 1), "int64"), spec((1, 3))], {}, ShapeError,
         "updates"),
        ("scatter_elements", [spec((2,), "bool"), spec((2,), "int64"), spec((2,), "bool")],
         {"reduction": "add"}, DTypeError, "bool"),
        ("onehot", [spec((2,), "int64"), spec((3,))], {"depth": 2}, ShapeError, "values"),
    ],
)  # fmt: skip
def test_index_kernels_refuse_bad_operands(name, specs, attrs, error, match):
    with pytest.raises(error, match=match):
        infer(name, *specs, **attrs)


# --- argmax / argmin / topk ------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    op=st.sampled_from(["argmax", "argmin"]),
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    keepdims=st.booleans(),
    last=st.booleans(),
    dtype=st.sampled_from(["float", "int64", "uint8", "half"]),
    seed=st.integers(0, 2**31),
    data=st.data(),
)
def test_argmax_argmin_match_onnx(op, shape, keepdims, last, dtype, seed, data):
    d = dt.dtype(dtype)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = _rng(seed).integers(0, 4, shape).astype(np.float32)  # small range: many ties
    xo = operand(x, d)
    got = run(op, xo, axis=axis, keepdims=keepdims, select_last_index=last)
    ref_in = d.from_storage(xo[0])
    (want,) = onnx_reference(
        "ArgMax" if op == "argmax" else "ArgMin",
        ref_in,
        axis=axis,
        keepdims=int(keepdims),
        select_last_index=int(last),
    )
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


def test_argmax_finds_the_first_nan_and_refuses_an_empty_axis():
    x = np.array([1.0, np.nan, 5.0, np.nan], np.float32)
    assert run("argmax", operand(x)).tolist() == [1]
    with pytest.raises(ShapeError, match="empty"):
        infer("argmax", spec((0, 3)), axis=0)


@settings(max_examples=30, deadline=None)
@given(
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    largest=st.booleans(),
    dtype=st.sampled_from(["float", "int64", "int32", "uint16"]),
    seed=st.integers(0, 2**31),
    data=st.data(),
)
def test_topk_matches_onnx_with_ties_by_lower_index(shape, largest, dtype, seed, data):
    d = dt.dtype(dtype)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    k = data.draw(st.integers(0, shape[axis]))
    x = _rng(seed).integers(0, 4, shape).astype(d.storage)  # many ties
    values, indices = run_all("topk", operand(x, d), k=k, axis=axis, largest=largest)
    want_v, want_i = onnx_reference(
        "TopK", x, np.array([k], np.int64), n_outputs=2, axis=axis, largest=int(largest)
    )
    np.testing.assert_array_equal(values, want_v)
    np.testing.assert_array_equal(indices, want_i)
    assert indices.dtype == np.int64


def test_topk_int64_values_stay_exact():
    x = np.array([2**62 + 1, 2**62, 2**62 + 2], np.int64)
    values, indices = run_all("topk", operand(x), k=2)
    assert values.tolist() == [2**62 + 2, 2**62 + 1] and indices.tolist() == [2, 0]


def test_topk_refuses_k_beyond_the_axis():
    with pytest.raises(ShapeError, match="k = 4"):
        infer("topk", spec((2, 3)), k=4)
