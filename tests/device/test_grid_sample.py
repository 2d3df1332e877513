"""grid_sample against ONNX's reference GridSample: every mode, padding mode and
align_corners in 2-D with grids reaching outside [-1, 1], 1-D and 3-D sampling, random
shapes, half precision rounded once, the cost and the refusals."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_harness import infer, onnx_reference, operand, run, spec

from mnrt.device import dtypes as dt
from mnrt.device.kernels import TensorSpec, lookup
from mnrt.errors import DTypeError, KernelAttributeError, ShapeError

pytest.importorskip("onnx")

MODES = ("nearest", "linear", "cubic")
PADDINGS = ("zeros", "border", "reflection")


def _case(rng, dims, out, batch=2, channels=3, reach=1.6):
    x = rng.standard_normal((batch, channels, *dims)).astype(np.float32)
    grid = rng.uniform(-reach, reach, (batch, *out, len(dims))).astype(np.float32)
    # The corners exactly, and coordinates far outside (several reflections away).
    grid.reshape(-1)[: 2 * len(dims)] = [1.0] * len(dims) + [-1.0] * len(dims)
    grid.reshape(-1)[-len(dims) :] = -3.7
    return x, grid


def _check(x, grid, mode, padding, align_corners, rtol=1e-5, atol=1e-5):
    (want,) = onnx_reference("GridSample", x, grid, mode=mode, padding_mode=padding,
                             align_corners=int(align_corners))  # fmt: skip
    got = run("grid_sample", operand(x), operand(grid), mode=mode, padding_mode=padding,
              align_corners=align_corners)  # fmt: skip
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("mode", MODES)
def test_2d_matches_onnx_reference(mode, padding, align_corners):
    x, grid = _case(np.random.default_rng(0), (4, 5), (3, 6))
    _check(x, grid, mode, padding, align_corners)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("dims", "out"), [((6,), (9,)), ((3, 4, 2), (2, 3, 2))], ids=["1d", "3d"])
def test_other_ranks_match_onnx_reference(mode, dims, out):
    rng = np.random.default_rng(1)
    for padding, align_corners in itertools.product(PADDINGS, (False, True)):
        _check(*_case(rng, dims, out, batch=1), mode, padding, align_corners)


def test_double_and_a_grid_of_another_dtype():
    """Coordinates in the wider of the two dtypes; ONNX's reference rounds them to float32
    whatever the dtypes, hence float32's tolerance."""
    x, grid = _case(np.random.default_rng(2), (5, 4), (3, 3))
    _check(x.astype(np.float64), grid.astype(np.float64), "cubic", "reflection", True)
    _check(x, grid.astype(np.float64), "linear", "border", False)


def test_nearest_rounds_half_to_even():
    """x = ((g + 1) * 4 - 1) / 2 is 0.5, 1.5, 2.5: the pixels 0, 2 and 2."""
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 1, 4)
    grid = np.array([[[[-0.5, 0.0], [0.0, 0.0], [0.5, 0.0]]]], np.float32)
    got = run("grid_sample", operand(x), operand(grid), mode="nearest")
    np.testing.assert_array_equal(got.reshape(-1), [0.0, 2.0, 2.0])


