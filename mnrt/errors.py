"""The one error hierarchy of mnrt.

Every failure a user can cause is an `MnrtError` subclass. Each class carries the exit code
the CLI uses for it (DESIGN.md section 8), so the CLI catches `MnrtError` once at the top and
never needs to know which subclass it got.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_GOLDEN_MISMATCH = 1
EXIT_USAGE = 2
EXIT_DEVICE = 3
EXIT_NO_GOLDENS = 4  # `mnrt run` of a binary without goldens: nothing verified
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report a process SIGINT ended


class MnrtError(Exception):
    """Base of every error a user of mnrt can cause."""

    exit_code: int = EXIT_USAGE

    def to_dict(self) -> dict:
        """The error for machines (a report's `error`, `mnrt ... --json`)."""
        return error_dict(type(self).__name__, str(self), self.exit_code)


def error_dict(kind: str, message: str, exit_code: int) -> dict:
    """An error as `--json` output and reports give it: its type, message and exit code."""
    return {"type": kind, "message": message, "exit_code": exit_code}


# --- argument errors: raised at the call that got the bad argument -----------------------


class InvalidArgumentError(MnrtError, ValueError):
    """An argument has the wrong value, type or form."""


class ShapeError(InvalidArgumentError):
    """Shapes of buffers, arrays or kernel operands do not agree."""


class DTypeError(InvalidArgumentError):
    """A dtype is unknown, or the wrong one for this buffer or kernel operand."""


class UnknownKernelError(InvalidArgumentError, LookupError):
    """A kernel name that is not in the registry."""


class KernelAttributeError(InvalidArgumentError):
    """A kernel attribute that is unknown, missing or out of range."""


class BindingError(InvalidArgumentError):
    """A program slot is unbound, bound twice, or bound to an unknown name."""


class DeviceMismatchError(InvalidArgumentError):
    """An object of one device was used with another device."""


class UseAfterFreeError(InvalidArgumentError):
    """A buffer, program or trace was used after it was deallocated or released."""


class DeviceNotFoundError(InvalidArgumentError, LookupError):
    """No emulated device has the requested index."""


class TraceError(InvalidArgumentError):
    """A device-trace rule was broken (nesting, a forbidden call inside a trace, unknown id)."""


# --- light binaries ------------------------------------------------------------------------


class CaptureError(InvalidArgumentError):
    """A host call that a light binary cannot represent happened during capture."""


class InvalidBinaryError(MnrtError):
    """A light binary (.mnlb) is malformed, corrupt, truncated, or not one at all.

    `offset` is the byte offset of the problem in the file and `command` the index of the
    command it concerns, when known."""

    def __init__(self, message: str, offset: int | None = None, command: int | None = None):
        where = []
        if command is not None:
            where.append(f"command {command}")
        if offset is not None:
            where.append(f"offset {offset}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.offset = offset
        self.command = command


class UnsupportedVersionError(InvalidBinaryError):
    """The binary's format version or schema is not one this mnrt reads."""


# --- device errors: the device could not do what was asked -------------------------------


class DeviceError(MnrtError):
    """The emulated device failed or refused the request."""

    exit_code = EXIT_DEVICE


class DeviceBusyError(DeviceError):
    """The requested device, or every device, is already open in this process."""


class DeviceClosedError(DeviceError):
    """The device (or one of its queues) was used after close()."""


class OutOfMemoryError(DeviceError, MemoryError):
    """The device allocator has no free block large enough for a request."""


class DeviceExecutionError(DeviceError):
    """A command failed while the device executed it; raised by the next finish() or
    blocking call."""


class EventTimeoutError(DeviceError, TimeoutError):
    """Event.wait(timeout=...) returned before the event completed."""


class TransportError(DeviceError):
    """A message between the ranks of a distributed replay failed or did not come in time
    (`mpiexec ... mnrt run --mpi`); the other ranks are ended with it."""
