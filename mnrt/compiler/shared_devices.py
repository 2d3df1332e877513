"""The devices a Context's pipelined functions run on besides its own, shared among them.

A process opens each emulated device once, as a device file is opened once. A pipelined
function spans several devices, so two of one Context over devices 0 and 1 (one model at two
presets, compared) must share device 1 as every function of a Context shares the Context's
own device: each opening it for itself, the second compile was refused with "device 1 is
already open in this process". A device stays open while some function uses it and closes
with the last one released (closed or dropped), so that the host API may open it again.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable

from ..errors import MnrtError
from ..host import Device, open_device


class SharedDevices:
    """Devices by index, each with the number of functions using it."""

    def __init__(self) -> None:
        self._held: dict[int, tuple[Device, int]] = {}
        # Reentrant: opening a device may collect a dropped function, whose finalizer
        # gives its devices back on this thread.
        self._lock = threading.RLock()

    def acquire(self, index: int) -> Device:
        """Device `index` for one more function, opened if no function holds it."""
        with self._lock:
            device, users = self._held.get(index, (None, 0))
            if device is None or not device.is_open:
                device, users = open_device(index), 0
            self._held[index] = (device, users + 1)
            return device

    def release(self, devices: Iterable[Device]) -> None:
        """Give back one use of each device (a finalizer's call: any thread, any moment),
        closing those no function uses any more, each even when closing another reported
        an error (a device error not yet seen: the function is gone, so is its result)."""
        closing = []
        with self._lock:
            for device in devices:
                held, users = self._held.get(device.index, (None, 0))
                if held is not device:  # closed with the Context already
                    continue
                if users > 1:
                    self._held[device.index] = (device, users - 1)
                else:
                    del self._held[device.index]
                    closing.append(device)
        _close_all(closing)

    def close(self) -> None:
        """Close every device still held: the Context is closing."""
        with self._lock:
            devices = [device for device, _ in self._held.values()]
            self._held.clear()
        _close_all(devices)


def _close_all(devices: list[Device]) -> None:
    for device in devices:
        with contextlib.suppress(MnrtError):
            device.close()
