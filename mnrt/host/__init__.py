"""The host API: devices, buffers, programs, command queues and device traces."""

from .buffer import Buffer
from .device import Device, list_devices, open_device
from .event import Event
from .program import Kernel, Program, SlotView
from .queue import CommandQueue

__all__ = [
    "Buffer",
    "CommandQueue",
    "Device",
    "Event",
    "Kernel",
    "Program",
    "SlotView",
    "list_devices",
    "open_device",
]
