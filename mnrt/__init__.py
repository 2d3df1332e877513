"""mnrt: a capture/replay runtime for an emulated MN-Core 2 accelerator.

The public API is re-exported here; everything else is private unless a module says so.
"""

from __future__ import annotations

from ._version import __version__
from .capture import (
    CaptureError,
    CaptureVerificationError,
    begin_capture,
    capture,
    compare_to_golden,
    end_capture,
)
from .capture import use_verifier as _use_verifier
from .device.boards import DeviceInfo
from .device.dtypes import BFLOAT16 as bfloat16
from .device.dtypes import BOOL as bool_
from .device.dtypes import DOUBLE as float64
from .device.dtypes import FLOAT as float32
from .device.dtypes import FLOAT16 as float16
from .device.dtypes import HALF as half
from .device.dtypes import INT8 as int8
from .device.dtypes import INT16 as int16
from .device.dtypes import INT32 as int32
from .device.dtypes import INT64 as int64
from .device.dtypes import UINT8 as uint8
from .device.dtypes import UINT16 as uint16
from .device.dtypes import UINT32 as uint32
from .device.dtypes import UINT64 as uint64
from .device.dtypes import DType, dtype
from .device.kernels import all_kernels as _all_kernels
from .device.spec import MNCORE2, DeviceSpec, LinkSpec
from .errors import (
    BindingError,
    DeviceBusyError,
    DeviceClosedError,
    DeviceError,
    DeviceExecutionError,
    DeviceMismatchError,
    DeviceNotFoundError,
    DTypeError,
    EventTimeoutError,
    InvalidArgumentError,
    InvalidBinaryError,
    KernelAttributeError,
    MnrtError,
    OutOfMemoryError,
    ShapeError,
    TraceError,
    TransportError,
    UnknownKernelError,
    UnsupportedVersionError,
    UseAfterFreeError,
)
from .format import LightBinary
from .host import (
    Buffer,
    CommandQueue,
    Device,
    Event,
    Kernel,
    Program,
    SlotView,
    list_devices,
    open_device,
)
from .host.golden import Check
from .host.timeline import Span, Timeline
from .replay import ReplayReport, replay, verify_capture

_use_verifier(
    verify_capture
)  # capture(verify=True) replays through replay (never imported by capture)

# The compiler's entry points, imported on first use: `mnrt run` never loads the compiler.
_LAZY = ("CacheOptions", "Context", "MNDevice", "TensorProxy")


def __getattr__(name: str):
    if name in _LAZY:
        from . import compiler

        return getattr(compiler, name)
    raise AttributeError(f"module 'mnrt' has no attribute {name!r}")


def kernels() -> list[dict]:
    """Every device kernel: name, operands, attributes (kind, default, required, doc) and a
    one-line doc."""
    return [k.describe() for k in _all_kernels()]


__all__ = [
    "MNCORE2",
    "BindingError",
    "Buffer",
    "CaptureError",
    "CaptureVerificationError",
    "Check",
    "CommandQueue",
    "DType",
    "DTypeError",
    "Device",
    "DeviceBusyError",
    "DeviceClosedError",
    "DeviceError",
    "DeviceExecutionError",
    "DeviceInfo",
    "DeviceMismatchError",
    "DeviceNotFoundError",
    "DeviceSpec",
    "Event",
    "EventTimeoutError",
    "InvalidArgumentError",
    "InvalidBinaryError",
    "Kernel",
    "KernelAttributeError",
    "LightBinary",
    "LinkSpec",
    "MnrtError",
    "OutOfMemoryError",
    "Program",
    "ReplayReport",
    "ShapeError",
    "SlotView",
    "Span",
    "Timeline",
    "TraceError",
    "TransportError",
    "UnknownKernelError",
    "UnsupportedVersionError",
    "UseAfterFreeError",
    "__version__",
    "begin_capture",
    "bfloat16",
    "bool_",
    "capture",
    "compare_to_golden",
    "dtype",
    "end_capture",
    "float16",
    "float32",
    "float64",
    "half",
    "int8",
    "int16",
    "int32",
    "int64",
    "kernels",
    "list_devices",
    "open_device",
    "replay",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]
