"""Elementwise kernels (unary, binary, comparisons, where, cast, bitcast, fill, copy) against
per-element Python references.

Tolerances: results are checked as |y - ref| <= atol + rtol * |ref| with the dtype's own
golden tolerances from the dtype table (float 1e-5 / 1e-6, double 1e-9 / 1e-12, half
2**-8 / 2**-12, i.e. one half ulp); integer and bool results must be exact.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from kernel_harness import infer, operand, run, spec

from mnrt.device import dtypes as dt
from mnrt.device.numerics import round_to_half
from mnrt.errors import DTypeError, KernelAttributeError, ShapeError

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def close(y: np.ndarray, ref: np.ndarray, d: dt.DType) -> None:
    np.testing.assert_allclose(y, ref, rtol=d.rtol, atol=d.atol, equal_nan=True)


def elementwise(fn, *arrays: np.ndarray) -> np.ndarray:
    """Apply a Python scalar function to broadcast arrays, element by element, in float64."""
    b = np.broadcast_arrays(*arrays)
    flat = [fn(*(float(v) for v in vals)) for vals in zip(*(a.ravel() for a in b), strict=True)]
    return np.array(flat, np.float64).reshape(b[0].shape)


# --- unary -----------------------------------------------------------------------------


def _sigmoid(v: float) -> float:
    return 1 / (1 + math.exp(-v)) if v >= 0 else math.exp(v) / (1 + math.exp(v))


UNARY_REF = {
    "relu": lambda v: max(v, 0.0),
    "gelu": lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))),
    "silu": lambda v: v * _sigmoid(v),
    "sigmoid": _sigmoid,
    "tanh": math.tanh,
    "exp": math.exp,
    "log": math.log,
    "sqrt": math.sqrt,
    "rsqrt": lambda v: 1 / math.sqrt(v),
    "neg": lambda v: -v,
    "abs": abs,
    "erf": math.erf,
    "reciprocal": lambda v: 1 / v,
    "sign": lambda v: float((v > 0) - (v < 0)),
    "floor": math.floor,
    "ceil": math.ceil,
    "round": round,  # Python rounds ties to even
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "asin": math.asin,
    "acos": math.acos,
    "atan": math.atan,
    "sinh": math.sinh,
    "cosh": math.cosh,
    "asinh": math.asinh,
    "acosh": math.acosh,
    "atanh": math.atanh,
    "softplus": lambda v: math.log1p(math.exp(v)),
    "softsign": lambda v: v / (1 + abs(v)),
}
POSITIVE_ONLY = {"log", "sqrt", "rsqrt", "reciprocal"}
UNIT_INTERVAL = {"asin", "acos", "atanh"}  # defined on (-1, 1)


def _unary_input(name: str, rng: np.random.Generator, shape=(3, 17)) -> np.ndarray:
    if name in POSITIVE_ONLY:
        return rng.uniform(0.05, 20.0, shape)
    if name in UNIT_INTERVAL:
        return rng.uniform(-0.99, 0.99, shape)
    if name == "acosh":
        return rng.uniform(1.0, 20.0, shape)
    if name in ("round", "floor", "ceil"):  # ties and integers included
        return rng.integers(-12, 13, shape) / 2.0 + rng.choice([0.0, 0.1], shape)
    return rng.uniform(-6.0, 6.0, shape)


@pytest.mark.parametrize("dtype", ["float", "double", "half", "float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(UNARY_REF))
def test_unary_matches_reference(name, dtype):
    d = dt.dtype(dtype)
    x = operand(_unary_input(name, np.random.default_rng(1)), d)
    xv = d.from_storage(x[0])
    ref = elementwise(UNARY_REF[name], xv)
    y = run(name, x)
    assert y.dtype == d.read_dtype
    if d.codec is not None:  # half and bfloat16 compute in float32, then round once
        ref = d.from_storage(d.to_storage(ref))
    close(y, ref, d)


@pytest.mark.parametrize("dtype", ["float", "double"])
def test_gelu_tanh_approximation(dtype):
    xv = np.linspace(-6, 6, 97)
    c = math.sqrt(2 / math.pi)
    ref = elementwise(lambda v: 0.5 * v * (1 + math.tanh(c * (v + 0.044715 * v**3))), xv)
    close(run("gelu", operand(xv, dtype), approximate="tanh"), ref, dt.dtype(dtype))


@settings(max_examples=20, deadline=None)
@given(
    name=st.sampled_from(sorted(UNARY_REF)),
    x=hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=0, max_dims=3, max_side=5),
        elements=st.floats(-30, 30, width=32),
    ),
)
@example(name="erf", x=np.array(0.0, np.float32))  # 0-d: ufuncs return scalars for it
def test_unary_property_float32(name, x):
    if name in POSITIVE_ONLY:
        x = np.abs(x) + np.float32(0.01)
    elif name in UNIT_INTERVAL:
        x = np.tanh(x) * np.float32(0.99)
    elif name == "acosh":
        x = np.abs(x) + np.float32(1)
    y = run(name, operand(x))
    assert y.shape == x.shape and y.dtype == np.float32
    close(y, elementwise(UNARY_REF[name], x), dt.FLOAT)


def test_float32_erf_is_within_two_ulp_of_exact():
    # Both sides of the fits' seam at |z| = 1, their far end, the tails and the specials.
    rng = np.random.default_rng(7)
    x = np.concatenate(
        [
            np.linspace(-6, 6, 200_001, dtype=np.float32),
            np.nextafter(np.float32(1), [np.float32(0), np.float32(2)]),
            rng.standard_normal(50_000).astype(np.float32) * np.float32(2),
        ]
    )
    y = run("erf", operand(x)).astype(np.float64)
    exact = elementwise(math.erf, x)
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(y - exact) / ulp) <= 2.0
    specials = np.array([np.inf, -np.inf, np.nan, 1e30, -1e30, 0.0, -0.0, 1e-45], np.float32)
    y = run("erf", operand(specials))
    assert y[:2].tolist() == [1.0, -1.0] and np.isnan(y[2]) and y[3:5].tolist() == [1.0, -1.0]
    assert y[5] == 0 and np.signbit(y[6]) and y[7] > 0  # erf(z) ~ 1.13 z near 0


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float32, st.integers(1, 40), elements=st.floats(width=32)))
def test_float32_erf_of_an_element_does_not_depend_on_its_neighbours(x):
    # erf picks its evaluation by how many elements are near zero (one fit everywhere and
    # the other gathered, or both everywhere): mostly near, mostly far and mixed company
    # must give every element the same bits.
    def erf_bits(values):
        return run("erf", operand(values)).view(np.uint32)[: x.size]

    near, far = np.full(400, 0.25, np.float32), np.full(400, 3.0, np.float32)
    mixed = np.resize(np.array([0.25, 3.0], np.float32), 400)
    alone = erf_bits(x)
    for company in (near, far, mixed):
        np.testing.assert_array_equal(erf_bits(np.concatenate([x, company])), alone)


def test_unary_int32_is_exact_and_wraps():
    x = np.array([INT32_MIN, -7, 0, 5, INT32_MAX], np.int32)
    assert run("relu", operand(x)).tolist() == [0, 0, 0, 5, INT32_MAX]
    assert run("neg", operand(x)).tolist() == [INT32_MIN, 7, 0, -5, -INT32_MAX]
    assert run("abs", operand(x)).tolist() == [INT32_MIN, 7, 0, 5, INT32_MAX]


def test_unary_special_values():
    x = operand(np.array([-1.0, 0.0, np.inf, np.nan], np.float32))
    y = run("log", x)
    assert np.isnan(y[0]) and y[1] == -np.inf and y[2] == np.inf and np.isnan(y[3])
    assert run("sigmoid", operand(np.array([-200.0, 200.0], np.float32))).tolist() == [0.0, 1.0]


@pytest.mark.parametrize("name", ["exp", "log", "gelu", "sigmoid"])
@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool"])
def test_float_unary_rejects_integers(name, dtype):
    with pytest.raises(DTypeError, match=f"kernel '{name}'"):
        infer(name, spec((3,), dtype))


def test_unary_rejects_bad_attribute():
    with pytest.raises(KernelAttributeError, match="kernel 'gelu'.*'tanh'"):
        infer("gelu", spec((3,)), approximate="fast")
    with pytest.raises(KernelAttributeError, match="kernel 'relu' has no attribute"):
        infer("relu", spec((3,)), alpha=0.1)


# --- binary ----------------------------------------------------------------------------

BINARY_REF = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "pow": lambda a, b: a**b,
    "maximum": max,
    "minimum": min,
}


def _int_ref(name: str, a: int, b: int) -> int:
    """Integer semantics: C division (truncating, x/0 = 0), negative exponents clamp to 0."""
    if name == "div":
        return 0 if b == 0 else abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    if name == "pow":
        return a ** max(b, 0)
    return int(BINARY_REF[name](a, b))


def _wrap(v: int, bits: int, signed: bool) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(sorted(BINARY_REF)),
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4),
    seed=st.integers(0, 2**32 - 1),
    dtype=st.sampled_from(["float", "double", "half"]),
)
def test_binary_float_property(name, shapes, seed, dtype):
    rng = np.random.default_rng(seed)
    d = dt.dtype(dtype)
    sa, sb = shapes.input_shapes
    if name == "pow":
        a, b = rng.uniform(0.5, 2.0, sa), rng.uniform(-3.0, 3.0, sb)
    else:
        a = rng.uniform(-8.0, 8.0, sa)
        b = rng.choice([-1.0, 1.0], sb) * rng.uniform(0.25, 8.0, sb)
    a_op, b_op = operand(a, d), operand(b, d)
    y = run(name, a_op, b_op)
    assert y.shape == shapes.result_shape
    ref = elementwise(BINARY_REF[name], d.from_storage(a_op[0]), d.from_storage(b_op[0]))
    close(y, round_to_half(ref) if d is dt.HALF else ref, d)


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(sorted(BINARY_REF)),
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4),
    seed=st.integers(0, 2**32 - 1),
    dtype=st.sampled_from([d.name for d in dt.INTEGERS]),
)
def test_binary_integer_property_wraps(name, shapes, seed, dtype):
    rng = np.random.default_rng(seed)
    d = dt.dtype(dtype)
    info = np.iinfo(d.storage)
    sa, sb = shapes.input_shapes
    if name == "pow":
        a = rng.integers(max(info.min, -5), 6, sa)
        b = rng.integers(-3 if info.min else 0, 6, sb)
    else:
        a, b = (
            rng.integers(info.min, info.max, sa, endpoint=True, dtype=d.storage),
            rng.integers(info.min, info.max, sb, endpoint=True, dtype=d.storage),
        )
    y = run(name, operand(a, d), operand(b, d))
    ab, bb = np.broadcast_arrays(a, b)
    ref = [
        _wrap(_int_ref(name, int(u), int(v)), 8 * d.itemsize, info.min < 0)
        for u, v in zip(ab.ravel(), bb.ravel(), strict=True)
    ]
    assert y.dtype == d.storage
    assert y.ravel().tolist() == ref


def test_binary_nan_wins_in_maximum_and_minimum():
    a = operand(np.array([np.nan, 1.0, 2.0], np.float32))
    b = operand(np.array([0.0, np.nan, 1.0], np.float32))
    for name, last in (("maximum", 2.0), ("minimum", 1.0)):
        y = run(name, a, b)
        assert np.isnan(y[:2]).all() and y[2] == last


def test_binary_rejects_mixed_dtypes_and_unbroadcastable_shapes():
    with pytest.raises(DTypeError, match="kernel 'add'.*cast"):
        infer("add", spec((3,), "float"), spec((3,), "half"))
    with pytest.raises(ShapeError, match="kernel 'mul'.*do not broadcast"):
        infer("mul", spec((3, 2)), spec((3,)))
    with pytest.raises(DTypeError, match="kernel 'sub'"):
        infer("sub", spec((3,), "bool"), spec((3,), "bool"))
    with pytest.raises(KernelAttributeError, match="kernel 'add' takes inputs"):
        infer("add", spec((3,)))


# --- comparisons and where -------------------------------------------------------------

COMPARE_REF = {
    "equal": lambda a, b: a == b,
    "less": lambda a, b: a < b,
    "greater": lambda a, b: a > b,
    "less_equal": lambda a, b: a <= b,
    "greater_equal": lambda a, b: a >= b,
}


@settings(max_examples=30, deadline=None)
@given(
    name=st.sampled_from(sorted(COMPARE_REF)),
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4),
    seed=st.integers(0, 2**32 - 1),
    dtype=st.sampled_from([d.name for d in dt.NUMERIC]),
)
def test_comparison_property(name, shapes, seed, dtype):
    rng = np.random.default_rng(seed)
    sa, sb = shapes.input_shapes
    a, b = rng.integers(0, 4, sa), rng.integers(0, 4, sb)  # small values: many ties
    y = run(name, operand(a, dtype), operand(b, dtype))
    assert y.dtype == np.bool_ and y.shape == shapes.result_shape
    ref = elementwise(COMPARE_REF[name], a, b).astype(bool)
    np.testing.assert_array_equal(y, ref)


def test_comparisons_with_nan_and_bool():
    a = operand(np.array([np.nan, 1.0], np.float32))
    assert run("equal", a, a).tolist() == [False, True]
    assert run("less", a, a).tolist() == [False, False]
    assert run("less_equal", a, a).tolist() == [False, True]  # nan is not <= itself
    assert run("greater_equal", a, a).tolist() == [False, True]
    t = operand(np.array([True, False]))
    assert run("equal", t, operand(np.array(True))).tolist() == [True, False]
    with pytest.raises(DTypeError, match="kernel 'less'"):
        infer("less", spec((2,), "bool"), spec((2,), "bool"))


@settings(max_examples=25, deadline=None)
@given(
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=4),
    seed=st.integers(0, 2**32 - 1),
    dtype=st.sampled_from(list(dt.DTYPES)),
)
def test_where_broadcasts_all_three(shapes, seed, dtype):
    rng = np.random.default_rng(seed)
    sc, sa, sb = shapes.input_shapes
    cond = rng.random(sc) < 0.5
    a = rng.integers(-9, 9, sa)
    b = rng.integers(-9, 9, sb)
    if dtype == "bool":
        a, b = a > 0, b > 0
    y = run("where", operand(cond), operand(a, dtype), operand(b, dtype))
    ref = elementwise(lambda c, u, v: u if c else v, cond, a, b)
    np.testing.assert_array_equal(y, ref.astype(y.dtype))


def test_where_rejects_non_bool_cond_and_mixed_branches():
    with pytest.raises(DTypeError, match="kernel 'where': cond must be bool"):
        infer("where", spec((2,), "int32"), spec((2,)), spec((2,)))
    with pytest.raises(DTypeError, match="kernel 'where'"):
        infer("where", spec((2,), "bool"), spec((2,)), spec((2,), "double"))
    with pytest.raises(ShapeError, match="kernel 'where'"):
        infer("where", spec((2,), "bool"), spec((3,)), spec((1,)))


# --- cast, fill, copy ------------------------------------------------------------------


def test_cast_float_to_int_truncates_saturates_and_zeroes_nan():
    x = np.array([1.7, -1.7, np.nan, np.inf, -np.inf, 3e9, -3e9, 2147483647.0, -0.5])
    assert run("cast", operand(x, "double"), to="int32").tolist() == [
        1,
        -1,
        0,
        INT32_MAX,
        INT32_MIN,
        INT32_MAX,
        INT32_MIN,
        INT32_MAX,
        0,
    ]
    assert run("cast", operand(x, "float"), to="int32").tolist()[:7] == [
        1,
        -1,
        0,
        INT32_MAX,
        INT32_MIN,
        INT32_MAX,
        INT32_MIN,
    ]
    u = run("cast", operand(np.array([-1.5, 255.9, 300.0, np.nan, 7.99], np.float32)), to="uint8")
    assert u.dtype == np.uint8 and u.tolist() == [0, 255, 255, 0, 7]
    h = run("cast", operand(np.array([2.75, -3.5, 1e12]), "half"), to="int32")
    assert h.tolist() == [2, -3, INT32_MAX]


def test_cast_between_integers_saturates_and_to_bool_is_nonzero():
    i = operand(np.array([-5, 0, 255, 256, INT32_MAX], np.int32))
    assert run("cast", i, to="uint8").tolist() == [0, 0, 255, 255, 255]
    f = operand(np.array([0.0, -0.0, np.nan, 2.0, -1e-30], np.float32))
    assert run("cast", f, to="bool").tolist() == [False, False, True, True, True]
    b = operand(np.array([True, False]))
    assert run("cast", b, to="float").tolist() == [1.0, 0.0]
    assert run("cast", b, to="int32").tolist() == [1, 0]


def test_cast_to_float_rounds_once():
    big = operand(np.array([16777217, -16777219], np.int32))
    assert run("cast", big, to="float").tolist() == [16777216.0, -16777220.0]
    # 1 + 2**-11 + 2**-40 is just above a float16 tie: through float32 it would land on
    # the tie and round to even (1.0); rounded once it goes up.
    above_tie = operand(np.array([1 + 2.0**-11 + 2.0**-40]), "double")
    assert run("cast", above_tie, to="float16").tolist() == [1 + 2.0**-10]
    x = np.random.default_rng(2).uniform(-100, 100, 50).astype(np.float32)
    np.testing.assert_array_equal(run("cast", operand(x), to="half"), round_to_half(x))
    np.testing.assert_array_equal(run("cast", operand(x), to="double"), x.astype(np.float64))


@settings(max_examples=40, deadline=None)
@given(
    bits=hnp.arrays(np.uint32, hnp.array_shapes(max_dims=3, max_side=4)),
    pair=st.sampled_from([("float", "int32"), ("float", "uint32"), ("int32", "uint32")]),
)
@example(bits=np.array([0x7FA00001, 0x80000000, 0xFF800000], np.uint32), pair=("float", "int32"))
def test_bitcast_keeps_every_bit_both_ways(bits, pair):
    """NaN payloads (signalling ones too) and -0.0 come through as they are stored."""
    a, b = (dt.dtype(name) for name in pair)
    x = operand(bits.view(a.storage), a)
    y = run("bitcast", x, to=b.name)
    assert y.dtype == b.storage and y.shape == bits.shape
    np.testing.assert_array_equal(y.view(np.uint32), bits)
    back = run("bitcast", operand(y, b), to=a.name)
    np.testing.assert_array_equal(back.view(np.uint32), bits)


def test_bitcast_of_eight_two_and_one_byte_types():
    d = np.array([1.5, -0.0, np.inf], np.float64)
    assert run("bitcast", operand(d), to="int64").tolist() == d.view(np.int64).tolist()
    s = np.array([-1, 2, -32768], np.int16)
    assert run("bitcast", operand(s), to="uint16").tolist() == [65535, 2, 32768]
    assert run("bitcast", operand(np.array([True, False])), to="uint8").tolist() == [1, 0]
    assert run("bitcast", operand(np.array([-1], np.int8)), to="uint8").tolist() == [255]


def test_bitcast_refuses_other_widths_dtypes_not_stored_as_computed_and_bool_targets():
    with pytest.raises(DTypeError, match=r"float \(32 bits\) and to is int64 \(64 bits\)"):
        infer("bitcast", spec((2,)), to="int64")
    with pytest.raises(DTypeError, match="x is half, which kernels compute in float32"):
        infer("bitcast", spec((2,), "half"), to="int16")
    with pytest.raises(DTypeError, match="to is float16"):
        infer("bitcast", spec((2,), "uint16"), to="float16")
    with pytest.raises(DTypeError, match="to bool from uint8"):
        infer("bitcast", spec((2,), "uint8"), to="bool")


def test_cast_double_to_half_rounds_once():
    above_tie = operand(np.array([1 + 2.0**-10 + 2.0**-40]), "double")
    assert run("cast", above_tie, to="half").tolist() == [1 + 2.0**-9]


def test_cast_rejects_unknown_dtype():
    with pytest.raises(KernelAttributeError, match="kernel 'cast'.*'to'"):
        infer("cast", spec((2,)), to="float8")
    with pytest.raises(KernelAttributeError, match="kernel 'cast' needs attribute 'to'"):
        infer("cast", spec((2,)))


@pytest.mark.parametrize(
    ("dtype", "value", "expected"),
    [
        ("float", 2.5, 2.5),
        ("half", 1.0 / 3.0, float(round_to_half(np.float32(1 / 3)))),
        ("int32", -2.9, -2),
        ("int32", 1e10, INT32_MAX),
        ("uint8", -4.0, 0),
        ("bool", 0.0, False),
        ("bool", 0.5, True),
    ],
)
def test_fill_converts_value_like_cast(dtype, value, expected):
    y = run("fill", shape=(2, 3), value=value, dtype=dtype)
    assert y.shape == (2, 3) and y.dtype == dt.dtype(dtype).read_dtype
    assert (y == expected).all()


def test_fill_scalar_and_empty_and_bad_shape():
    assert run("fill", shape=(), value=7).tolist() == 7.0
    assert run("fill", shape=(0, 4), value=1).shape == (0, 4)
    with pytest.raises(KernelAttributeError, match="kernel 'fill'"):
        infer("fill", shape=(2, -1), value=1.0)
    with pytest.raises(KernelAttributeError, match="kernel 'fill' takes inputs"):
        infer("fill", spec((2,)), shape=(2,), value=1.0)


@pytest.mark.parametrize("dtype", list(dt.DTYPES))
def test_copy_is_exact_for_every_dtype(dtype):
    d = dt.dtype(dtype)
    x = operand(np.random.default_rng(3).uniform(0, 50, (3, 4)).astype(d.read_dtype), d)
    y = run("copy", x)
    np.testing.assert_array_equal(y, d.from_storage(x[0]))


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(
        st.sampled_from([np.float32, np.float64, np.int32]),
        hnp.array_shapes(min_dims=0, max_dims=3, max_side=70),
    ),
    st.sampled_from(["kernel", "epilogue"]),
)
def test_relu_has_the_bits_of_numpys_maximum_with_zero(x, how):
    # Whatever the shape and size (the zeros it compares with grow), NaN kept, -0.0 kept.
    want = np.maximum(x, 0)
    got = run("relu", operand(x)) if how == "kernel" else _relu_epilogue(x)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.reshape(-1).view(np.uint8), want.reshape(-1).view(np.uint8))


def _relu_epilogue(x: np.ndarray) -> np.ndarray:
    from mnrt.device.kernels.unary import epilogue

    return epilogue("relu", x.copy())


def test_relu_keeps_nan_and_the_sign_of_zero():
    x = np.array([np.nan, -np.nan, -0.0, 0.0, -1.0, np.inf, -np.inf], np.float32)
    np.testing.assert_array_equal(
        run("relu", operand(x)).view(np.uint32), np.maximum(x, 0).view(np.uint32)
    )


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def _c_div(a: int, b: int) -> int:
    """C division on Python's unbounded ints (truncating, x/0 = 0), wrapped to int32."""
    q = 0 if b == 0 else abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    q &= 0xFFFFFFFF
    return q - (1 << 32) if q > INT32_MAX else q


