"""Kernel numerics checked against independent references at the edges of their dtypes:
the int32 minimum in division, and the scales and epilogues int32 gemm can honour."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_harness import infer, operand, run, spec

from mnrt.errors import KernelAttributeError

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


def _int_gemm_operands():
    a = np.array([[1, -2], [3, 4]], np.int32)
    b = np.array([[5, 6], [-7, 8]], np.int32)
    c = np.array([1, -1], np.int32)
    return a, b, c


def test_int32_gemm_whole_scales_compute_exactly():
    a, b, c = _int_gemm_operands()
    y = run("gemm", operand(a), operand(b), operand(c), alpha=2.0, beta=-3.0)
    want = 2 * (a.astype(np.int64) @ b) - 3 * c
    assert y.dtype == np.int32
    assert y.tolist() == want.tolist()


@pytest.mark.parametrize(
    ("attrs", "with_c"),
    [
        ({"alpha": 0.5}, False),  # was multiplied by int32(0.5) == 0: every result 0
        ({"alpha": 2.0**31}, False),  # was an OverflowError while the kernel ran
        ({"beta": 0.5}, True),  # was beta 0: c silently dropped
    ],
)
def test_int32_gemm_refuses_scales_it_cannot_apply(attrs, with_c):
    specs = [spec((2, 2), "int32"), spec((2, 2), "int32")] + [spec((2,), "int32")] * with_c
    with pytest.raises(KernelAttributeError, match="whole number"):
        infer("gemm", *specs, **attrs)


def test_int32_gemm_without_c_ignores_beta():
    a, b, _ = _int_gemm_operands()
    y = run("gemm", operand(a), operand(b), beta=0.5)
    assert y.tolist() == (a @ b).tolist()


@pytest.mark.parametrize("epilogue", ["gelu", "sigmoid", "tanh", "silu"])
def test_int32_gemm_refuses_float_epilogues(epilogue):
    # They gave 0 everywhere (gelu, sigmoid, silu) or failed while running (tanh); the unary
    # kernels refuse int32 for these activations too.
    with pytest.raises(KernelAttributeError, match="floating-point"):
        infer("gemm", spec((2, 2), "int32"), spec((2, 2), "int32"), epilogue=epilogue)


def test_int32_gemm_relu_epilogue():
    a, b, _ = _int_gemm_operands()
    y = run("gemm", operand(a), operand(b), epilogue="relu")
    assert y.tolist() == np.maximum(a @ b, 0).tolist()
