"""MN-Core 2 half precision: the 1-6-9 format, as vectorised numpy bit manipulation.

Layout [ISA]: 1 sign bit, 6 exponent bits (bias 31), 9 mantissa bits with a hidden leading
one, so 1.0 is 0x3e00. Exponent 0 holds zero and subnormals (value = m * 2**-39).
Exponent 63 is kept for specials, as IEEE does: mantissa 0 is infinity, anything else NaN.

Rounding: round to nearest, ties to even, from float32 or float64 in one step (no double
rounding through float32). The range saturates: a finite value too large for the format
becomes the largest finite half (`HALF_MAX`, about 4.29e9), never infinity; only an
infinite input gives infinity, and NaN stays NaN (canonical quiet NaN 0x7f00, sign kept).
"""

from __future__ import annotations

import sys

import numpy as np

HALF_EXP_BITS = 6
HALF_MAN_BITS = 9
HALF_BIAS = 31
HALF_ONE = 0x3E00
HALF_INF = 0x7E00
HALF_NAN = 0x7F00
HALF_MAX_BITS = 0x7DFF  # exponent 62, all mantissa bits set
HALF_MAX = (2.0 - 2.0**-HALF_MAN_BITS) * 2.0 ** (62 - HALF_BIAS)
HALF_MIN_NORMAL = 2.0 ** (1 - HALF_BIAS)
HALF_MIN_SUBNORMAL = 2.0 ** (1 - HALF_BIAS - HALF_MAN_BITS)
HALF_EPS = 2.0**-HALF_MAN_BITS

# Per source float: (mantissa bits, exponent bias, signed int of its width, unsigned int).
_SOURCES = {
    np.dtype(np.float32): (23, 127, np.int32, np.uint32),
    np.dtype(np.float64): (52, 1023, np.int64, np.uint64),
}
# Elements per conversion block: the temporaries of one block stay in the CPU's L2 cache,
# which makes the chain of numpy passes below about three times faster on large arrays.
_BLOCK = 1 << 15


def float_to_half_bits(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Round float16/32/64 values to 1-6-9 half; return the uint16 bit patterns (in `out`,
    a contiguous uint16 array of x's shape, when given)."""
    x = np.asarray(x)
    if x.dtype == np.float16:
        x = x.astype(np.float32)  # exact: every IEEE half is a float32
    if x.dtype not in _SOURCES:
        raise TypeError(f"half conversion takes float16/32/64 data, not {x.dtype}")
    flat = np.ascontiguousarray(x).reshape(-1)
    if out is None:
        out = np.empty(x.shape, np.uint16)
    dest = out.reshape(-1)  # a view for contiguous `out`
    with np.errstate(all="ignore"):  # nan/inf lanes compute garbage that is then replaced
        for i in range(0, flat.size, _BLOCK):
            _encode_block(flat[i : i + _BLOCK], dest[i : i + _BLOCK])
    return out


def _high_word(words: int) -> int:
    """Index of the most significant 16-bit word within a native-order value of `words`."""
    return words - 1 if sys.byteorder == "little" else 0


def _encode_block(x: np.ndarray, out: np.ndarray) -> None:
    man_bits, bias, sint, uint = _SOURCES[x.dtype]
    nbits = 8 * x.dtype.itemsize
    shift = man_bits - HALF_MAN_BITS
    mag = (x.view(uint) & uint((1 << (nbits - 1)) - 1)).view(sint)

    # Normal results: rebias the exponent and round the dropped bits to nearest even.
    r = mag >> shift
    r &= 1
    r += sint((1 << (shift - 1)) - 1 - ((bias - HALF_BIAS) << man_bits))
    r += mag
    r >>= shift
    # Two reductions tell whether the rare cases below occur in this block at all.
    low, high = r.min(), r.max()

    # Below the smallest normal (r < 0x200 there, zero included): adding
    # 2**(man_bits - 39) makes the float unit round the value to a multiple of 2**-39
    # (ties to even); the sum's low bits are then the half bits.
    if low < 1 << HALF_MAN_BITS:
        absx = mag.view(x.dtype)
        magic = x.dtype.type(2.0 ** (man_bits - HALF_BIAS + 1 - HALF_MAN_BITS))
        sub = (absx + magic).view(sint) - np.asarray(magic).view(sint)
        np.copyto(r, sub, where=absx < HALF_MIN_NORMAL)

    if high > HALF_MAX_BITS:
        np.minimum(r, HALF_MAX_BITS, out=r)  # saturate finite overflow
        inf_bits = ((1 << (nbits - 1 - man_bits)) - 1) << man_bits
        special = mag >= inf_bits
        if special.any():
            r[special] = np.where(mag[special] == inf_bits, HALF_INF, HALF_NAN)

    np.copyto(out, r, casting="unsafe")
    # The sign is the top bit of the source's most significant 16-bit word.
    words = nbits // 16
    out |= x.view(np.uint16)[_high_word(words) :: words] & np.uint16(0x8000)


# Placing the 15 magnitude bits at the top of a float32's exponent/mantissa fields gives
# value * 2**(31 - 127) for normals and subnormals alike; one multiply restores the scale.
_DECODE_SCALE = np.float32(2.0 ** (127 - HALF_BIAS))


def half_bits_to_float(bits: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Decode uint16 1-6-9 patterns to float32 (exact: every half is a float32)."""
    bits = np.asarray(bits)
    if bits.dtype != np.uint16:
        raise TypeError(f"half bit patterns are uint16, not {bits.dtype}")
    flat = np.ascontiguousarray(bits).reshape(-1)
    if out is None:
        out = np.empty(bits.shape, np.float32)
    dest = out.reshape(-1).view(np.uint32)
    for i in range(0, flat.size, _BLOCK):
        _decode_block(flat[i : i + _BLOCK], dest[i : i + _BLOCK])
    return out


def _decode_block(h: np.ndarray, out: np.ndarray) -> None:
    # One widening shift puts the magnitude bits in place and the sign at bit 29, which is
    # moved to bit 31 after the scaling (a quarter faster than or-ing the sign into every
    # other 16-bit word).
    np.left_shift(h, 23 - HALF_MAN_BITS, out=out, dtype=np.uint32, casting="unsafe")
    sign = out & np.uint32(0x8000 << (23 - HALF_MAN_BITS))
    out &= np.uint32(0x7FFF << (23 - HALF_MAN_BITS))
    special = out.max() >= HALF_INF << (23 - HALF_MAN_BITS)
    value = out.view(np.float32)
    value *= _DECODE_SCALE
    if special:
        at = (h & 0x7FFF) >= HALF_INF
        value[at] = np.where((h[at] & 0x1FF) == 0, np.inf, np.nan)
    sign <<= 31 - 15 - (23 - HALF_MAN_BITS)
    out |= sign


def round_to_half(x: np.ndarray) -> np.ndarray:
    """The float32 value the device keeps when it stores `x` as half."""
    return half_bits_to_float(float_to_half_bits(x))