@settings(max_examples=25, deadline=None)
@given(
    rank=st.integers(1, 3),
    mode=st.sampled_from(MODES),
    padding=st.sampled_from(PADDINGS),
    align_corners=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_shapes_and_grids_match_onnx_reference(rank, mode, padding, align_corners, seed):
    rng = np.random.default_rng(seed)
    dims = tuple(int(d) for d in rng.integers(1, 5, rank))
    out = tuple(int(d) for d in rng.integers(1, 4, rank))
    x = rng.standard_normal((2, 2, *dims)).astype(np.float32)
    grid = (rng.standard_normal((2, *out, rank)) * 1.5).astype(np.float32)
    if align_corners and padding == "reflection" and 1 in dims:
        return  # ONNX's reference divides by the zero-width span there
    _check(x, grid, mode, padding, align_corners)


@pytest.mark.parametrize("dtype", ["half", "bfloat16", "float16"])
def test_narrow_floats_compute_in_float32_and_round_once(dtype):
    d = dt.dtype(dtype)
    x, grid = _case(np.random.default_rng(3), (5, 6), (4, 4))

    def rounded(a):
        return d.from_storage(operand(a, d)[0]).astype(np.float32)

    x, grid = rounded(x), rounded(grid)
    (exact,) = onnx_reference("GridSample", x.astype(np.float64), grid.astype(np.float64),
                              mode="cubic", padding_mode="border")  # fmt: skip
    got = run("grid_sample", operand(x, d), operand(grid, d), mode="cubic", padding_mode="border")
    np.testing.assert_array_equal(got, rounded(got))  # stored in the narrow dtype
    # One rounding of a float32 result: within one ulp of the exact value (half an ulp, and
    # float32's few ulps of the taps' sum, which may round a tie the other way).
    ulp = 2.0 ** -(d.codec.man_bits if d.codec else 10)
    np.testing.assert_array_less(np.abs(got - exact), ulp * np.maximum(np.abs(exact), 2.0**-6))


def _cost(x_shape, grid_shape, mode="linear"):
    kdef = lookup("grid_sample")
    attrs = kdef.check_attrs({"mode": mode})
    ins = [spec(x_shape), spec(grid_shape)]
    (out,) = kdef.infer(ins, attrs)
    return kdef.cost(ins, [TensorSpec(out.shape, out.dtypes[0])], attrs)


def test_cost_is_positive_and_grows_with_the_output_and_the_taps():
    small, large = _cost((1, 8, 16, 16), (1, 4, 4, 2)), _cost((1, 8, 16, 16), (1, 16, 16, 2))
    assert 0 < small.flops < large.flops and 0 < small.dram_bytes < large.dram_bytes
    taps, outs = 4, 8 * 4 * 4  # linear in 2-D: 4 taps per output element
    assert small.traffic == (taps * outs * 4, 4 * 4 * 2 * 4, outs * 4)
    flops = [_cost((1, 8, 16, 16), (1, 4, 4, 2), m).flops for m in MODES]
    assert flops == sorted(flops) and flops[2] > 8 * flops[0]  # cubic: 16 taps, nearest 1
    # The taps never read more than the whole input.
    assert _cost((1, 8, 4, 4), (1, 64, 64, 2), "cubic").traffic[0] == 8 * 4 * 4 * 4


@pytest.mark.parametrize(
    ("x", "grid", "error", "match"),
    [
        (spec((1, 2, 4, 4), "int32"), spec((1, 3, 3, 2)), DTypeError, "floating-point"),
        (spec((1, 2, 4, 4)), spec((1, 3, 3, 2), "int64"), DTypeError, "grid"),
        (spec((1, 2, 4, 4)), spec((1, 3, 3, 3)), ShapeError, r"grid \[N, O1..Ok, k\]"),
        (spec((2, 2, 4, 4)), spec((1, 3, 3, 2)), ShapeError, "same N"),
        (spec((2, 2)), spec((2, 0)), ShapeError, "k >= 1"),
        (spec((1, 2, 0, 4)), spec((1, 3, 3, 2)), ShapeError, "empty spatial axis"),
    ],
)
def test_refusals_say_what_is_supported(x, grid, error, match):
    with pytest.raises(error, match=match):
        infer("grid_sample", x, grid)


def test_unknown_mode_lists_the_modes():
    with pytest.raises(KernelAttributeError, match="'nearest', 'linear', 'cubic'"):
        infer("grid_sample", spec((1, 1, 2, 2)), spec((1, 1, 1, 2)), mode="bicubic")


def test_one_pixel_with_align_corners_reflects_everything_onto_it():
    """ONNX's reference divides by the zero-width span here; PyTorch reads the pixel."""
    x = np.array([[[[2.5]]]], np.float32)
    grid = np.array([[[[0.3, -1.7], [5.0, 1.0]]]], np.float32)
    for mode in MODES:
        got = run("grid_sample", operand(x), operand(grid), mode=mode, padding_mode="reflection",
                  align_corners=True)  # fmt: skip
        np.testing.assert_allclose(got.reshape(-1), [2.5, 2.5], rtol=1e-6)