def test_int32_div_of_the_minimum_truncates_toward_zero():
    a = np.full(6, INT32_MIN, np.int32)
    b = np.array([3, INT32_MAX, 2, -2, -1, 0], np.int32)
    y = run("div", operand(a), operand(b))
    # |minimum| does not exist in int32: the quotient must not be worked from it there.
    assert y.tolist() == [_c_div(INT32_MIN, int(v)) for v in b]
    assert y.tolist() == [-715827882, -1, -(2**30), 2**30, INT32_MIN, 0]


@settings(max_examples=60, deadline=None)
@given(
    a=st.lists(
        st.sampled_from([INT32_MIN, INT32_MIN + 1, -7, 0, 7, INT32_MAX]), min_size=1, max_size=8
    ),
    b=st.integers(INT32_MIN, INT32_MAX),
)
def test_int32_div_matches_c_division_at_the_extremes(a, b):
    y = run("div", operand(np.array(a, np.int32)), operand(np.array([b], np.int32)))
    assert y.tolist() == [_c_div(v, b) for v in a]


# --- mod, bitshift, bitwise and logical ---------------------------------------------------


def _int_mod(a: int, b: int, fmod: bool) -> int:
    if b == 0:
        return 0
    if fmod:  # C: the remainder has the dividend's sign
        r = abs(a) % abs(b)
        return -r if a < 0 else r
    return a % b  # Python: the divisor's sign


