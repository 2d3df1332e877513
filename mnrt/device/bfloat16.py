"""bfloat16: the top 16 bits of a float32 (1 sign, 8 exponent, 7 mantissa bits).

numpy has no bfloat16, so the device stores its uint16 bit patterns and computes in float32.
Rounding is IEEE round to nearest, ties to even, in one step from float32 or float64 (a
float64 is first rounded toward zero to float32 with its lost bits kept as a sticky low bit,
"round to odd", which makes the second rounding exact). Unlike MN-Core half the range does
not saturate: values past the largest finite bfloat16 round to infinity, as IEEE and ONNX
do. NaN stays NaN (quiet, sign kept); subnormals are kept, as in float32.
"""

from __future__ import annotations

import numpy as np

MAN_BITS = 7  # stored mantissa bits (8 significant with the implicit one)
_SIGN = np.uint32(0x8000_0000)
_QUIET_NAN = np.uint32(0x7FC0_0000)
_FLOAT_SOURCES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _float32_round_to_odd(x: np.ndarray) -> np.ndarray:
    """float64 values as float32 rounded to odd: truncated toward zero, with the lowest
    mantissa bit set where bits were lost. Rounding that to 8 significant bits to nearest
    even gives the same result as rounding the float64 directly."""
    with np.errstate(over="ignore"):  # beyond float32's range: inf, then stepped back
        f = x.astype(np.float32)
    with np.errstate(invalid="ignore"):
        wider = np.abs(f.astype(np.float64)) > np.abs(x)  # rounded away from zero
    f[wider] = np.nextafter(f[wider], np.float32(0))
    inexact = f.astype(np.float64) != x
    bits = f.view(np.uint32)
    bits[inexact & ~np.isnan(x)] |= np.uint32(1)
    return f


def float_to_bfloat16_bits(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Round float16/32/64 values to bfloat16; return the uint16 bit patterns (in `out`,
    a uint16 array of x's shape, when given)."""
    x = np.asarray(x)
    if x.dtype not in _FLOAT_SOURCES:
        raise TypeError(f"bfloat16 conversion takes float16/32/64 data, not {x.dtype}")
    f = _float32_round_to_odd(x) if x.dtype == np.float64 else x.astype(np.float32)
    bits = np.ascontiguousarray(f).view(np.uint32)  # 1-d for a 0-d f: reshaped below
    rounded = bits + (((bits >> 16) & np.uint32(1)) + np.uint32(0x7FFF))
    nan = np.isnan(f)
    if nan.any():
        rounded[nan] = (bits[nan] & _SIGN) | _QUIET_NAN
    result = (rounded >> 16).astype(np.uint16).reshape(x.shape)
    if out is None:
        return result
    np.copyto(out, result)
    return out


def bfloat16_bits_to_float(bits: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Decode uint16 bfloat16 patterns to float32 (exact: every bfloat16 is a float32)."""
    bits = np.asarray(bits)
    if bits.dtype != np.uint16:
        raise TypeError(f"bfloat16 bit patterns are uint16, not {bits.dtype}")
    values = (bits.astype(np.uint32) << 16).view(np.float32)
    if out is None:
        return values
    np.copyto(out, values)
    return out
