"""The device dtype table: the one place that knows how each dtype is stored and computed.

A dtype has three numpy faces: `storage` (the bits in device memory), `host` (what users
write and read; None for MN-Core half and bfloat16, which have no numpy dtype: they are
stored as uint16 bit patterns through a `Codec`, written from float16/32/64 and read back
as float32) and `compute` (what kernels compute in before rounding back to storage, as the
device's wider datapaths do: half, bfloat16 and IEEE float16 compute in float32).

Integers compute in their own width (sums and products wrap there, like C); nothing
integer passes through float, so int64 and uint64 values above 2**53 stay exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..errors import DTypeError
from . import bfloat16, numerics


class Codec(NamedTuple):
    """How a dtype without a numpy dtype is stored: `encode` rounds float16/32/64 values to
    its uint16 bit patterns (into `out` when given), `decode` widens them to float32;
    `man_bits`, the stored mantissa bits, is its precision (numpy's finfo has none for it)."""

    encode: Callable[..., np.ndarray]
    decode: Callable[..., np.ndarray]
    man_bits: int


_HALF_CODEC = Codec(
    numerics.float_to_half_bits, numerics.half_bits_to_float, numerics.HALF_MAN_BITS
)
_BFLOAT16_CODEC = Codec(
    bfloat16.float_to_bfloat16_bits, bfloat16.bfloat16_bits_to_float, bfloat16.MAN_BITS
)


@dataclass(frozen=True, eq=False)
class DType:
    """One device dtype. Instances are singletons: compare them with `is`."""

    name: str
    code: int  # stable small integer for serialised formats; 0 means "invalid"
    storage: np.dtype
    compute: np.dtype
    host: np.dtype | None
    precision: str  # key of DeviceSpec.peak_tflops used by the timing model
    rtol: float  # default golden tolerances: |a-b| <= atol + rtol*|b|
    atol: float
    codec: Codec | None = None  # for dtypes stored as bit patterns numpy has no dtype for

    direct: bool = field(init=False)  # kernels compute straight into storage (no rounding)

    def __post_init__(self) -> None:
        object.__setattr__(self, "direct", self.storage == self.compute)

    @property
    def itemsize(self) -> int:
        return self.storage.itemsize

    @property
    def is_float(self) -> bool:
        return self.compute.kind == "f"

    @property
    def is_integer(self) -> bool:
        return self.compute.kind in "iu"

    @property
    def is_signed(self) -> bool:
        """Whether values below zero exist (signed integers and every float)."""
        return self.compute.kind in "if"

    @property
    def is_half(self) -> bool:
        return self is HALF

    @property
    def read_dtype(self) -> np.dtype:
        """The numpy dtype of arrays read back from a buffer of this dtype."""
        return self.host if self.host is not None else self.compute

    def __repr__(self) -> str:
        return f"mnrt.{self.name}"

    # Singletons: a copy (a deepcopy of a graph holding dtypes, say) is the same object.
    def __copy__(self) -> DType:
        return self

    def __deepcopy__(self, memo: dict) -> DType:
        return self

    # --- host <-> storage -----------------------------------------------------------
    def accepts(self, array: np.ndarray) -> bool:
        """Whether host data of this numpy dtype may be written without an explicit cast."""
        if self.host is not None:
            return array.dtype == self.host
        return array.dtype in _CODEC_SOURCES or _is_ml_bfloat16(array.dtype)

    def to_storage(self, array: np.ndarray) -> np.ndarray:
        """Host data (already checked by `accepts`) as the bits the device stores."""
        if self.codec is not None:
            if _is_ml_bfloat16(array.dtype):
                array = array.astype(np.float32)  # exact: every bfloat16 is a float32
            return self.codec.encode(array)
        return array

    def from_storage(self, bits: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """What the device stores, as host data (into `out` if given, else a fresh array)."""
        if self.codec is not None:
            return self.codec.decode(bits, out=out)
        if out is None:
            return bits.copy()
        np.copyto(out, bits)
        return out

    # --- storage <-> compute (used by kernels) --------------------------------------
    def load(self, bits: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Stored bits as values in the compute dtype: a zero-copy view when they agree,
        else widened (into `out`, a compute-dtype array of the same shape, if given)."""
        if self.direct:
            return bits
        if self.codec is not None:
            return self.codec.decode(bits, out=out)
        if out is None:
            return bits.astype(self.compute)
        np.copyto(out, bits)
        return out

    def store(self, bits: np.ndarray, values: np.ndarray) -> None:
        """Round computed values to this dtype, as the device does, into stored bits."""
        if self.codec is not None:
            values = np.asarray(values)
            if values.dtype not in (np.float32, np.float64):
                values = values.astype(np.float32)  # float64 rounds once, straight to bits
            if bits.flags.c_contiguous:
                self.codec.encode(values, out=bits)
            else:
                np.copyto(bits, self.codec.encode(values))
        elif self.storage.kind == "b":
            np.copyto(bits, np.asarray(values) != 0)
        else:
            np.copyto(bits, values, casting="unsafe")


_CODEC_SOURCES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _is_ml_bfloat16(np_dtype: np.dtype) -> bool:
    """ml_dtypes' bfloat16 (what onnx hands out for bfloat16 tensors), known by name so
    that mnrt needs no ml_dtypes."""
    return np_dtype.name == "bfloat16" and np_dtype.itemsize == 2


def host_numbers(array: np.ndarray) -> np.ndarray | None:
    """`array` as numbers in a dtype numpy knows, for the entry points that take host data
    (a compiled call's inputs, example inputs, goldens): itself where it holds bools,
    integers or floats; ml_dtypes' bfloat16, which onnx hands out for bfloat16 tensors, as
    its float32 values (each one exactly); None for anything else (strings, objects,
    complex numbers)."""
    if array.dtype.kind in "biuf":
        return array
    if _is_ml_bfloat16(array.dtype):
        return array.astype(np.float32)
    return None


def _dt(name, code, storage, compute, host, precision, rtol, atol, codec=None) -> DType:
    host_dtype = np.dtype(host) if host is not None else None
    return DType(
        name, code, np.dtype(storage), np.dtype(compute), host_dtype, precision, rtol, atol, codec
    )


def _int(name: str, code: int, numpy_type: type, precision: str) -> DType:
    """An integer dtype: stored, computed and read as itself; goldens compare exactly."""
    return _dt(name, code, numpy_type, numpy_type, numpy_type, precision, 0.0, 0.0)


DOUBLE = _dt("double", 1, np.float64, np.float64, np.float64, "double", 1e-9, 1e-12)
FLOAT = _dt("float", 2, np.float32, np.float32, np.float32, "float", 1e-5, 1e-6)
HALF = _dt("half", 3, np.uint16, np.float32, None, "half", 2.0**-8, 2.0**-12, _HALF_CODEC)
FLOAT16 = _dt("float16", 4, np.float16, np.float32, np.float16, "half", 2.0**-9, 2.0**-14)
INT32 = _int("int32", 5, np.int32, "float")
UINT8 = _int("uint8", 6, np.uint8, "half")
BOOL = _dt("bool", 7, np.bool_, np.bool_, np.bool_, "half", 0.0, 0.0)
INT64 = _int("int64", 8, np.int64, "double")
INT8 = _int("int8", 9, np.int8, "half")
INT16 = _int("int16", 10, np.int16, "half")
UINT16 = _int("uint16", 11, np.uint16, "half")
UINT32 = _int("uint32", 12, np.uint32, "float")
UINT64 = _int("uint64", 13, np.uint64, "double")
# 8 significant bits: unit roundoff 2**-8; tolerances 4x it, as half's are.
BFLOAT16 = _dt(
    "bfloat16", 14, np.uint16, np.float32, None, "half", 2.0**-6, 2.0**-10, _BFLOAT16_CODEC
)

# Codes are the values of the schema's DType enum (schema/base.fbs); a test checks that
# the two agree name for name.
DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DOUBLE, FLOAT, HALF, FLOAT16, INT32, UINT8, BOOL,
        INT64, INT8, INT16, UINT16, UINT32, UINT64, BFLOAT16,
    )
}  # fmt: skip
BY_CODE: dict[int, DType] = {d.code: d for d in DTYPES.values()}

# Dtype families kernels declare what they take by, derived from the table above.
FLOATS: tuple[DType, ...] = tuple(d for d in DTYPES.values() if d.is_float)
INTEGERS: tuple[DType, ...] = tuple(d for d in DTYPES.values() if d.is_integer)
SIGNED_INTEGERS: tuple[DType, ...] = tuple(d for d in INTEGERS if d.is_signed)
NUMERIC: tuple[DType, ...] = FLOATS + INTEGERS
SIGNED: tuple[DType, ...] = FLOATS + SIGNED_INTEGERS
# Integer dtypes indices may have (gather, scatter, ...): the ones ONNX uses for them.
INDEX: tuple[DType, ...] = (INT32, INT64)
# numpy spellings users reach for; "float16" deliberately means IEEE, never MN-Core half.
_ALIASES = {
    "float64": DOUBLE,
    "float32": FLOAT,
    "f64": DOUBLE,
    "f32": FLOAT,
    "fp16": FLOAT16,
    "bf16": BFLOAT16,
}


def dtype(spec: DType | str | np.dtype | type) -> DType:
    """Resolve a dtype given as a DType, a name, or a numpy dtype with a device equivalent."""
    if isinstance(spec, DType):
        return spec
    if isinstance(spec, str):
        found = DTYPES.get(spec) or _ALIASES.get(spec)
        if found is not None:
            return found
    else:
        try:
            np_dt = np.dtype(spec)
        except (TypeError, ValueError):
            np_dt = None
        # Not `d.host == np_dt` for a spec numpy rejects: numpy compares a dtype equal to
        # None (float64's spelling), which made any unknown non-string spec 'double'.
        for d in DTYPES.values():
            if np_dt is not None and spec is not None and d.host == np_dt:
                return d
        if np_dt is not None and _is_ml_bfloat16(np_dt):
            return BFLOAT16
    raise DTypeError(
        f"unknown dtype {spec!r}: device dtypes are {', '.join(DTYPES)} "
        "(MN-Core 1-6-9 half is 'half'; IEEE binary16 is 'float16')"
    )
