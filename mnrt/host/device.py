"""Device: an opened emulated board and the host API calls that belong to the whole device."""

from __future__ import annotations

import gc
import itertools
import math
import os
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..device import boards
from ..device.dtypes import DType
from ..device.dtypes import dtype as resolve_dtype
from ..device.emulator import EmulatedDevice
from ..device.memory import Fill
from ..device.spec import MNCORE2, DeviceSpec
from ..errors import (
    DeviceBusyError,
    DeviceClosedError,
    DeviceError,
    InvalidArgumentError,
    ShapeError,
    TraceError,
)
from ..format.text import bad_name
from . import workers
from .buffer import Buffer
from .observe import api
from .program import Kernel, Program, SlotView
from .queue import DEFAULT_HISTORY, CommandQueue
from .trace import Trace

MAX_QUEUES = 8

_open_lock = threading.Lock()
# The devices open in this process, by index. Weak: a Device dropped without close() must
# not be kept alive by this table (see Device.__init__ for how its index is released).
_open: weakref.WeakValueDictionary[int, Device] = weakref.WeakValueDictionary()


def _check_shape(shape: Any) -> tuple[int, ...]:
    if type(shape) is tuple and set(map(type, shape)) <= {int} and min(shape, default=0) >= 0:
        return shape  # the usual spelling, checked without a per-dimension Python loop
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        dims = None
    if dims is None or not all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims
    ):
        raise ShapeError(f"shape must be a tuple of non-negative ints, got {shape!r}")
    return tuple(int(d) for d in dims)


def extent_bytes(dims: Sequence[int], itemsize: int) -> int:
    """Bytes a buffer of this shape would span with its zero dimensions taken as 1. An empty
    buffer still needs its other dimensions to be addressable (numpy cannot even describe
    (0, 2**31, 2**31) as float64), so this, not its size, is held to the device's DRAM."""
    return math.prod(max(d, 1) for d in dims) * itemsize


def _as_index(value: Any) -> Any:
    """A numpy integer (an index taken from an array, say) as the int it is; anything else
    as given, for the caller's own check to reject by name."""
    return int(value) if isinstance(value, np.integer) else value


def _check_name(what: str, name: Any) -> None:
    """Names end up in light binaries as strings, printable and of bounded length (see
    format/text.py): anything else would only fail when a capture is saved or replayed,
    long after the call that passed it."""
    if name is not None and not isinstance(name, str):
        raise InvalidArgumentError(f"{what} name must be a string, got {name!r}")
    problem = None if name is None else bad_name(name)
    if problem:
        raise InvalidArgumentError(
            f"{what} name {name[:80]!r} cannot be stored in a light binary: {problem}; "
            "use a shorter name of printable characters"
        )


def _check_trace_id(call: str, trace_id: Any) -> None:
    if isinstance(trace_id, bool) or not isinstance(trace_id, (int, np.integer)):
        raise TraceError(
            f"{call}({trace_id!r}): a trace id is the int begin_trace_capture() returned"
        )


