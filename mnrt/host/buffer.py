"""Buffer: a named, typed, shaped region of one device's DRAM."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

import numpy as np

from ..device.dtypes import DType
from ..device.kernels import TensorSpec
from ..errors import DeviceMismatchError, InvalidArgumentError, MnrtError, UseAfterFreeError
from .observe import api

if TYPE_CHECKING:
    from .device import Device

_uids = itertools.count(1)


class Buffer:
    """A DRAM allocation. Create with `Device.create_buffer`; free with `deallocate()`."""

    __slots__ = (
        "_bits", "_live", "_unfilled", "address", "device", "dtype", "name", "nbytes", "shape",
        "spec", "tag", "uid",
    )  # fmt: skip

    def __init__(self, device: Device, shape: tuple[int, ...], dtype: DType, name: str) -> None:
        self.device = device
        self.shape = shape
        self.dtype = dtype
        self.name = name
        self.nbytes = math.prod(shape) * dtype.itemsize
        self.spec = TensorSpec(shape, dtype)
        self.uid = next(_uids)  # process-unique; never reused, unlike addresses
        self.tag = 0  # an observer's id for this buffer (see host/observe.py); 0: none
        self.address = device._backend.allocate(shape, dtype, f"buffer '{name}'")
        self._live = True
        # Host memory comes with the first command that uses the buffer (`_storage`): DRAM
        # costs the host only what is touched, whatever size a binary asks for.
        self._bits: np.ndarray | None = None
        # The device's fill is put in by the first command that reads the memory or writes
        # part of it (`_fill_in`); one that writes it whole makes the fill moot.
        self._unfilled = True

    @property
    def is_allocated(self) -> bool:
        return self._live

    @api("deallocate")
    def deallocate(self) -> None:
        """Free the DRAM. Waits for queued commands first, as cudaFree does."""
        self.device._before_memory_change(f"deallocate buffer '{self.name}'")
        if not self._live:
            raise UseAfterFreeError(f"buffer '{self.name}' was already deallocated")
        self.device._release_buffer(self)
        self._forget()

    def _forget(self) -> None:
        """Mark the buffer freed (its DRAM was given back)."""
        self._live = False
        self._bits = None

    def _fill_in(self) -> None:
        """Before a command reads this buffer, or writes only part of it. The flag drops
        once the fill is in, not before: a command of another queue reading the buffer
        meanwhile puts the fill in too (the same bytes) instead of reading it half-filled,
        and a fill cut short by Ctrl-C is put in again."""
        if self._unfilled:
            if self._live:
                self.device._backend.fill_in(self._storage(), self.address)
            self._unfilled = False

    def peek(self) -> np.ndarray:
        """The stored bits as they are now (a live view; copy to keep them), without a
        queue: for a KernelWatch (see commands.py), which runs between two kernels on the
        thread running the queue, and for capture's snapshots and the sending end of a copy
        between MPI ranks, once their queues are drained (see internal.py), which must not
        enqueue. Anywhere else use `enqueue_read_buffer`."""
        self._fill_in()
        return self._storage()

    def _storage(self) -> np.ndarray:
        """The live storage view, backed by host memory on first use; raises if the buffer
        was freed, OutOfMemoryError if the host cannot back it."""
        bits = self._bits
        if bits is not None:
            return bits
        if not self._live:
            raise UseAfterFreeError(
                f"buffer '{self.name}' was deallocated; create a new buffer instead"
            )
        bits = self.device._backend.storage(self.address, self.shape, self.dtype)
        self._bits = bits
        return bits

    def _check_device(self, device: Device, role: str) -> None:
        if self.device is not device:
            raise foreign_object_error(
                f"{role}buffer '{self.name}'",
                self.device,
                device,
                "belongs to",
                "create it on the device that uses it",
            )
        if self._bits is None:
            # A close racing this call marks the device closed before freeing its buffers.
            if not self._live and not device.is_open:
                raise device._closed_error()
            self._storage()

    def __repr__(self) -> str:
        state = f"@{self.address:#x}" if self._live else "freed"
        return f"Buffer('{self.name}', {self.dtype.name}{list(self.shape)}, {state})"


class BufferView(Buffer):
    """Part of a buffer that a program's slot names (see program.SlotView): `shape`
    elements of the buffer's dtype from element `offset` on, row-major. Made when a program
    is bound, never by the host: it owns no memory, and its fill is the buffer's."""

    __slots__ = ("offset", "parent")

    def __init__(self, parent: Buffer, offset: int, shape: tuple[int, ...], name: str) -> None:
        self.device = parent.device
        self.shape = shape
        self.dtype = parent.dtype
        self.name = name
        self.nbytes = math.prod(shape) * parent.dtype.itemsize
        self.spec = TensorSpec(shape, parent.dtype)
        self.uid = next(_uids)
        self.tag = 0
        self.address = parent.address + offset * parent.dtype.itemsize
        self.parent, self.offset = parent, offset
        self._live = True
        self._bits = None
        self._unfilled = False

    @property
    def is_allocated(self) -> bool:
        return self.parent.is_allocated

    def deallocate(self) -> None:
        raise InvalidArgumentError(
            f"'{self.name}' is part of buffer '{self.parent.name}'; deallocate that buffer"
        )

    def _fill_in(self) -> None:
        self.parent._fill_in()

    def _storage(self) -> np.ndarray:
        whole = self.parent._storage()  # raises once the buffer is freed
        bits = self._bits
        if bits is None:
            size = math.prod(self.shape)
            flat = whole.reshape(-1)[self.offset : self.offset + size]
            bits = self._bits = flat.reshape(self.shape)
        return bits


def foreign_object_error(
    what: str, owner: Device, device: Device, relation: str, fix: str
) -> MnrtError:
    """The error for `what` (a buffer or program of device `owner`) used on `device`. An
    object of a closed device was freed with it, even when that device has been opened again
    since (as a new Device object): using it is a use after free, not a device mismatch."""
    if not owner.is_open:
        return UseAfterFreeError(
            f"{what} was freed when device {owner.index} was closed; "
            "create it again on the open device"
        )
    return DeviceMismatchError(
        f"{what} {relation} device {owner.index}, not device {device.index}; {fix}"
    )
