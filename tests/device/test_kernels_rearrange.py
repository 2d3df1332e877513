"""Element-moving and generating kernels (trilu, depth_to_space, space_to_depth,
reverse_sequence, cumsum, cumprod, range, eye_like) against ONNX's reference evaluator, and
roll against numpy's.
Moving kernels must be exact for every dtype; scans exact on integers (wrapping in their
own width) and within float64 rounding of the reference on doubles."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_harness import infer, onnx_reference, operand, run, spec

from mnrt.device import dtypes as dt
from mnrt.errors import DeviceExecutionError, KernelAttributeError, ShapeError

pytest.importorskip("onnx")


@settings(max_examples=30, deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=2, max_size=4),
    upper=st.booleans(),
    k=st.integers(-6, 6),
    dtype=st.sampled_from(["float", "int64", "bool", "bfloat16"]),
)
def test_trilu_matches_onnx(shape, upper, k, dtype):
    d = dt.dtype(dtype)
    x = np.arange(1, np.prod(shape) + 1).reshape(shape) % 7
    xo = operand(x.astype(d.read_dtype), d)
    got = run("trilu", xo, upper=upper, k=k)
    (want,) = onnx_reference(
        "Trilu", d.from_storage(xo[0]), np.array(k, np.int64), upper=int(upper)
    )
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_matches_onnx_and_space_to_depth_inverts_dcr(mode):
    x = np.arange(2 * 8 * 2 * 3, dtype=np.int32).reshape(2, 8, 2, 3)
    got = run("depth_to_space", operand(x), blocksize=2, mode=mode)
    (want,) = onnx_reference("DepthToSpace", x, blocksize=2, mode=mode)
    np.testing.assert_array_equal(got, want)
    back = run("space_to_depth", operand(got), blocksize=2, mode=mode)
    (want_back,) = onnx_reference("SpaceToDepth", got, blocksize=2, mode=mode)
    np.testing.assert_array_equal(back, want_back)
    np.testing.assert_array_equal(back, x)  # each mode inverts its depth_to_space


@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence_matches_onnx(batch_axis, time_axis):
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    lens = np.array([4, 3, 2, 1], np.int64)
    got = run("reverse_sequence", operand(x), operand(lens), batch_axis=batch_axis,
              time_axis=time_axis)  # fmt: skip
    (want,) = onnx_reference("ReverseSequence", x, lens, batch_axis=batch_axis, time_axis=time_axis)
    np.testing.assert_array_equal(got, want)


def test_reverse_sequence_length_beyond_the_axis_is_a_device_error():
    x = operand(np.zeros((3, 2), np.float32))
    with pytest.raises(DeviceExecutionError, match="sequence length 4"):
        run("reverse_sequence", x, operand(np.array([1, 4], np.int64)))


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(["cumsum", "cumprod"]),
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    exclusive=st.booleans(),
    reverse=st.booleans(),
    dtype=st.sampled_from(["double", "int64", "int8", "uint16"]),
    seed=st.integers(0, 2**31),
    data=st.data(),
)
def test_cumsum_and_cumprod_match_onnx(name, shape, exclusive, reverse, dtype, seed, data):
    d = dt.dtype(dtype)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = np.random.default_rng(seed).integers(0, 5, shape).astype(d.storage)
    got = run(name, operand(x, d), axis=axis, exclusive=exclusive, reverse=reverse)
    if name == "cumsum":
        (want,) = onnx_reference(
            "CumSum", x, np.array(axis, np.int64), exclusive=int(exclusive), reverse=int(reverse)
        )
    else:  # ONNX CumProd (opset 24) is newer than some onnx wheels: numpy reference
        want = _cumprod_reference(x, axis, exclusive, reverse)
    assert got.dtype == d.storage
    np.testing.assert_array_equal(got, want.astype(d.storage))


def _cumprod_reference(x, axis, exclusive, reverse):
    moved = np.moveaxis(x, axis, -1)
    out = np.empty_like(moved)
    for idx in np.ndindex(moved.shape[:-1]):
        row = moved[idx].tolist()
        if reverse:
            row = row[::-1]
        acc, res = 1, []
        for v in row:
            if exclusive:
                res.append(acc)
                acc *= v
            else:
                acc *= v
                res.append(acc)
        out[idx] = _wrapped(res[::-1] if reverse else res, out.dtype)
    return np.moveaxis(out, -1, axis)


def _wrapped(values: list, dtype: np.dtype) -> np.ndarray:
    """Python's exact products as `dtype` holds them: integers wrap modulo 2**bits."""
    if dtype.kind not in "iu":
        return np.array(values, dtype)
    return np.array([v % 2 ** (8 * dtype.itemsize) for v in values], np.uint64).astype(dtype)


def test_cumsum_int64_above_2_to_53_and_int8_wraps():
    x = np.array([2**60, 1, 1], np.int64)
    assert run("cumsum", operand(x)).tolist() == [2**60, 2**60 + 1, 2**60 + 2]
    y = np.array([100, 100, 100], np.int8)
    assert run("cumsum", operand(y)).tolist() == [100, -56, 44]


@pytest.mark.parametrize(
    "start,limit,delta,dtype",
    [(3, 9, 3, "int32"), (10, 4, -3, "int64"), (1.0, 5.0, 2.0, "float"), (0.5, 0.2, 0.1, "float"),
     (2, 2, 1, "int16"), (1.0, 2.0, 0.3, "double")],
)  # fmt: skip
def test_range_matches_onnx(start, limit, delta, dtype):
    d = dt.dtype(dtype)
    got = run("range", start=start, limit=limit, delta=delta, dtype=dtype)
    np_type = d.storage.type
    (want,) = onnx_reference("Range", np_type(start), np_type(limit), np_type(delta))
    assert got.dtype == d.storage
    np.testing.assert_allclose(got, want, rtol=d.rtol)
    assert got.shape == want.shape


