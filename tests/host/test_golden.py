"""The golden verdict, |a - b| <= atol + rtol * |b| elementwise, against an element-by-element
oracle written from its definition: NaN matches NaN, an infinity only the same infinity,
every mismatch counted and the first MAX_LISTED listed in order."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import mnrt
from mnrt.host import golden
from mnrt.host.golden import MAX_LISTED, MAX_WORST, compare

values = st.one_of(
    st.floats(-4, 4, width=32),
    st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-30, 3e38]),
)
shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)


def _oracle_ok(a: float, b: float, rtol: float, atol: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(b) or math.isinf(a):
        return a == b
    return abs(a - b) <= atol + rtol * abs(b)


def _err(a: float, b: float) -> float:
    """A mismatch's absolute error as a check reports it (NaN where a number was: inf)."""
    e = abs(a - b)
    return math.inf if math.isnan(e) else e


def _same(x: float, y: float) -> bool:
    return x == y or (math.isnan(x) and math.isnan(y))


@settings(max_examples=300, deadline=None)
@given(
    st.data(),
    shapes,
    st.sampled_from([0.0, 1e-5, 0.1]),
    st.sampled_from([0.0, 1e-6, 0.5]),
)
def test_verdict_matches_the_definition(data, shape, rtol, atol):
    expected = data.draw(hnp.arrays(np.float32, shape, elements=values))
    noise = data.draw(hnp.arrays(np.float32, shape, elements=values))
    pick = data.draw(hnp.arrays(np.bool_, shape))
    actual = np.where(pick, noise, expected).astype(np.float32)

    check = compare("y", actual, expected, mnrt.float32, rtol, atol)
    a64, b64 = actual.astype(np.float64).ravel(), expected.astype(np.float64).ravel()
    bad = [i for i in range(a64.size) if not _oracle_ok(a64[i], b64[i], rtol, atol)]
    assert check.mismatches == len(bad)
    assert check.passed == (not bad)
    want = [tuple(int(k) for k in np.unravel_index(i, shape)) for i in bad[:MAX_LISTED]]
    assert check.mismatch_indices == want
    assert check.first_mismatch == (want[0] if want else None)
    assert check.max_abs_err >= 0 and check.max_rel_err >= 0
    finite = np.isfinite(a64) & np.isfinite(b64)
    if finite.any():
        assert check.max_abs_err >= np.abs(a64[finite] - b64[finite]).max()
    # A failure says why, and shows the largest errors among the mismatches, largest first.
    assert bool(check.message) == bool(bad)
    assert len(check.worst) == min(MAX_WORST, len(bad))
    with np.errstate(invalid="ignore"):
        errors = sorted((_err(a64[i], b64[i]) for i in bad), reverse=True)[:MAX_WORST]
    assert [w["abs_err"] for w in check.worst] == errors
    for w in check.worst:
        i = int(np.ravel_multi_index(w["index"], shape)) if shape else 0
        assert i in bad and _same(w["expected"], b64[i]) and _same(w["actual"], a64[i])


@given(hnp.arrays(np.float32, shapes, elements=values))
def test_identical_results_pass_with_no_error(x):
    check = compare("y", x.copy(), x, mnrt.float32, 0.0, 0.0)
    assert check.passed and check.mismatches == 0
    assert check.max_abs_err == 0.0 and check.pcc == 1.0


def test_a_finite_value_does_not_match_an_infinite_golden():
    # rtol * |inf| is an infinite tolerance; the definition wants the same infinity instead.
    b = np.array([np.inf, -np.inf, np.inf], np.float32)
    a = np.array([1.0, -np.inf, -np.inf], np.float32)
    check = compare("y", a, b, mnrt.float32, 1e-5, 1e-6)
    assert check.mismatch_indices == [(0,), (2,)]


def test_a_scalar_mismatch_is_at_index_empty():
    check = compare("y", np.float32(2.0), np.float32(1.0), mnrt.float32)
    assert check.first_mismatch == () and check.mismatches == 1


def test_a_check_with_nothing_finite_to_correlate_is_not_a_perfect_correlation():
    got = np.array([np.nan, np.inf, 1, 2], np.float32)
    golden = np.array([1, 2, np.inf, np.nan], np.float32)
    check = compare("x", got, golden, mnrt.float32)
    assert not check.passed and check.mismatches == 4 and check.pcc == 0.0
    same = compare("x", got, got.copy(), mnrt.float32)
    assert same.passed and same.pcc == 1.0


def general(*args) -> golden.Check:
    """The verdict by the general path alone (the one that handles NaN and infinity)."""
    fast = golden._compare_finite
    golden._compare_finite = lambda *a, **k: None
    try:
        return compare(*args)
    finally:
        golden._compare_finite = fast