class Device:
    """An open emulated MN-Core 2. Use as a context manager, or call close()."""

    tag = 0  # an observer's id for this object (see host/observe.py); 0: none

    def __init__(self, index: int, spec: DeviceSpec = MNCORE2, fill: Fill | None = None) -> None:
        self.index = index
        self.name = boards.device_name(index)
        self.spec = spec
        self.arch = spec.arch
        self._backend = EmulatedDevice(index, self.name, spec)
        # What unwritten memory reads as: the saved device state's, unless given.
        self._backend.memory.fill = boards.load_fill(index) if fill is None else fill
        self._buffers: dict[int, Buffer] = {}
        self._programs: weakref.WeakSet[Program] = weakref.WeakSet()
        self._queues: dict[int, CommandQueue] = {}
        self._traces: dict[int, Trace] = {}
        self._trace_ids = itertools.count(1)
        self._names = itertools.count()
        self._closed = False
        self._forked_from: int | None = None  # the parent's pid, in a forked child
        # A device dropped without close() is garbage (its queues and buffers point back at
        # it, so the cycle collector frees it, see release_dropped): its entry in `_open`
        # goes with it, and this tells its queues' worker threads to let go. It holds only
        # the queues' wake-up channels, never the device.
        self._wakeups: list = []
        self._finalizer = weakref.finalize(self, _stop_workers, self._wakeups)

    # --- lifetime -----------------------------------------------------------------
    def __enter__(self) -> Device:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self._close_quietly()

    @api("close")
    def close(self) -> None:
        """Wait for every queue, release everything, and raise a device error still unseen."""
        if self._closed:
            return
        errors = []
        for q in self._queues.values():
            q._drain()
            if q._error is not None:
                errors.append(q._error)
        self._close_quietly()
        if errors:
            raise errors[0]

    def _close_quietly(self) -> None:
        if self._closed:
            return
        for q in self._queues.values():
            q._stop()
        # Closed before freed: a call racing this one from another thread finds the device
        # closed, rather than its buffers freed and the device still open.
        self._closed = True
        self._free_all()
        self._finalizer.detach()  # the workers were stopped above
        with _open_lock:
            if _open.get(self.index) is self:
                del _open[self.index]

    @property
    def is_open(self) -> bool:
        return not self._closed

    @api("reset")
    def reset(self) -> None:
        """Back to the just-opened state: queues drained and errors dropped, every buffer
        freed (old handles raise on use), traces released, statistics zeroed."""
        self._check_open()
        for q in self._queues.values():
            q._reset()
        self._free_all()

    def _free_all(self) -> None:
        for buf in self._buffers.values():
            buf._forget()
        self._buffers.clear()
        for prog in self._programs:
            prog._forget(None)
        self._traces.clear()
        self._backend.memory.reset()

    @api("clear")
    def clear(
        self,
        zero: bool = False,
        pattern: int | None = None,
        seed: int | None = None,
        width: int | None = None,
    ) -> None:
        """Fill device DRAM: live buffers now hold the fill, and so will new ones, in this
        process and later ones (see `mnrt smi clear`). A pattern repeats every `width`
        bytes (1, 2, 4 or 8; by default the fewest that hold it), little-endian."""
        self._check_open()
        if not isinstance(zero, bool):
            raise InvalidArgumentError(f"clear: zero must be True or False, got {zero!r}")
        for what, value in (("pattern", pattern), ("seed", seed), ("width", width)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, np.integer))
            ):
                raise InvalidArgumentError(f"clear: {what} must be an int, got {value!r}")
        fill = Fill.of(zero=zero, pattern=pattern, seed=seed, width=width)
        self._sync()
        boards.save_fill(self.index, fill)  # first: if it cannot be kept, nothing changes
        # The buffers the clear fills, taken before it: one another thread creates
        # meanwhile may miss the clear, so it keeps waiting for the fill.
        # Only the backed ones: the rest get the fill when first touched.
        for buf in list(self._buffers.values()):
            if buf._bits is not None:
                buf._unfilled = False
        self._backend.memory.clear(fill)

    # --- objects ------------------------------------------------------------------
    @api("create_buffer")
    def create_buffer(
        self, shape: Sequence[int] | int, dtype: DType | str | Any, name: str | None = None
    ) -> Buffer:
        """Allocate a DRAM buffer; its contents are what the device's fill says."""
        self._before_memory_change("create_buffer")
        dims = _check_shape(shape)
        dt = resolve_dtype(dtype)
        _check_name("buffer", name)
        name = name or f"buffer{next(self._names)}"
        nbytes = math.prod(dims) * dt.itemsize
        if nbytes > self.spec.dram_bytes:
            free = self._backend.memory.allocator
            raise DeviceError(
                f"buffer '{name}' of shape {dims} ({dt.name}) needs {nbytes} bytes, more than "
                f"the device's {self.spec.dram_bytes} bytes of DRAM "
                f"({free.free_bytes} free); split it into smaller buffers"
            )
        if nbytes == 0 and extent_bytes(dims, dt.itemsize) > self.spec.dram_bytes:
            raise ShapeError(
                f"buffer '{name}' of shape {dims} ({dt.name}) is empty, but its other "
                f"dimensions span more than the device's {self.spec.dram_bytes} bytes of DRAM; "
                "give an empty buffer small dimensions"
            )
        buf = Buffer(self, dims, dt, name)
        self._buffers[buf.uid] = buf
        return buf

    @api("create_program")
    def create_program(
        self,
        kernels: Sequence[Kernel],
        name: str | None = None,
        views: Mapping[str, SlotView] | None = None,
    ) -> Program:
        """Validate a list of kernels into a program; operand slots are bound at enqueue,
        but for `views`: slots that are part of another slot's buffer (see SlotView)."""
        self._before_memory_change("create_program")
        _check_name("program", name)
        prog = Program(self, kernels, name or f"program{next(self._names)}", views)
        self._programs.add(prog)
        return prog

    @api("command_queue")
    def command_queue(self, index: int = 0, history: int = DEFAULT_HISTORY) -> CommandQueue:
        """The device's queue `index` (0..7), created on first use."""
        self._check_open()
        index = _as_index(index)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < MAX_QUEUES:
            raise InvalidArgumentError(
                f"command queue index must be 0..{MAX_QUEUES - 1}, got {index!r}"
            )
        history = _as_index(history)
        if isinstance(history, bool) or not isinstance(history, int) or history < 0:
            raise InvalidArgumentError(
                f"command queue history must be a non-negative int (commands kept), got {history!r}"
            )
        q = self._queues.get(index)
        if q is None:
            q = self._queues[index] = CommandQueue(self, index, history)
            self._wakeups.append(q._wakeups)
        return q

    @api("release_trace")
    def release_trace(self, trace_id: int) -> None:
        self._check_open()
        _check_trace_id("release_trace", trace_id)
        trace = self._traces.pop(trace_id, None)
        if trace is None:
            raise TraceError(f"release_trace({trace_id!r}): no such trace on device {self.index}")
        capturing = self._queues.get(trace.queue_index)
        if capturing is not None and capturing._capture is trace:
            capturing._capture = None

    def memory_info(self) -> dict[str, int]:
        alloc = self._backend.memory.allocator
        return {
            "total_bytes": self.spec.dram_bytes,
            "used_bytes": alloc.used_bytes,
            "free_bytes": alloc.free_bytes,
            "largest_free_bytes": alloc.largest_free,
            "buffers": alloc.live_blocks,
        }

    # --- internals ----------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise self._closed_error()

    def _closed_error(self) -> DeviceClosedError:
        if self._forked_from is not None:
            return DeviceClosedError(
                f"device {self.index} ({self.name}) was opened by process {self._forked_from} "
                "before it forked this one, whose copy has no queue workers; open devices in "
                f"this process instead (mnrt.open_device({self.index}))"
            )
        return DeviceClosedError(
            f"device {self.index} ({self.name}) is closed; open it again with "
            f"mnrt.open_device({self.index}) and create its buffers and programs anew"
        )

    def _before_memory_change(self, what: str) -> None:
        """Allocation and program creation are not allowed while any queue records a trace."""
        self._check_open()
        for q in self._queues.values():
            if q._capture is not None:
                raise TraceError(
                    f"{what} is not allowed while queue {q.index} captures trace "
                    f"{q._capture.id}; create buffers and programs before begin_trace_capture"
                )

    def _release_buffer(self, buf: Buffer) -> None:
        self._sync()
        self._backend.free(buf.address)
        self._buffers.pop(buf.uid, None)
        for prog in self._programs:
            prog._forget(buf.uid)

    def _sync(self) -> None:
        for q in self._queues.values():
            q._drain()

    def _new_trace(self, queue_index: int) -> Trace:
        trace = Trace(next(self._trace_ids), queue_index)
        self._traces[trace.id] = trace
        return trace

    def _get_trace(self, trace_id: int) -> Trace:
        _check_trace_id("replay_trace", trace_id)
        trace = self._traces.get(trace_id)
        if trace is None:
            raise TraceError(
                f"no trace {trace_id!r} on device {self.index} (never captured, or released)"
            )
        if not trace.complete:
            raise TraceError(f"trace {trace_id} is still being captured; end it first")
        return trace

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<mnrt.Device {self.index}: {self.name} ({state})>"