@settings(max_examples=40, deadline=None)
@given(
    dtype=st.sampled_from([d.name for d in dt.INTEGERS]),
    fmod=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_mod_integer_property(dtype, fmod, seed):
    d = dt.dtype(dtype)
    info = np.iinfo(d.storage)
    rng = np.random.default_rng(seed)
    a = rng.integers(info.min, info.max, 20, endpoint=True, dtype=d.storage)
    b = rng.integers(info.min, info.max, 20, endpoint=True, dtype=d.storage)
    b[:3] = [0, 1, info.max]
    if info.min:
        a[3], b[3] = info.min, -1  # the one quotient that overflows: its remainder is 0
    y = run("mod", operand(a, d), operand(b, d), fmod=fmod)
    assert y.dtype == d.storage
    want = [_int_mod(int(u), int(v), fmod) for u, v in zip(a, b, strict=True)]
    assert y.tolist() == want


@pytest.mark.parametrize("dtype", ["float", "double", "half"])
def test_mod_float_matches_fmod_and_python_remainder(dtype):
    d = dt.dtype(dtype)
    a = np.array([5.5, -5.5, 5.5, -5.5, 3.0, 1.0])
    b = np.array([2.0, 2.0, -2.0, -2.0, 0.0, np.inf])
    got_c = run("mod", operand(a, d), operand(b, d), fmod=True)
    got_py = run("mod", operand(a, d), operand(b, d))
    np.testing.assert_array_equal(got_c[:4], [1.5, -1.5, 1.5, -1.5])
    np.testing.assert_array_equal(got_py[:4], [1.5, 0.5, -0.5, -1.5])
    assert np.isnan(got_c[4]) and got_c[5] == 1.0


@settings(max_examples=40, deadline=None)
@given(
    dtype=st.sampled_from([d.name for d in dt.INTEGERS]),
    direction=st.sampled_from(["left", "right"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_bitshift_property(dtype, direction, seed):
    d = dt.dtype(dtype)
    info = np.iinfo(d.storage)
    bits = 8 * d.itemsize
    rng = np.random.default_rng(seed)
    a = rng.integers(info.min, info.max, 16, endpoint=True, dtype=d.storage)
    lo = -2 if info.min else 0
    b = rng.integers(lo, bits + 3, 16).astype(d.storage)
    y = run("bitshift", operand(a, d), operand(b, d), direction=direction)
    want = []
    for u, v in zip(a.tolist(), b.tolist(), strict=True):
        if v < 0 or v >= bits:
            want.append(-1 if direction == "right" and u < 0 else 0)
        elif direction == "left":
            want.append(_wrap(u << v, bits, info.min < 0))
        else:
            want.append(u >> v)  # Python's >> is arithmetic, as on signed integers
    assert y.tolist() == want


@pytest.mark.parametrize("dtype", [d.name for d in dt.INTEGERS] + ["bool"])
def test_bitwise_kernels_match_python(dtype):
    d = dt.dtype(dtype)
    rng = np.random.default_rng(4)
    if d is dt.BOOL:
        a, b = rng.integers(0, 2, 12).astype(bool), rng.integers(0, 2, 12).astype(bool)
    else:
        info = np.iinfo(d.storage)
        a = rng.integers(info.min, info.max, 12, endpoint=True, dtype=d.storage)
        b = rng.integers(info.min, info.max, 12, endpoint=True, dtype=d.storage)
    pairs = list(zip(a.tolist(), b.tolist(), strict=True))
    assert run("bitwise_and", operand(a, d), operand(b, d)).tolist() == [u & v for u, v in pairs]
    assert run("bitwise_or", operand(a, d), operand(b, d)).tolist() == [u | v for u, v in pairs]
    assert run("bitwise_xor", operand(a, d), operand(b, d)).tolist() == [u ^ v for u, v in pairs]
    if d is not dt.BOOL:
        bits = 8 * d.itemsize
        want = [_wrap(~u, bits, d.is_signed) for u in a.tolist()]
        assert run("bitwise_not", operand(a, d)).tolist() == want


def test_logical_kernels_on_bool():
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    assert run("logical_and", operand(a), operand(b)).tolist() == [True, False, False, False]
    assert run("logical_or", operand(a), operand(b)).tolist() == [True, True, True, False]
    assert run("logical_xor", operand(a), operand(b)).tolist() == [False, True, True, False]
    assert run("logical_not", operand(a)).tolist() == [False, False, True, True]
    y = run("logical_and", operand(a[:, None]), operand(b[None, :]))
    assert y.shape == (4, 4)


@pytest.mark.parametrize(
    "name,operands,attrs",
    [
        ("logical_and", [spec((2,), "int32"), spec((2,), "int32")], {}),
        ("logical_not", [spec((2,), "float")], {}),
        ("bitwise_and", [spec((2,)), spec((2,))], {}),
        ("bitwise_not", [spec((2,), "bool")], {}),
        ("bitshift", [spec((2,)), spec((2,))], {"direction": "left"}),
        ("mod", [spec((2,), "bool"), spec((2,), "bool")], {}),
        ("floor", [spec((2,), "int32")], {}),
        ("sin", [spec((2,), "int64")], {}),
        ("isnan", [spec((2,), "int32")], {}),
        ("sign", [spec((2,), "bool")], {}),
    ],
)
def test_new_elementwise_kernels_refuse_other_dtypes(name, operands, attrs):
    with pytest.raises(DTypeError, match=f"kernel '{name}'"):
        infer(name, *operands, **attrs)


def test_bitshift_needs_a_direction():
    with pytest.raises(KernelAttributeError, match="direction"):
        infer("bitshift", spec((2,), "uint8"), spec((2,), "uint8"))


def test_sign_on_integers_and_nan():
    assert run("sign", operand(np.array([-7, 0, 9], np.int64))).tolist() == [-1, 0, 1]
    assert run("sign", operand(np.array([0, 200], np.uint8))).tolist() == [0, 1]
    y = run("sign", operand(np.array([np.nan, -0.0, -2.0], np.float32)))
    assert np.isnan(y[0]) and y[1:].tolist() == [0.0, -1.0]


@pytest.mark.parametrize("dtype", ["float", "double", "half", "float16", "bfloat16"])
def test_isnan_and_isinf(dtype):
    x = operand(np.array([np.nan, np.inf, -np.inf, 0.0, -3.5]), dtype)
    assert run("isnan", x).tolist() == [True, False, False, False, False]
    assert run("isinf", x).tolist() == [False, True, True, False, False]
    pos = run("isinf", x, detect_negative=False)
    neg = run("isinf", x, detect_positive=False)
    assert pos.tolist() == [False, True, False, False, False]
    assert neg.tolist() == [False, False, True, False, False]


def test_softplus_does_not_overflow():
    y = run("softplus", operand(np.array([-1000.0, 0.0, 1000.0], np.float32)))
    np.testing.assert_allclose(y, [0.0, math.log(2), 1000.0], rtol=1e-6)


def test_integer_kernels_stay_exact_above_2_to_53():
    """No integer kernel passes through float: int64 and uint64 neighbours stay apart."""
    big = 2**62
    a = operand(np.array([big + 1, big, -big - 1], np.int64))
    b = operand(np.array([big, big, -big], np.int64))
    assert run("equal", a, b).tolist() == [False, True, False]
    assert run("less", b, a).tolist() == [True, False, False]
    assert run("sub", a, b).tolist() == [1, 0, -1]
    assert run("div", a, operand(np.array([1, 3, -1], np.int64))).tolist() == [
        big + 1,
        big // 3,
        big + 1,
    ]
    assert run("maximum", a, b).tolist() == [big + 1, big, -big]
    u = operand(np.array([2**64 - 1, 2**63 + 1], np.uint64))
    assert run("div", u, operand(np.array([1, 2], np.uint64))).tolist() == [2**64 - 1, 2**62]
    assert run("sum", u, axes=(0,)).tolist() == [(2**64 - 1 + 2**63 + 1) % 2**64]
    w = run("where", operand(np.array([True, False])), u, operand(np.zeros(2, np.uint64)))
    assert w.tolist() == [2**64 - 1, 0]


@pytest.mark.parametrize("dtype", ["bfloat16", "half"])
def test_gemm_in_16_bit_floats_accumulates_in_float32(dtype):
    d = dt.dtype(dtype)
    rng = np.random.default_rng(9)
    a = operand(rng.standard_normal((4, 64)).astype(np.float32), d)
    b = operand(rng.standard_normal((64, 3)).astype(np.float32), d)
    exact = d.from_storage(a[0]).astype(np.float64) @ d.from_storage(b[0]).astype(np.float64)
    got32 = run("gemm", a, b, out_dtype="float")
    np.testing.assert_allclose(got32, exact, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(run("gemm", a, b), d.from_storage(d.to_storage(got32)))