def test_a_nan_matching_nan_adds_no_relative_error():
    # NaN golden at index 0 matched by NaN: no error there, so the largest relative error
    # is that of index 1 (it was inf: 0 / max(NaN, tiny) is NaN, reported as infinite).
    check = compare(
        "y",
        np.array([np.nan, 1.0], np.float32),
        np.array([np.nan, 1.0000001], np.float32),
        mnrt.float32,
    )
    assert check.passed and check.max_abs_err == pytest.approx(1.19e-7, rel=1e-2)
    assert check.max_rel_err == pytest.approx(check.max_abs_err, rel=1e-6)


def test_a_nan_golden_met_by_a_number_is_an_infinite_error():
    check = compare("y", np.array([1.0, 2.0]), np.array([np.nan, 2.0]), mnrt.float64)
    assert check.mismatch_indices == [(0,)]
    assert check.max_abs_err == math.inf and check.max_rel_err == math.inf


def test_a_tolerance_that_overflows_warns_nowhere():
    # rtol * |b| overflows to inf (a tolerance that large passes everything, as the
    # definition in float64 says); the general path says so silently, the fast one warned.
    a = np.array([0.0, 1.0])
    b = np.array([1.7e308, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check = compare("y", a, b, mnrt.float64, 2.0, 0.0)
        assert check == general("y", a, b, mnrt.float64, 2.0, 0.0)
    assert check.passed


@pytest.mark.parametrize("scale", [1e-200, 1e-150, 1e-80, 1.0, 1e80, 1e150, 1e200, 1e306])
def test_the_correlation_does_not_depend_on_the_values_magnitude(scale):
    b = np.array([1.0, 2.0, 3.0, 4.0])
    a = np.array([1.0, 2.1, 2.9, 4.2])
    want = compare("y", a, b, mnrt.float64).pcc
    assert 0.99 < want < 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow in the sums of squares
        check = compare("y", a * scale, b * scale, mnrt.float64)
        nan_check = general(
            "y", np.append(a * scale, np.nan), np.append(b * scale, np.nan), mnrt.float64
        )
    assert check.pcc == pytest.approx(want, rel=1e-12)
    assert nan_check.pcc == pytest.approx(want, rel=1e-12)  # the general path's too


@pytest.mark.parametrize(
    "actual, expected, dtype",
    [
        (np.float32(2.0), np.float32(1.0), mnrt.float32),  # 0-d
        (np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32), mnrt.float32),
        (np.array([0, 255, 7], np.uint8), np.array([255, 0, 7], np.uint8), mnrt.uint8),
        (np.array([True, False]), np.array([False, False]), mnrt.bool_),
        (np.array([1, -5, 2**31 - 1], np.int32), np.array([1, 5, -(2**31)], np.int32), mnrt.int32),
        (
            np.array([1.0, 0.0, 65504], np.float16),
            np.array([1.0, 1e-7, -65504], np.float16),
            mnrt.float16,
        ),
        (np.array([1e-300, 0.0, 5e-324]), np.array([0.0, 1e-300, 0.0]), mnrt.float64),
        (np.array([1.7e308, -1.7e308]), np.array([-1.7e308, 1.7e308]), mnrt.float64),
    ],
)
def test_the_fast_path_reports_what_the_general_path_does(actual, expected, dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compare("y", actual, expected, dtype) == general("y", actual, expected, dtype)


def test_pcc_of_a_nan_mismatch_is_zero():
    expected = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    actual = np.array([1.0, 2.0, 3.0, np.nan], np.float32)
    check = compare("y", actual, expected, mnrt.float32)
    assert not check.passed and check.pcc == 0.0  # before: 1.0, from the finite three alone
    both = np.array([1.0, 2.0, 3.0, np.nan], np.float32)
    assert compare("y", both, both.copy(), mnrt.float32).pcc == 1.0


@pytest.mark.parametrize("path", [compare, general])
@pytest.mark.parametrize("dtype", [mnrt.float32, mnrt.int32])
def test_an_error_against_a_golden_of_zero_is_infinitely_large_relative_to_it(path, dtype):
    # It printed as max_rel_err=9.97e+307 (the error over the smallest normal double).
    np_dtype = np.dtype(dtype.name)
    golden_ = np.array([0, 0, 4], np_dtype)
    check = path("y", np.array([0, 2, 4], np_dtype), golden_, dtype, 0.0, 0.0)
    assert check.max_abs_err == 2.0 and check.max_rel_err == math.inf
    assert check.worst[0]["rel_err"] == math.inf  # it printed 9.97e+307 too
    # and a golden of zero met exactly adds none: the error relative to the 4 is the largest
    check = path("y", np.array([0, 0, 5], np_dtype), golden_, dtype, 0.0, 0.0)
    assert check.max_rel_err == 0.25
