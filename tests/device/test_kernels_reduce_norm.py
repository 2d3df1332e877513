"""Reductions (sum, mean, max, min) and normalisations (softmax, log_softmax, layernorm,
rmsnorm) against row-by-row Python references.

Tolerances: max and min are exact. A float32 sum of n terms is within n * 2**-24 * sum|x|
of the exact sum, which is the bound used (times two); means divide that by n. The
normalisations use the float32 golden tolerance (rtol 1e-5, atol 1e-6) against float64
math; half results must match the float64 reference rounded to half within one half ulp.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from kernel_harness import infer, operand, run, spec

from mnrt.device import dtypes as dt
from mnrt.device.emulator import EmulatedDevice
from mnrt.device.kernels import lookup
from mnrt.device.numerics import round_to_half
from mnrt.errors import DTypeError, KernelAttributeError, ShapeError

EPS32 = 2.0**-24


def rows(x: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, tuple[int, ...]]:
    """x with the reduced axes moved last and flattened: one row per output element."""
    kept = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, kept + list(axes))
    out_shape = tuple(x.shape[a] for a in kept)
    return moved.reshape(math.prod(out_shape), math.prod(x.shape[a] for a in axes)), out_shape


def keep(shape: tuple[int, ...], axes: tuple[int, ...], rank: int) -> tuple[int, ...]:
    it = iter(shape)
    return tuple(1 if a in axes else next(it) for a in range(rank))


@st.composite
def reduction_cases(draw, allow_empty: bool):
    x = draw(
        hnp.arrays(
            np.float32,
            hnp.array_shapes(min_dims=0, max_dims=4, min_side=0 if allow_empty else 1, max_side=4),
            elements=st.floats(-100, 100, width=32),
        )
    )
    axes = draw(st.lists(st.integers(0, max(x.ndim - 1, 0)), unique=True, max_size=x.ndim))
    signed = tuple(a - x.ndim if draw(st.booleans()) else a for a in axes)
    return x, signed, draw(st.booleans())


@settings(max_examples=40, deadline=None)
@given(case=reduction_cases(allow_empty=True), name=st.sampled_from(["sum", "mean"]))
def test_sum_and_mean_property(case, name):
    x, axes, keepdims = case
    pos = tuple(sorted(a % x.ndim for a in axes)) if axes else tuple(range(x.ndim))
    y = run(name, operand(x), axes=axes, keepdims=keepdims)
    flat, out_shape = rows(x, pos)
    n = flat.shape[1]
    ref = np.array([math.fsum(map(float, r)) for r in flat])
    mag = np.array([math.fsum(abs(float(v)) for v in r) for r in flat])
    if name == "mean":
        ref, mag = (ref / n, mag / n) if n else (np.full_like(ref, np.nan), ref)
    shape = keep(out_shape, pos, x.ndim) if keepdims else out_shape
    assert y.shape == shape and y.dtype == np.float32
    err = np.abs(y.ravel().astype(np.float64) - ref)
    assert np.all((err <= 2 * n * EPS32 * mag + 1e-30) | (np.isnan(ref) & np.isnan(y.ravel())))


@settings(max_examples=40, deadline=None)
@given(case=reduction_cases(allow_empty=False), name=st.sampled_from(["max", "min"]))
def test_max_and_min_property(case, name):
    x, axes, keepdims = case
    pos = tuple(sorted(a % x.ndim for a in axes)) if axes else tuple(range(x.ndim))
    y = run(name, operand(x), axes=axes, keepdims=keepdims)
    flat, out_shape = rows(x, pos)
    pick = max if name == "max" else min
    ref = [pick(map(float, r)) for r in flat]
    assert y.shape == (keep(out_shape, pos, x.ndim) if keepdims else out_shape)
    assert y.ravel().tolist() == ref


def test_integer_sum_wraps_in_its_own_width():
    x = np.array([[2**30, 2**30, 2**30], [-(2**31), -1, 5]], np.int32)
    y = run("sum", operand(x), axes=(1,), keepdims=False)
    assert y.dtype == np.int32
    assert y.tolist() == [-(2**30), -(2**31) + 4]
    u = run("sum", operand(np.array([200, 100], np.uint8)))
    assert u.dtype == np.uint8 and u.tolist() == [44]
    assert run("max", operand(np.array([[3, -9], [7, 1]], np.int32)), axes=(0,)).tolist() == [
        [7, 1]
    ]


def test_reductions_of_special_values():
    x = operand(np.array([1.0, np.nan, 3.0], np.float32))
    assert np.isnan(run("max", x)).all() and np.isnan(run("min", x)).all()
    assert np.isnan(run("mean", operand(np.zeros((0, 2), np.float32)), axes=(0,))).all()
    assert run("sum", operand(np.zeros((0, 2), np.float32)), keepdims=False).tolist() == 0.0


@pytest.mark.parametrize("dtype", ["half", "float16"])
def test_half_reductions_accumulate_in_float32(dtype):
    # 1 + 1024 * 2**-10: a half accumulator would never leave 1.0.
    x = operand(np.array([1.0] + [2.0**-10] * 1024), dtype)
    assert run("sum", x).tolist() == [2.0]
    assert run("mean", x).tolist() == pytest.approx([2.0 / 1025], rel=2.0**-9)


REDUCE_ERRORS = [
    ("sum", DTypeError, "takes", spec((2,), "bool"), {}),
    ("mean", DTypeError, "takes", spec((2,), "int32"), {}),
    ("max", ShapeError, "out of range", spec((2, 3)), {"axes": (2,)}),
    ("min", ShapeError, "out of range", spec((2, 3)), {"axes": (-3,)}),
    ("sum", KernelAttributeError, "twice", spec((2, 3)), {"axes": (1, -1)}),
    ("max", ShapeError, "empty axis", spec((2, 0)), {"axes": (1,)}),
    ("min", ShapeError, "empty axis", spec((0,)), {}),
    ("mean", KernelAttributeError, "'keepdims' must be bool", spec((2,)), {"keepdims": 1}),
]


@pytest.mark.parametrize(("name", "error", "fragment", "x", "attrs"), REDUCE_ERRORS)
def test_reduction_infer_errors(name, error, fragment, x, attrs):
    with pytest.raises(error, match=f"kernel '{name}'.*{fragment}"):
        infer(name, x, **attrs)


# --- softmax and log_softmax -----------------------------------------------------------


def softmax_rows(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    moved = np.moveaxis(x.astype(np.float64), axis, -1)
    out = np.empty_like(moved)
    for idx in np.ndindex(moved.shape[:-1]):
        r = [float(v) for v in moved[idx]]
        top = max(r)
        total = math.fsum(math.exp(v - top) for v in r)
        out[idx] = [v - top - math.log(total) if log else math.exp(v - top) / total for v in r]
    return np.moveaxis(out, -1, axis)


@settings(max_examples=30, deadline=None)
@given(
    x=hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=1, max_dims=3, max_side=5),
        elements=st.floats(-50, 50, width=32),
    ),
    axis_seed=st.integers(0, 10),
    name=st.sampled_from(["softmax", "log_softmax"]),
)
def test_softmax_property(x, axis_seed, name):
    axis = axis_seed % x.ndim - (x.ndim if axis_seed % 2 else 0)
    y = run(name, operand(x), axis=axis)
    ref = softmax_rows(x, axis, name == "log_softmax")
    np.testing.assert_allclose(y, ref, rtol=dt.FLOAT.rtol, atol=dt.FLOAT.atol)


def test_softmax_is_stable_and_handles_infinities():
    big = operand(np.array([[1000.0, 1000.0], [-1000.0, 0.0]], np.float32))
    np.testing.assert_allclose(run("softmax", big), [[0.5, 0.5], [0.0, 1.0]])
    assert run("log_softmax", big)[0].tolist() == pytest.approx([-math.log(2)] * 2)
    ninf = operand(np.array([[0.0, -np.inf], [-np.inf, -np.inf]], np.float32))
    s, ls = run("softmax", ninf), run("log_softmax", ninf)
    assert s[0].tolist() == [1.0, 0.0] and ls[0].tolist() == [0.0, -np.inf]
    assert np.isnan(s[1]).all() and np.isnan(ls[1]).all()
    assert run("softmax", operand(np.zeros((3, 0), np.float32))).shape == (3, 0)


@pytest.mark.parametrize("dtype", ["half", "float16", "double"])
def test_softmax_other_dtypes(dtype):
    d = dt.dtype(dtype)
    x = operand(np.random.default_rng(9).uniform(-5, 5, (4, 7)), d)
    ref = softmax_rows(d.from_storage(x[0]), -1, False)
    y = run("softmax", x)
    close_ref = round_to_half(ref) if d is dt.HALF else ref
    np.testing.assert_allclose(y, close_ref, rtol=d.rtol, atol=d.atol)


# --- layernorm and rmsnorm -------------------------------------------------------------


def norm_rows(x, axis, eps, scale, bias, rms: bool) -> np.ndarray:
    x = x.astype(np.float64)
    lead = x.shape[:axis]
    flat = x.reshape(math.prod(lead), -1)
    out = np.empty_like(flat)
    for i, r in enumerate(flat):
        vals = [float(v) for v in r]
        if rms:
            mean, denom = 0.0, math.sqrt(math.fsum(v * v for v in vals) / len(vals) + eps)
        else:
            mean = math.fsum(vals) / len(vals)
            denom = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / len(vals) + eps)
        out[i] = [(v - mean) / denom for v in vals]
    out = out.reshape(x.shape)
    if scale is not None:
        out = out * scale
    if bias is not None:
        out = out + bias
    return out


@settings(max_examples=30, deadline=None)
@given(
    shape=hnp.array_shapes(min_dims=1, max_dims=3, max_side=5),
    axis_seed=st.integers(0, 5),
    with_scale=st.booleans(),
    with_bias=st.booleans(),
    rms=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_layernorm_and_rmsnorm_property(shape, axis_seed, with_scale, with_bias, rms, seed):
    rng = np.random.default_rng(seed)
    axis = axis_seed % len(shape)
    x = rng.uniform(-3, 3, shape).astype(np.float32)
    feat = shape[axis:]
    scale = rng.uniform(-2, 2, feat).astype(np.float32) if with_scale else None
    bias = rng.uniform(-2, 2, feat).astype(np.float32) if with_bias and not rms else None
    ins = [operand(x), None if scale is None else operand(scale)]
    if not rms:
        ins.append(None if bias is None else operand(bias))
    while ins[-1] is None:
        ins.pop()
    name = "rmsnorm" if rms else "layernorm"
    eps = 1e-3
    y = run(name, *ins, axis=axis - len(shape), epsilon=eps)
    ref = norm_rows(x, axis, eps, scale, bias, rms)
    np.testing.assert_allclose(y, ref, rtol=4 * dt.FLOAT.rtol, atol=4 * dt.FLOAT.atol)


def test_layernorm_bias_without_scale_and_default_epsilon():
    x = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)
    bias = np.array([10.0, 0.0, 0.0, 0.0], np.float32)
    y = run("layernorm", operand(x), None, operand(bias))
    np.testing.assert_allclose(y, norm_rows(x, 1, 1e-5, None, bias, False), rtol=1e-5, atol=1e-6)
    r = run("rmsnorm", operand(x))
    np.testing.assert_allclose(r, norm_rows(x, 1, 1e-6, None, None, True), rtol=1e-5, atol=1e-6)


def test_layernorm_writing_over_its_own_scale_and_bias():
    # Normalising 1-D x, scale and bias have x's shape, so a program may bind either to the
    # output: the kernel must read them before it writes the result.
    x = np.array([1.0, 2.0, 4.0, 8.0], np.float32)
    scale = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    bias = np.array([0.5, 0.0, -1.0, 2.0], np.float32)
    want = norm_rows(x[None], 1, 1e-5, scale, bias, False)[0]
    kdef = lookup("layernorm")
    attrs = kdef.check_attrs({})
    for alias in ("scale", "bias"):
        s, b = scale.copy(), bias.copy()
        out = s if alias == "scale" else b
        ins = [(x, dt.FLOAT), (s, dt.FLOAT), (b, dt.FLOAT)]
        EmulatedDevice.execute(kdef, attrs, ins, [(out, dt.FLOAT)])
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["layernorm", "rmsnorm"])
def test_norm_in_half_rounds_float32_statistics(name):
    x = operand(np.random.default_rng(10).uniform(-4, 4, (3, 16)), "half")
    xv = dt.HALF.from_storage(x[0])
    ref = norm_rows(xv, 1, 1e-5 if name == "layernorm" else 1e-6, None, None, name == "rmsnorm")
    np.testing.assert_allclose(
        run(name, x), round_to_half(ref), rtol=dt.HALF.rtol, atol=dt.HALF.atol
    )


NORM_ERRORS = [
    ("softmax", DTypeError, "floating-point", [spec((2, 3), "int32")], {}),
    ("log_softmax", ShapeError, "axis 2 is out of range", [spec((2, 3))], {"axis": 2}),
    (
        "layernorm",
        ShapeError,
        "scale must have the normalised shape",
        [spec((2, 3, 4)), spec((4,))],
        {"axis": 1},
    ),
    ("layernorm", ShapeError, "bias must have", [spec((2, 3)), None, spec((1, 3))], {}),
    ("layernorm", DTypeError, "cast", [spec((2, 3)), spec((3,), "half")], {}),
    (
        "layernorm",
        KernelAttributeError,
        "'epsilon' must be >= 0",
        [spec((2, 3))],
        {"epsilon": -1.0},
    ),
    ("rmsnorm", DTypeError, "floating-point", [spec((2, 3), "uint8")], {}),
    ("rmsnorm", KernelAttributeError, "takes inputs", [spec((2, 3)), spec((3,)), spec((3,))], {}),
]


@pytest.mark.parametrize(("name", "error", "fragment", "ins", "attrs"), NORM_ERRORS)
def test_norm_infer_errors(name, error, fragment, ins, attrs):
    with pytest.raises(error, match=f"kernel '{name}'.*{fragment}"):
        infer(name, *ins, **attrs)


# --- prod, l1, l2, sum_square, log_sum, logsumexp (ONNX Reduce* definitions) -------------

_ONNX_REDUCE = {
    "prod": "ReduceProd",
    "l1": "ReduceL1",
    "l2": "ReduceL2",
    "sum_square": "ReduceSumSquare",
    "log_sum": "ReduceLogSum",
    "logsumexp": "ReduceLogSumExp",
}


@pytest.mark.parametrize("keepdims", [True, False])
@pytest.mark.parametrize("axes", [(), (0,), (-1,), (0, 2)])
@pytest.mark.parametrize("name", sorted(_ONNX_REDUCE))
def test_new_reductions_match_onnx_reference(name, axes, keepdims):
    pytest.importorskip("onnx")
    from kernel_harness import onnx_reference

    x = np.random.default_rng(3).uniform(0.5, 2.0, (3, 4, 5)).astype(np.float64)
    got = run(name, operand(x, "double"), axes=axes, keepdims=keepdims)
    args = [x] if not axes else [x, np.array(axes, np.int64)]
    (want,) = onnx_reference(_ONNX_REDUCE[name], *args, keepdims=int(keepdims))
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("dtype", ["int8", "int64", "uint32"])
def test_integer_prod_l1_and_sum_square_are_exact_and_wrap(dtype):
    d = dt.dtype(dtype)
    info = np.iinfo(d.storage)
    x = np.random.default_rng(5).integers(max(info.min, -9), 10, (4, 6)).astype(d.storage)
    bits = 8 * d.itemsize

    def wrap(v: int) -> int:
        v &= (1 << bits) - 1
        return v - (1 << bits) if info.min and v >= 1 << (bits - 1) else v

    rows_ = x.tolist()
    assert run("prod", operand(x, d), axes=(1,), keepdims=False).tolist() == [
        wrap(math.prod(r)) for r in rows_
    ]
    assert run("l1", operand(x, d), axes=(1,), keepdims=False).tolist() == [
        wrap(sum(abs(v) for v in r)) for r in rows_
    ]
    assert run("sum_square", operand(x, d), axes=(1,), keepdims=False).tolist() == [
        wrap(sum(v * v for v in r)) for r in rows_
    ]


def test_logsumexp_does_not_overflow_and_empty_is_minus_inf():
    x = np.array([[1000.0, 1000.0], [-np.inf, -np.inf]], np.float32)
    y = run("logsumexp", operand(x), axes=(1,), keepdims=False)
    np.testing.assert_allclose(y[0], 1000.0 + math.log(2), rtol=1e-6)
    assert y[1] == -np.inf
    empty = run("logsumexp", operand(np.zeros((2, 0), np.float32)), axes=(1,), keepdims=False)
    assert empty.tolist() == [-np.inf, -np.inf]


def test_max_and_min_on_bool_are_any_and_all():
    x = np.array([[True, False], [False, False]])
    assert run("max", operand(x), axes=(1,), keepdims=False).tolist() == [True, False]
    assert run("min", operand(x), axes=(1,), keepdims=False).tolist() == [False, False]
    with pytest.raises(DTypeError, match="kernel 'l2'"):
        infer("l2", spec((2,), "int32"))
