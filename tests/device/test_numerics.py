"""MN-Core half (1-6-9): conversions checked against an independent float64 reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnrt.device import numerics as nm


def reference_round(x: np.ndarray) -> np.ndarray:
    """Round to 1-6-9 half with frexp and numpy's round-half-even, in exact float64."""
    with np.errstate(all="ignore"):
        return _reference_round(x.astype(np.float64))


def _reference_round(x: np.ndarray) -> np.ndarray:
    a = np.abs(x)
    _, e = np.frexp(a)  # a = m * 2**e with m in [0.5, 1): the leading bit is 2**(e-1)
    quantum = np.exp2(np.maximum(e - 1, 1 - nm.HALF_BIAS) - nm.HALF_MAN_BITS)
    r = np.round(a / quantum) * quantum  # a / quantum is exact; np.round ties to even
    r = np.minimum(r, nm.HALF_MAX)  # saturate finite overflow
    r = np.where(np.isinf(a), np.inf, r)
    return np.where(np.isnan(x), np.nan, np.copysign(r, x))


def assert_matches_reference(x: np.ndarray) -> None:
    with np.errstate(invalid="ignore"):  # signalling NaN patterns
        got = nm.half_bits_to_float(nm.float_to_half_bits(x)).astype(np.float64)
    want = reference_round(x)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    bad = np.flatnonzero((got != want) & ~nan)
    assert bad.size == 0, (
        f"{bad.size} mismatches; first x={x.flat[bad[0]]!r}: "
        f"got {got.flat[bad[0]]!r}, want {want.flat[bad[0]]!r}"
    )
    np.testing.assert_array_equal(np.signbit(got[~nan]), np.signbit(want[~nan]))


def structured_float32() -> np.ndarray:
    """Every exponent x mantissas around each rounding boundary x both signs."""
    exps = np.arange(256, dtype=np.uint32)
    high = np.array([0, 1, 0x100, 0x1FE, 0x1FF], dtype=np.uint32) << 14
    low = np.array([0, 1, 0x1FFF, 0x2000, 0x2001, 0x3FFF], dtype=np.uint32)
    bits = (exps[:, None, None] << 23) | high[None, :, None] | low[None, None, :]
    bits = bits.reshape(-1)
    bits = np.concatenate([bits, bits | np.uint32(0x80000000)])
    return bits.view(np.float32)


def test_one_encodes_as_0x3e00():
    assert nm.float_to_half_bits(np.array([1.0], np.float32))[0] == 0x3E00
    assert nm.float_to_half_bits(np.array([-2.0], np.float32))[0] == 0xC000


def test_structured_float32_set_all_exponents_ties_subnormals_overflow_nan():
    assert_matches_reference(structured_float32())


def test_large_random_float32_bit_patterns():
    rng = np.random.default_rng(1234)
    bits = rng.integers(0, 1 << 32, size=2_000_000, dtype=np.uint64).astype(np.uint32)
    assert_matches_reference(bits.view(np.float32))


def test_values_near_half_range_limits():
    rng = np.random.default_rng(7)
    scales = np.exp2(rng.uniform(-45, 34, size=500_000))
    x = (rng.choice([-1.0, 1.0], size=scales.size) * scales).astype(np.float32)
    assert_matches_reference(x)


def test_every_half_pattern_round_trips():
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    values = nm.half_bits_to_float(bits)
    finite = ~np.isnan(values)
    np.testing.assert_array_equal(nm.float_to_half_bits(values)[finite], bits[finite])
    assert np.isnan(values[~finite]).all()


def test_every_half_pattern_decodes_to_its_fields_value():
    """Sign, 6-bit exponent (bias 31) and 9-bit mantissa read independently, in float64:
    normals, subnormals (m * 2**-39), both zeros, infinities and NaNs."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    sign = np.where(bits & 0x8000, -1.0, 1.0)
    exponent, mantissa = (bits >> 9) & 63, (bits & 511).astype(np.float64)
    normal = (1 + mantissa / 512) * np.exp2(exponent.astype(np.float64) - nm.HALF_BIAS)
    want = sign * np.where(exponent == 0, mantissa * nm.HALF_MIN_SUBNORMAL, normal)
    want = np.where(exponent == 63, np.where(mantissa == 0, sign * np.inf, np.nan), want)
    got = nm.half_bits_to_float(bits)
    np.testing.assert_array_equal(got.astype(np.float64), want)
    assert np.signbit(got[0x8000]) and not np.signbit(got[0])


def test_specials_and_saturation():
    x = np.array([np.inf, -np.inf, np.nan, 1e30, -1e30, nm.HALF_MAX, 2 * nm.HALF_MAX], np.float32)
    bits = nm.float_to_half_bits(x)
    assert list(bits[:2]) == [nm.HALF_INF, nm.HALF_INF | 0x8000]
    assert (bits[2] & 0x7FFF) == nm.HALF_NAN
    assert list(bits[3:5]) == [nm.HALF_MAX_BITS, nm.HALF_MAX_BITS | 0x8000]
    assert list(bits[5:]) == [nm.HALF_MAX_BITS, nm.HALF_MAX_BITS]


def test_subnormals_ties_to_even():
    tiny = nm.HALF_MIN_SUBNORMAL
    x = np.array([0.5, 1.5, 2.5, 511.5, 511.75], np.float64) * tiny
    assert list(nm.float_to_half_bits(x)) == [0, 2, 2, 512, 512]


def test_float64_rounds_once_not_through_float32():
    # Through float32 this would first become the tie 1 + 2**-10, then round to even (1.0).
    x = np.array([1 + 2**-10 + 2**-40], np.float64)
    assert nm.float_to_half_bits(x)[0] == 0x3E01
    assert np.float32(x[0]) == np.float32(1 + 2**-10)


def test_float16_input_is_exact_widening():
    x = np.arange(-1000, 1000, 0.37).astype(np.float16)
    np.testing.assert_array_equal(
        nm.float_to_half_bits(x), nm.float_to_half_bits(x.astype(np.float32))
    )


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=1, max_size=64))
def test_float64_matches_reference(values):
    assert_matches_reference(np.array(values, np.float64))


def test_rejects_non_float_input():
    with pytest.raises(TypeError):
        nm.float_to_half_bits(np.array([1, 2], np.int32))