def _stop_workers(wakeups: list) -> None:
    """A dropped device's finalizer: its queues' worker threads, parked on their wake-up
    channels, return to the pool (see queue._work). A thread that runs a command
    holds the device until the command is done, so none is cut short."""
    for channel in wakeups:
        workers.stop(channel)


def open_indices() -> set[int]:
    """Indices of the devices open in this process now (dropped ones not yet collected
    included; see release_dropped)."""
    with _open_lock:
        return set(_open)


def release_dropped(generation: int = 2) -> None:
    """Free the indices of devices dropped without close() that the garbage collector has
    not reached yet. A device and its queues and buffers point at each other, so a dropped
    one waits for the cycle collector; opening a device that finds none free runs it at
    once instead of failing. `generation` 1 collects only the young objects, which is
    where a device dropped a moment ago usually is, at a small part of a full
    collection's cost in a large heap (0.3 s for a notebook's million objects). Never
    under `_open_lock`: the finalizers it runs take it."""
    if _open:
        gc.collect(generation)


def release_dropped_until(enough: Callable[[], bool]) -> None:
    """release_dropped, the young generations first and the whole heap only if `enough()`
    is not true by then."""
    for generation in (1, 2):
        if enough():
            return
        release_dropped(generation)


def list_devices() -> list[boards.DeviceInfo]:
    """The emulated boards, like `gpfn3-smi list`."""
    return boards.list_devices()


