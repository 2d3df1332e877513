"""What the layers above the host API (capture, replay, the compiler) do to host objects
and their users may not: move a buffer's stored bits with no queue, let a device go without
raising, follow what a queue was given.

The host's classes keep their internals to themselves; this module is the one place the
layers above reach them through, so the protocol between them is read and reviewed here.
It is not part of mnrt's public API.
"""

from __future__ import annotations

import numpy as np

from ..device.cost import Modelled
from .buffer import Buffer
from .commands import Command
from .device import Device
from .queue import CommandQueue
from .trace import Trace


def sync(device: Device) -> None:
    """Run everything every queue of `device` was given. Raises nothing: a command's error
    stays with its queue, for its next call to raise as it would have."""
    device._sync()


def overwrite(buf: Buffer, data: np.ndarray) -> None:
    """Put `data` (of `buf`'s storage dtype and shape) in `buf` with no queue, once every
    queue of its device is done with the old contents: the receiving end of a copy between
    MPI ranks whose other end's queue did the copying."""
    sync(buf.device)
    np.copyto(buf._storage(), data)
    buf._unfilled = False


def fills_with_zeros(device: Device) -> bool:
    """Whether a new buffer of `device` holds zeros (what replay's fresh buffers hold), not
    another fill that `Device.clear` set and a capture must record."""
    return device._backend.memory.fill.kind == "zero"


def close_quietly(device: Device) -> None:
    """Release `device` without waiting for its queues' errors to be raised: for a runner
    or a finalizer that has nobody left to raise them to."""
    device._close_quietly()


def trace(device: Device, trace_id: int) -> Trace | None:
    """`device`'s trace `trace_id`, complete or not, if it holds one (Device.replay_trace
    raises for any other, which a caller that only looks must not)."""
    return device._traces.get(trace_id)


def drain(queue: CommandQueue) -> None:
    """Wait until everything enqueued on `queue` so far has run; raises nothing."""
    queue._drain()


def capturing(queue: CommandQueue) -> Trace | None:
    """The trace `queue` is capturing now (begun and not yet ended), if any."""
    return queue._capture


def last_command(queue: CommandQueue) -> Command | None:
    """The command submitted last to `queue`: what a replay ties the binary's command to
    in its timeline."""
    return queue._last


def write_stored(
    queue: CommandQueue,
    buffer: Buffer,
    bits: np.ndarray,
    blocking: bool = False,
    priced: Modelled | None = None,
) -> None:
    """Enqueue a write of bits already in `buffer`'s stored form, as a binary holds them
    (no rounding), of `buffer`'s size, which the caller has checked. `priced`: what the
    write costs when the bits did not come over the host link (the receiving end of a copy
    between MPI ranks: that copy's cost)."""
    queue._enqueue_write_stored(buffer, bits, blocking, priced)


def check_read(queue: CommandQueue, buffer: Buffer, blocking: bool = True) -> np.ndarray:
    """Read `buffer` for a golden check: as `enqueue_read_buffer` reads it, at no modelled
    cost (the runner verifying the workload, not the workload; see commands.ReadBuffer)."""
    return queue._enqueue_read(buffer, blocking, check=True)


def start_profiling(queue: CommandQueue) -> None:
    """Keep every command `queue` runs from now on, with when it was enqueued and when each
    kernel ran: what a profile is drawn from."""
    queue._start_profiling()