def test_range_refuses_fractions_for_integers_and_zero_delta():
    with pytest.raises(KernelAttributeError, match="whole"):
        infer("range", start=0.5, limit=3, dtype="int32")
    with pytest.raises(KernelAttributeError, match="delta"):
        infer("range", start=0, limit=3, delta=0)


@pytest.mark.parametrize("k", [-2, 0, 1, 5])
@pytest.mark.parametrize("dtype", ["", "int64", "bool"])
def test_eye_like_matches_onnx(k, dtype):
    x = np.zeros((3, 4), np.float32)
    got = run("eye_like", operand(x), k=k, dtype=dtype)
    (want,) = onnx_reference("EyeLike", x, k=k)
    assert got.dtype == (np.float32 if not dtype else dt.dtype(dtype).storage)
    np.testing.assert_array_equal(got, want.astype(got.dtype))


@pytest.mark.parametrize(
    "name,specs,attrs",
    [
        ("trilu", [spec((3,))], {}),
        ("depth_to_space", [spec((1, 3, 2, 2))], {"blocksize": 2}),
        ("space_to_depth", [spec((1, 1, 3, 2))], {"blocksize": 2}),
        ("eye_like", [spec((2, 2, 2))], {}),
        ("reverse_sequence", [spec((3, 2)), spec((3,), "int64")], {}),
    ],
)
def test_rearranging_kernels_refuse_bad_shapes(name, specs, attrs):
    with pytest.raises(ShapeError, match=f"kernel '{name}'"):
        infer(name, *specs, **attrs)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [(0, 2, 1, 3), (1, 0, 2, 1), (2, 3, 2, 3)])
def test_pad_matches_onnx(mode, pads):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = run("pad", operand(x), pads=pads, mode=mode, value=1.5)
    (want,) = onnx_reference(
        "Pad", x, np.array(pads, np.int64), np.array(1.5, np.float32), mode=mode
    )
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_negative_pads_crop_before_padding(mode):
    # ONNX's reference (numpy's pad) refuses negative pads: crop, then pad the rest.
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = run("pad", operand(x), pads=(-1, 2, 1, -3), mode=mode)
    kw = {"constant_values": 0.0} if mode == "constant" else {}
    np.testing.assert_array_equal(got, np.pad(x[1:, :1], ((0, 1), (2, 0)), mode=mode, **kw))


def test_pad_integers_take_whole_values_only():
    x = operand(np.array([2**62 + 1], np.int64))
    assert run("pad", x, pads=(1, 1), value=-3).tolist() == [-3, 2**62 + 1, -3]
    with pytest.raises(KernelAttributeError, match="value 0.5"):
        infer("pad", spec((2,), "int32"), pads=(1, 1), value=0.5)
    with pytest.raises(KernelAttributeError, match="2 \\* rank"):
        infer("pad", spec((2,)), pads=(1,))
    with pytest.raises(ShapeError, match="leave empty"):
        infer("pad", spec((0,)), pads=(1, 1), mode="edge")


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
def test_an_axis_cropped_to_nothing_cannot_be_padded_from_its_values(mode):
    """Negative pads crop first; a mode that reads the axis' values has none left."""
    with pytest.raises(ShapeError, match="leave empty.*'constant'"):
        infer("pad", spec((2, 3)), pads=(-2, 0, 1, 0), mode=mode)
    assert infer("pad", spec((2, 3)), pads=(-2, 0, 1, 0), mode="constant")[0].shape == (1, 3)


@pytest.mark.parametrize("repeats", [(1, 1), (2, 3), (0, 2)])
def test_tile_matches_onnx(repeats):
    x = np.arange(6, dtype=np.int64).reshape(2, 3)
    got = run("tile", operand(x), repeats=repeats)
    (want,) = onnx_reference("Tile", x, np.array(repeats, np.int64))
    np.testing.assert_array_equal(got, want)
    with pytest.raises(KernelAttributeError, match="repeats"):
        infer("tile", spec((2, 3)), repeats=(1,))


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    data=st.data(),
    dtype=st.sampled_from(["float", "half", "int8", "bool"]),
)
def test_roll_is_numpys(shape, data, dtype):
    rank = len(shape)
    axes = data.draw(st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=rank,
                              unique_by=lambda a: a % rank))  # fmt: skip
    shifts = data.draw(st.lists(st.integers(-7, 7), min_size=len(axes), max_size=len(axes)))
    d = dt.dtype(dtype)
    x = operand((np.arange(np.prod(shape)).reshape(shape) % 5).astype(d.read_dtype), d)
    got = run("roll", x, shifts=tuple(shifts), axes=tuple(axes))
    np.testing.assert_array_equal(got, np.roll(d.from_storage(x[0]), shifts, axes))


@pytest.mark.parametrize(
    ("attrs", "error", "message"),
    [({"shifts": (1, 2), "axes": (0,)}, KernelAttributeError, "one shift per axis"),
     ({"shifts": (), "axes": ()}, KernelAttributeError, "at least one axis"),
     ({"shifts": (1, 1), "axes": (1, -1)}, KernelAttributeError, "name an axis twice"),
     ({"shifts": (1,), "axes": (2,)}, ShapeError, "out of range for rank 2")],
)  # fmt: skip
def test_roll_refuses_axes_it_cannot_take(attrs, error, message):
    with pytest.raises(error, match=message):
        infer("roll", spec((3, 4)), **attrs)