def _forget_parent_devices() -> None:
    """In a forked child: the parent's open devices are copies whose queue workers do not
    exist here, so commands sent to them would wait forever. They are closed, with an error
    that says why, and their indices may be opened again."""
    global _open_lock
    _open_lock = threading.Lock()
    parent = os.getppid()
    for dev in list(_open.values()):
        dev._closed = True
        dev._forked_from = parent
        for q in dev._queues.values():
            q._forget_worker()
    _open.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parent_devices)


@api("open_device")
def open_device(which: int | str = "auto") -> Device:
    """Open device `which` (an index), or with "auto" the lowest-numbered one not open."""
    return open_device_with_fill(which, None)


def open_device_with_fill(
    which: int | str, fill: Fill | None, reserved: frozenset[int] = frozenset()
) -> Device:
    """open_device, with unwritten memory reading as `fill` instead of the saved state's
    (replay's zeros: it then never reads the device state, which may be damaged). "auto"
    passes over the `reserved` indices too (those a replay places other devices on)."""
    which = _as_index(which)
    for generation in (1, 2):
        try:
            return _open_now(which, fill, reserved)
        except DeviceBusyError:
            release_dropped(generation)  # a busy index may be held only by a dropped device
    return _open_now(which, fill, reserved)


def _open_now(which: int | str, fill: Fill | None, reserved: frozenset[int]) -> Device:
    with _open_lock:
        if which == "auto":
            free = [i for i in range(boards.device_count()) if i not in _open and i not in reserved]
            if not free:
                raise DeviceBusyError(
                    f"all {boards.device_count()} emulated devices are open in this process; "
                    f"close one or set {boards.ENV_DEVICE_COUNT}"
                )
            index = free[0]
        else:
            index = boards.check_index(which)
            if index in _open:
                raise DeviceBusyError(
                    f"device {index} ({boards.device_name(index)}) is already open in this "
                    "process; close it first or open 'auto'"
                )
        dev = Device(index, fill=fill)
        _open[index] = dev
        return dev
