"""Parameterised activations and clip against ONNX's reference evaluator, on float32 and
float64 (within two ulp of the reference; half and bfloat16 results within the dtype's
golden tolerance of the reference rounded to it), and clip exact on integers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_harness import infer, onnx_reference, operand, run, spec

from mnrt.device import dtypes as dt
from mnrt.errors import DeviceExecutionError, DTypeError

pytest.importorskip("onnx")

# kernel: (ONNX op, attributes to try beyond the defaults)
CASES = {
    "elu": ("Elu", {"alpha": 0.5}),
    "selu": ("Selu", {"alpha": 2.0, "gamma": 3.0}),
    "celu": ("Celu", {"alpha": 2.0}),
    "leaky_relu": ("LeakyRelu", {"alpha": 0.1}),
    "thresholded_relu": ("ThresholdedRelu", {"alpha": 2.0}),
    "hard_sigmoid": ("HardSigmoid", {"alpha": 0.5, "beta": 0.6}),
    "hard_swish": ("HardSwish", {}),
    "mish": ("Mish", {}),
    "shrink": ("Shrink", {"lambd": 1.5, "bias": 1.5}),
}


@pytest.mark.parametrize("with_attrs", [False, True])
@pytest.mark.parametrize("dtype", ["float", "double", "half", "bfloat16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_activation_matches_onnx(name, dtype, with_attrs):
    d = dt.dtype(dtype)
    op, extra = CASES[name]
    # Attributes as a converter hands them on: ONNX stores them as float32.
    attrs = {k: float(np.float32(v)) for k, v in extra.items()} if with_attrs else {}
    xo = operand(np.linspace(-6, 6, 61), d)
    x = d.from_storage(xo[0])
    ref_in = x.astype(np.float64 if d is dt.DOUBLE else np.float32)
    (want,) = onnx_reference(op, ref_in, **attrs)
    got = run(name, xo, **attrs)
    if d.codec is not None:
        want = d.from_storage(d.to_storage(want))
        np.testing.assert_allclose(got, want, rtol=d.rtol, atol=d.atol)
    else:
        eps = np.finfo(ref_in.dtype).eps
        np.testing.assert_allclose(got, want, rtol=4 * eps, atol=4 * eps)


@settings(max_examples=30, deadline=None)
@given(
    dtype=st.sampled_from([d.name for d in dt.NUMERIC]),
    lo=st.floats(-300, 300),
    width=st.floats(0, 600),
    seed=st.integers(0, 2**31),
)
def test_clip_matches_onnx_and_is_exact_on_integers(dtype, lo, width, seed):
    d = dt.dtype(dtype)
    hi = lo + width
    rng = np.random.default_rng(seed)
    raw = rng.uniform(-400, 400, 20)
    xo = operand(raw if not d.is_integer else raw.astype(np.int64).astype(d.storage), d)
    x = d.from_storage(xo[0])
    got = run("clip", xo, min=lo, max=hi)
    if d.is_integer:
        info = np.iinfo(d.storage)
        lo_i = max(int(info.min), min(int(info.max), int(np.ceil(lo))))
        hi_i = max(int(info.min), min(int(info.max), int(np.floor(hi))))
        assert got.tolist() == [min(max(v, lo_i), hi_i) for v in x.tolist()]
    else:
        t = x.dtype.type
        (want,) = onnx_reference("Clip", x, np.array(lo, t), np.array(hi, t))
        if d.codec is not None:
            want = d.from_storage(d.to_storage(want))
        np.testing.assert_array_equal(got, want)


def test_clip_defaults_and_int64_bounds():
    x = operand(np.array([-(2**62), 0, 2**62 + 1], np.int64))
    assert run("clip", x).tolist() == [-(2**62), 0, 2**62 + 1]
    assert run("clip", x, min=-5.5, max=5.5).tolist() == [-5, 0, 5]


def test_found_by_fuzzing_infinite_integer_clip_bounds_saturate_and_nan_is_refused():
    # An integer clip rounded a bound with math.ceil/floor: an OverflowError for min = inf
    # or max = -inf, a ValueError for nan, from inside the kernel.
    x = operand(np.array([-7, 0, 7], np.int32))
    top, bottom = np.iinfo(np.int32).max, np.iinfo(np.int32).min
    assert run("clip", x, min=np.inf).tolist() == [top] * 3
    assert run("clip", x, max=-np.inf).tolist() == [bottom] * 3
    assert run("clip", x, min=np.inf, max=-np.inf).tolist() == [bottom] * 3  # as floats do
    with pytest.raises(DeviceExecutionError, match="min is nan, which bounds no integer"):
        run("clip", x, min=np.nan)


@pytest.mark.parametrize("name", sorted(CASES))
def test_activations_refuse_integers(name):
    with pytest.raises(DTypeError, match=f"kernel '{name}'"):
        infer(name, spec((2,), "int32"))


@pytest.mark.parametrize("slope_shape", [(), (5,), (3, 1)])
@pytest.mark.parametrize("dtype", ["float", "double", "int64"])
def test_prelu_matches_onnx(slope_shape, dtype):
    d = dt.dtype(dtype)
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((3, 5)) * 10).astype(d.storage)
    slope = (rng.standard_normal(slope_shape) * 3).astype(d.storage)
    got = run("prelu", operand(x, d), operand(slope, d))
    (want,) = onnx_reference("PRelu", x, slope)
    np.testing.assert_array_equal(got, want)
