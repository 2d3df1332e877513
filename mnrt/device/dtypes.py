"""The device dtype table: the one place that knows how each dtype is stored and computed.

A dtype has three numpy faces: `storage` (the bits in device memory), `host` (what users
write and read; None for MN-Core half, which has no numpy dtype and reads back as float32)
and `compute` (what kernels compute in before rounding back to storage, as the device's
wider datapaths do: half and IEEE float16 compute in float32).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import DTypeError
from . import numerics


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
        return array.dtype in _HALF_SOURCES

    def to_storage(self, array: np.ndarray) -> np.ndarray:
        """Host data (already checked by `accepts`) as the bits the device stores."""
        if self.is_half:
            return numerics.float_to_half_bits(array)
        return array

    def from_storage(self, bits: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """What the device stores, as host data (into `out` if given, else a fresh array)."""
        if self.is_half:
            return numerics.half_bits_to_float(bits, out=out)
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
        if self.is_half:
            return numerics.half_bits_to_float(bits, out=out)
        if out is None:
            return bits.astype(self.compute)
        np.copyto(out, bits)
        return out

    def store(self, bits: np.ndarray, values: np.ndarray) -> None:
        """Round computed values to this dtype, as the device does, into stored bits."""
        if self.is_half:
            values = np.asarray(values)
            if values.dtype not in (np.float32, np.float64):
                values = values.astype(np.float32)  # float64 rounds once, straight to half
            if bits.flags.c_contiguous:
                numerics.float_to_half_bits(values, out=bits)
            else:
                np.copyto(bits, numerics.float_to_half_bits(values))
        elif self.storage.kind == "b":
            np.copyto(bits, np.asarray(values) != 0)
        else:
            np.copyto(bits, values, casting="unsafe")


_HALF_SOURCES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _dt(name, code, storage, compute, host, precision, rtol, atol) -> DType:
    host_dtype = np.dtype(host) if host is not None else None
    return DType(
        name, code, np.dtype(storage), np.dtype(compute), host_dtype, precision, rtol, atol
    )


DOUBLE = _dt("double", 1, np.float64, np.float64, np.float64, "double", 1e-9, 1e-12)
FLOAT = _dt("float", 2, np.float32, np.float32, np.float32, "float", 1e-5, 1e-6)
HALF = _dt("half", 3, np.uint16, np.float32, None, "half", 2.0**-8, 2.0**-12)
FLOAT16 = _dt("float16", 4, np.float16, np.float32, np.float16, "half", 2.0**-9, 2.0**-14)
INT32 = _dt("int32", 5, np.int32, np.int32, np.int32, "float", 0.0, 0.0)
UINT8 = _dt("uint8", 6, np.uint8, np.uint8, np.uint8, "half", 0.0, 0.0)
BOOL = _dt("bool", 7, np.bool_, np.bool_, np.bool_, "half", 0.0, 0.0)

DTYPES: dict[str, DType] = {d.name: d for d in (DOUBLE, FLOAT, HALF, FLOAT16, INT32, UINT8, BOOL)}
BY_CODE: dict[int, DType] = {d.code: d for d in DTYPES.values()}
# numpy spellings users reach for; "float16" deliberately means IEEE, never MN-Core half.
_ALIASES = {"float64": DOUBLE, "float32": FLOAT, "f64": DOUBLE, "f32": FLOAT, "fp16": FLOAT16}


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
    raise DTypeError(
        f"unknown dtype {spec!r}: device dtypes are {', '.join(DTYPES)} "
        "(MN-Core 1-6-9 half is 'half'; IEEE binary16 is 'float16')"
    )
