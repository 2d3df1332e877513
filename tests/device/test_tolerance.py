"""The tolerance model (mnrt/device/tolerance.py): what each kernel states, how errors add
along the dataflow, and that the tolerances it gives absorb a change of summation order
while a result off by 1% fails."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.device import tolerance as tm
from mnrt.device.dtypes import FLOAT, FLOATS
from mnrt.device.kernels import TensorSpec, lookup
from mnrt.format.fingerprints import close, stats_of
from mnrt.host.golden import compare
from mnrt.replay.locate import ROUNDING_SLACK


def _spec(shape, dtype="float"):
    return TensorSpec(tuple(shape), mnrt.dtype(dtype))


def test_unit_roundoff_of_each_float_dtype():
    assert tm.unit_roundoff(mnrt.float64) == 2.0**-53
    assert tm.unit_roundoff(mnrt.float32) == 2.0**-24
    assert tm.unit_roundoff(mnrt.half) == 2.0**-10  # 1-6-9: nine stored mantissa bits
    assert tm.unit_roundoff(mnrt.float16) == 2.0**-11
    assert tm.unit_roundoff(mnrt.bfloat16) == 2.0**-8  # 1-8-7, stored as uint16 bits
    assert tm.unit_roundoff(mnrt.int32) == 0.0
    for d in FLOATS:  # every float dtype has one, however numpy stores it
        assert 0.0 < tm.unit_roundoff(d) < 2.0**-7, d


def test_kernels_state_their_reduction_lengths():
    a, b = _spec((8, 300)), _spec((300, 5))
    gemm = lookup("gemm")
    assert tm.terms(gemm, [a, b], gemm.check_attrs({})) == 301  # K products and c
    conv = lookup("conv2d")
    x, w = _spec((1, 6, 9, 9)), _spec((4, 3, 3, 3))
    assert tm.terms(conv, [x, w], conv.check_attrs({"groups": 2})) == 3 * 3 * 3 + 1
    softmax = lookup("softmax")
    assert tm.terms(softmax, [_spec((2, 7))], softmax.check_attrs({})) == 7
    total = lookup("sum")
    assert tm.terms(total, [_spec((2, 3, 4))], total.check_attrs({"axes": [0, 2]})) == 8
    assert tm.terms(lookup("exp"), [_spec((50,))], {}) == 1
    assert tm.terms(lookup("reshape"), [_spec((50,))], {"shape": (5, 10)}) == 0


def test_a_kernel_that_states_nothing_is_taken_to_sum_its_whole_input():
    silent = dataclasses.replace(lookup("exp"), reduction=None)
    assert tm.terms(silent, [_spec((40, 50))], {}) == 2000
    stated = tm.kernel_errors(lookup("exp"), [_spec((40, 50))], [_spec((40, 50))], {}, [0.0])
    unstated = tm.kernel_errors(silent, [_spec((40, 50))], [_spec((40, 50))], {}, [0.0])
    assert unstated[0] > 10 * stated[0]


def test_errors_grow_with_reduction_length_and_depth():
    def gemm_error(k, before=0.0):
        a, b, y = _spec((4, k)), _spec((k, 4)), _spec((4, 4))
        return tm.kernel_errors(lookup("gemm"), [a, b], [y], lookup("gemm").check_attrs({}),
                                [before, 0.0])[0]  # fmt: skip

    assert gemm_error(4096) > gemm_error(64) > gemm_error(1) > 0
    assert gemm_error(64, before=gemm_error(64)) == pytest.approx(2**0.5 * gemm_error(64))
    assert tm.kernel_errors(lookup("copy"), [_spec((3,))], [_spec((3,))], {}, [0.0]) == [0.0]


def test_half_storage_settles_near_its_ulp_instead_of_growing():
    cast = lookup("cast")
    attrs = cast.check_attrs({"to": "half"})
    error = 1e-7
    for _ in range(200):
        (error,) = tm.kernel_errors(cast, [_spec((8,))], [_spec((8,), "half")], attrs, [error])
    assert 2.0**-10 < error < 2.0**-8


def test_untouched_and_integer_values_are_exact():
    assert tm.golden_tolerance(mnrt.float32, 0.0, np.ones(3)) == (0.0, 0.0)
    assert tm.golden_tolerance(mnrt.int32, 1e-3, np.ones(3)) == (0.0, 0.0)
    # The default of a golden recorded without tolerances never narrows the dtype's own.
    assert tm.default_tolerance(mnrt.float32, 0.0, np.ones(3)) == (1e-5, 1e-6)


@settings(max_examples=30, deadline=None)
@given(
    k=st.integers(1, 3000),
    n=st.integers(1, 16),
    dtype=st.sampled_from(["float", "half"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_gemm_tolerance_absorbs_another_summation_order_and_catches_one_percent(k, n, dtype, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((4, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    out = mnrt.dtype(dtype)
    kdef = lookup("gemm")
    (error,) = tm.kernel_errors(kdef, [_spec(a.shape), _spec(b.shape)], [_spec((4, n), dtype)],
                                kdef.check_attrs({}), [0.0, 0.0])  # fmt: skip
    order = rng.permutation(k)  # another order of the same sum, as another BLAS kernel takes

    def stored(y):
        return out.from_storage(out.to_storage(y.astype(np.float32)))

    golden = stored(a @ b)
    other = stored(a[:, order] @ b[order])
    rtol, atol = tm.golden_tolerance(out, error, golden)
    assert compare("y", other, golden, out, rtol, atol).passed
    if np.any(golden):
        assert not compare("y", stored(1.01 * (a @ b)), golden, out, rtol, atol).passed


@settings(max_examples=40, deadline=None)
@given(
    magnitude=st.integers(-12, 12),
    k=st.integers(2, 600),
    cancel=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_stats_tolerance_takes_rounding_at_any_magnitude_and_not_a_perturbed_weight(
    magnitude, k, cancel, seed
):
    """The statistics of a GEMM summed in another order stay within stats_tolerance with
    the size of its terms as the floor (KernelDef.term_scale of its inputs' scales), with
    --locate's slack, however large or small its inputs, and where its output cancels to
    rounding error alone (`cancel`: a's columns twice over, b's rows then their negation);
    the statistics after a weight is scaled by 1.25 and offset by 0.125 are beyond it."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((8, k)) * 10.0**magnitude
    b = rng.standard_normal((k, 16)) / 8
    if cancel:
        a, b = np.concatenate([a, a], axis=1), np.concatenate([b, -b])
    a, b = a.astype(np.float32), b.astype(np.float32)
    kdef, attrs = lookup("gemm"), lookup("gemm").check_attrs({})
    (error,) = tm.kernel_errors(kdef, [_spec(a.shape), _spec(b.shape)], [_spec((8, 16))],
                                attrs, [0.0, 0.0])  # fmt: skip
    terms = kdef.term_scale([float(np.abs(a).max()), float(np.abs(b).max())], attrs)
    rtol, atol = (t * ROUNDING_SLACK for t in tm.stats_tolerance(FLOAT, error, terms))
    golden = stats_of(a @ b, a @ b)
    order = rng.permutation(a.shape[1])  # as another BLAS kernel sums
    other = (a[:, order] @ b[order]).astype(np.float32)
    assert close(stats_of(other, other), golden, rtol, atol)
    wrong = a @ (b * np.float32(1.25) + np.float32(0.125))
    assert not close(stats_of(wrong, wrong), golden, rtol, atol)
    assert kdef.term_scale([None, 2.0], attrs) == 0.0
