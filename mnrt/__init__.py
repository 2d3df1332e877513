"""mnrt: a capture/replay runtime for an emulated MN-Core 2 accelerator.

The public API is re-exported here; everything else is private unless a module says so.
"""

from __future__ import annotations

from .device.boards import DeviceInfo
from .device.dtypes import BOOL as bool_
from .device.dtypes import DOUBLE as float64
from .device.dtypes import FLOAT as float32
from .device.dtypes import FLOAT16 as float16
from .device.dtypes import HALF as half
from .device.dtypes import INT32 as int32
from .device.dtypes import UINT8 as uint8
from .device.dtypes import DType, dtype
from .device.kernels import all_kernels as _all_kernels
from .device.spec import MNCORE2, DeviceSpec
from .errors import (
    BindingError,
    DeviceBusyError,
    DeviceClosedError,
    DeviceError,
    DeviceExecutionError,
    DeviceMismatchError,
    DeviceNotFoundError,
    DTypeError,
    InvalidArgumentError,
    KernelAttributeError,
    MnrtError,
    OutOfMemoryError,
    ShapeError,
    TraceError,
    UnknownKernelError,
    UseAfterFreeError,
)
from .host import Buffer, CommandQueue, Device, Kernel, Program, list_devices, open_device

__version__ = "0.1.0"


def kernels() -> list[dict]:
    """Every device kernel: name, operands, attributes (kind, default, doc) and a one-line doc."""
    return [k.describe() for k in _all_kernels()]


__all__ = [
    "MNCORE2",
    "BindingError",
    "Buffer",
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
    "InvalidArgumentError",
    "Kernel",
    "KernelAttributeError",
    "MnrtError",
    "OutOfMemoryError",
    "Program",
    "ShapeError",
    "TraceError",
    "UnknownKernelError",
    "UseAfterFreeError",
    "bool_",
    "dtype",
    "float16",
    "float32",
    "float64",
    "half",
    "int32",
    "kernels",
    "list_devices",
    "open_device",
    "uint8",
]
