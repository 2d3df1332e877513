"""The device dtype table: agreement with the schema, bfloat16 rounding, host writes and
reads, capture and replay of every dtype, and cast between every pair of dtypes."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_harness import operand, run

import mnrt
from mnrt.device import bfloat16 as bf
from mnrt.device import dtypes as dt
from mnrt.format import jsonio
from mnrt.format.schema_info import FORMAT_VERSION, LAYOUT

_SCHEMA_NAMES = {v: k for k, v in LAYOUT["enums"]["DType"]["values"].items()}

ml_dtypes = pytest.importorskip("ml_dtypes")  # onnx's dependency: an independent bfloat16


def test_dtype_codes_are_the_schema_enum():
    """One fact, two spellings: the table's codes must be the schema's DType values."""
    schema = {k.lower(): v for k, v in LAYOUT["enums"]["DType"]["values"].items()}
    assert schema.pop("invalid") == 0
    table = {d.name: d.code for d in dt.DTYPES.values()}
    assert table == schema


def test_families_are_derived_from_the_table():
    assert set(dt.FLOATS) == {dt.DOUBLE, dt.FLOAT, dt.HALF, dt.FLOAT16, dt.BFLOAT16}
    ints = {dt.INT8, dt.INT16, dt.INT32, dt.INT64, dt.UINT8, dt.UINT16, dt.UINT32, dt.UINT64}
    assert set(dt.INTEGERS) == ints
    assert all(d.rtol == d.atol == 0 for d in dt.INTEGERS)
    assert dt.dtype(np.uint16) is dt.UINT16 and dt.dtype("bf16") is dt.BFLOAT16


# --- bfloat16 ----------------------------------------------------------------------------

_SPECIALS = [0.0, -0.0, 1.0, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 1e-40, -1e-45]


def _reference_bits(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return x.astype(ml_dtypes.bfloat16).view(np.uint16)


@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=64))
def test_bfloat16_from_float32_matches_ml_dtypes(words):
    x = np.array(words, np.uint32).view(np.float32)
    got = bf.float_to_bfloat16_bits(x)
    ref = _reference_bits(x)
    nan = np.isnan(x)
    np.testing.assert_array_equal(got[~nan], ref[~nan])
    assert np.isnan(bf.bfloat16_bits_to_float(got[nan])).all()


@given(st.lists(st.floats(width=64, allow_nan=False), min_size=1, max_size=64))
def test_bfloat16_from_float64_rounds_once(values):
    x = np.array(values, np.float64)
    np.testing.assert_array_equal(bf.float_to_bfloat16_bits(x), _reference_bits(x))


def test_bfloat16_double_rounding_case_and_specials():
    # 1 + 2**-8 + 2**-40 is just above a bfloat16 tie; through float32 it would land on
    # the tie and round to even (1.0). Rounded once it goes up.
    x = np.array([1 + 2.0**-8 + 2.0**-40, *_SPECIALS])
    got = bf.bfloat16_bits_to_float(bf.float_to_bfloat16_bits(x))
    assert got[0] == 1 + 2.0**-7
    np.testing.assert_array_equal(got[1:], x[1:].astype(ml_dtypes.bfloat16).astype(np.float32))


def test_ml_dtypes_bfloat16_arrays_resolve_and_write_exactly(dev, q):
    """onnx hands bfloat16 tensors out as ml_dtypes arrays: they write as they are."""
    x = np.array([1.5, -3.0e38, 2.0**-130, np.inf], np.float32).astype(ml_dtypes.bfloat16)
    assert dt.dtype(x.dtype) is dt.BFLOAT16
    buf = dev.create_buffer(x.shape, "bfloat16")
    q.enqueue_write_buffer(buf, x)
    np.testing.assert_array_equal(q.enqueue_read_buffer(buf), x.astype(np.float32))
    half = dev.create_buffer(x.shape, "half")  # rounded from the exact float32 values
    q.enqueue_write_buffer(half, x)
    want = dt.HALF.from_storage(dt.HALF.to_storage(x.astype(np.float32)))
    np.testing.assert_array_equal(q.enqueue_read_buffer(half), want)
    with pytest.raises(mnrt.DTypeError):
        q.enqueue_write_buffer(dev.create_buffer(x.shape, "float"), x)


# --- host writes and reads, capture and replay ------------------------------------------


def _sample(d: dt.DType) -> np.ndarray:
    if d is dt.BOOL:
        return np.array([True, False, True])
    if d.is_integer:
        info = np.iinfo(d.storage)
        return np.array([info.min, 0, info.max, info.max - 1], d.storage)
    return np.array([1.5, -2.25, 1e3], np.float32 if d.host is None else d.host)


@pytest.mark.parametrize("name", list(dt.DTYPES))
def test_every_dtype_writes_reads_captures_and_replays_exactly(name, tmp_path):
    d = dt.DTYPES[name]
    data = _sample(d)
    path = tmp_path / f"{name}.mnlb"
    with mnrt.capture(path), mnrt.open_device("auto") as device:
        buf = device.create_buffer(data.shape, d)
        q = device.command_queue(0)
        q.enqueue_write_buffer(buf, data)
        back = q.enqueue_read_buffer(buf)
    assert back.dtype == d.read_dtype
    np.testing.assert_array_equal(back, data)
    report = mnrt.replay(path)
    assert report.passed
    binary = mnrt.LightBinary.load(path)
    assert binary.version == FORMAT_VERSION
    doc = jsonio.to_json(binary)  # the JSON form names the dtype from the schema's enum
    assert json.dumps(doc).count(f'"{_SCHEMA_NAMES[d.code]}"') >= 1
    assert mnrt.replay(jsonio.from_json(doc)).passed


def test_int64_golden_mismatch_above_2_to_53_is_caught(tmp_path):
    """int64 goldens are exact: a difference of 1 above 2**53 is not lost to float64."""
    data = np.array([2**62 + 1], np.int64)
    with mnrt.open_device("auto") as device:
        buf = device.create_buffer((1,), "int64")
        q = device.command_queue(0)
        q.enqueue_write_buffer(buf, data)
        mnrt.begin_capture(goldens=False)
        check = mnrt.compare_to_golden(q, buf, np.array([2**62], np.int64))
        mnrt.end_capture()
    assert not check.passed and check.mismatches == 1


# --- cast between every pair ------------------------------------------------------------


def _round_int(v: int, bits: int) -> int:
    """The integer v rounded to `bits` significant bits, to nearest even, exactly."""
    n = abs(v).bit_length()
    if n <= bits:
        return v
    shift = n - bits
    q, r = divmod(abs(v), 1 << shift)
    if r > 1 << (shift - 1) or (r == 1 << (shift - 1) and q & 1):
        q += 1
    return (q << shift) * (1 if v > 0 else -1)


# Significant bits of each float dtype, hidden bit included.
_PRECISION = {"double": 53, "float": 24, "half": 10, "float16": 11, "bfloat16": 8}


def _reference_cast(value, src: dt.DType, to: dt.DType):
    """Exact Python reference of cast: float to int truncates and saturates, nan is 0 (or
    True for bool); integers saturate; float targets round once from the exact value."""
    if to is dt.BOOL:
        return bool(value != 0 or (isinstance(value, float) and math.isnan(value)))
    if to.is_integer:
        info = np.iinfo(to.storage)
        if isinstance(value, float):
            if math.isnan(value):
                return 0
            if math.isinf(value):
                return int(info.max) if value > 0 else int(info.min)
            value = math.trunc(value)
        return min(max(int(value), int(info.min)), int(info.max))
    if isinstance(value, int):
        value = _round_int(value, _PRECISION[to.name])  # now exact in float64
    exact = np.array([value], np.float64)
    with np.errstate(over="ignore"):
        host = exact if to.host is None else exact.astype(to.host)
        return float(to.from_storage(to.to_storage(host))[0])


def _values(d: dt.DType) -> np.ndarray:
    if d is dt.BOOL:
        return np.array([True, False])
    if d.is_integer:
        info = np.iinfo(d.storage)
        return np.array([info.min, info.min + 1, 0, 1, 7, info.max - 1, info.max], d.storage)
    x = np.array([0.0, -0.0, 1.5, -2.5, 7.99, -7.99, 300.25, -300.25, 7e4, np.inf, -np.inf, np.nan])
    with np.errstate(over="ignore"):
        return d.from_storage(d.to_storage(x if d.host is None else x.astype(d.host)))


@pytest.mark.parametrize(
    "src,to", list(itertools.product(dt.DTYPES, dt.DTYPES)), ids="{0[0]}-{0[1]}".format
)
def test_cast_covers_every_pair_exactly(src, to):
    s, t = dt.DTYPES[src], dt.DTYPES[to]
    x = _values(s)
    got = run("cast", operand(x, s), to=to)
    py = [v.item() for v in x]
    if s is dt.BOOL:
        py = [int(v) for v in py]
    want = [_reference_cast(v, s, t) for v in py]
    assert got.dtype == t.read_dtype
    for g, w, v in zip(got.tolist(), want, py, strict=True):
        same = (isinstance(w, float) and math.isnan(w) and math.isnan(g)) or g == w
        assert same, f"cast {src} {v!r} to {to}: got {g!r}, want {w!r}"


@settings(max_examples=50)
@given(st.integers(-(2**63), 2**64 - 1))
def test_cast_int64_and_uint64_never_pass_through_float(value):
    src = dt.INT64 if value < 2**63 else dt.UINT64
    x = np.array([value], src.storage)
    for to in (dt.INT64, dt.UINT64, dt.INT32, dt.INT8):
        got = int(run("cast", operand(x, src), to=to.name)[0])
        info = np.iinfo(to.storage)
        assert got == min(max(value, int(info.min)), int(info.max))
    assert float(run("cast", operand(x, src), to="float")[0]) == float(
        np.float32(_round_int(value, 24))
    )


def test_bfloat16_rounding_keeps_a_scalar_a_scalar():
    # np.ascontiguousarray made a 0-d input 1-d: comparisons of scalars came back as (1,).
    from mnrt.device.bfloat16 import bfloat16_bits_to_float, float_to_bfloat16_bits

    for x in (np.float32(1.5), np.array(2.0), np.array(np.nan, np.float32)):
        bits = float_to_bfloat16_bits(np.asarray(x))
        assert bits.shape == () and bfloat16_bits_to_float(bits).shape == ()
