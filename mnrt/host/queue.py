"""CommandQueue: in-order, asynchronous; a worker thread runs commands while the host goes on.

Argument errors raise at the enqueue call. An error while the device runs a command is kept
and raised by the next `finish()` or blocking call, naming the command; commands queued
behind a failed one are skipped until that error has been reported.

A host thread that has to wait (finish, a blocking call) runs the commands still queued
itself instead of sleeping until the worker has: waking a thread on another core costs
50-300 us on a virtual machine, more than a small program takes to run. Commands are taken
and run under one lock per queue, so they still run one at a time, in order, whichever
thread runs them.
"""

from __future__ import annotations

import functools
import itertools
import queue as _queue
import threading
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from ..device.emulator import Scratch, use_scratch
from ..device.memory import host_empty
from ..errors import (
    DeviceError,
    DeviceExecutionError,
    DeviceMismatchError,
    DTypeError,
    InvalidArgumentError,
    MnrtError,
    ShapeError,
    TraceError,
)
from . import observe, workers
from .buffer import Buffer, foreign_object_error
from .commands import (
    DONE,
    FAILED,
    PENDING,
    SKIPPED,
    Command,
    CopyBuffer,
    KernelWatch,
    ReadBuffer,
    RecordEvent,
    ReplayTrace,
    RunProgram,
    WaitEvent,
    WriteBuffer,
)
from .event import Event
from .observe import api
from .program import Program
from .trace import Trace

if TYPE_CHECKING:
    from ..device.cost import Modelled
    from .device import Device

DEFAULT_HISTORY = 4096  # per-command records kept; a long history costs GC time
_WATCHED = (RunProgram.kind, ReplayTrace.kind)  # the commands that run kernels


def _work(ref: weakref.ref[CommandQueue]) -> None:
    """A worker's loop: one command per wake-up, until the stop. It holds its queue only
    while it runs a command: a worker parked on the wake-up channel must not keep a device
    that its user dropped alive (the device's finalizer sends the stop)."""
    np.seterr(all="ignore")  # the device has no traps: inf and nan propagate
    q = ref()
    if q is None:
        return
    wake, run_lock = q._wakeups.get, q._run_lock
    use_scratch(q._scratch)
    del q
    while wake():
        q = ref()
        if q is None:
            break
        with run_lock:
            if q._pending:  # else a waiting host thread ran it already
                q._run_next()
        del q
    use_scratch(None)


def _check_blocking(blocking: object) -> None:
    if not isinstance(blocking, bool):
        raise InvalidArgumentError(f"blocking must be True or False, got {blocking!r}")


class CommandQueue:
    """One in-order command queue of a device. Get it with `Device.command_queue(i)`."""

    tag = 0  # an observer's id for this object (see host/observe.py); 0: none
    _profiling = False

    def __init__(self, device: Device, index: int, history: int = DEFAULT_HISTORY) -> None:
        self.device = device
        self.index = index
        self.history: deque[Command] = deque(maxlen=history)
        self.device_time_s = 0.0
        self.energy_j = 0.0
        self.commands_done = 0
        # Commands not yet taken, and one wake-up for the worker per command put (False:
        # stop). A thread takes and runs commands only while holding _run_lock.
        self._pending: deque[Command] = deque()
        self._puts = self._taken = 0  # commands put on _pending, and taken off it, so far
        self._wakeups: _queue.SimpleQueue[bool] = _queue.SimpleQueue()
        self._run_lock = threading.Lock()
        self._scratch = Scratch()
        self._started = False  # whether a worker thread serves this queue (see workers.py)
        self._error: DeviceExecutionError | None = None
        self._capture: Trace | None = None
        self._seq = itertools.count()
        self._lock = threading.Lock()  # orders puts against _stop (see _put)
        self._stopped = False
        self.skipped = 0  # commands skipped behind a failed one (capture checks it)
        self._watch: Callable[[Command, bool], KernelWatch | None] | None = None
        self._last: Command | None = None  # the command submitted last (replay's timeline)
        # The worker's loop (see _work), holding this queue weakly.
        self._work: Callable[[], None] = functools.partial(_work, weakref.ref(self))

    # --- public API ---------------------------------------------------------------
    def enqueue_write_buffer(
        self, buffer: Buffer, data: np.ndarray, blocking: bool = False
    ) -> None:
        """Copy host data into a buffer. Without blocking, `data` must stay unchanged until
        the write has run (finish())."""
        self._check_host_transfer("enqueue_write_buffer")
        self._check_buffer(buffer)
        if not isinstance(data, np.ndarray):
            raise InvalidArgumentError(
                f"enqueue_write_buffer to '{buffer.name}' takes a numpy array, "
                f"got {type(data).__name__}"
            )
        if data.shape != buffer.shape:
            raise ShapeError(
                f"enqueue_write_buffer: array of shape {data.shape} does not match buffer "
                f"'{buffer.name}' of shape {buffer.shape}; reshape the array first"
            )
        if not buffer.dtype.accepts(data):
            want = (
                str(buffer.dtype.host)
                if buffer.dtype.host is not None
                else "float16, float32 or float64"
            )
            raise DTypeError(
                f"enqueue_write_buffer: array of dtype {data.dtype} does not match buffer "
                f"'{buffer.name}' ({buffer.dtype.name}, takes {want}); cast it with .astype()"
            )
        hot = observe.hot
        log = cells = None
        if hot is not None and not observe.nested_depth.n:
            # See host/observe.py: not an `api` wrapper. The observer's cells are logged as
            # the command is put on the queue (see _put).
            log, cells = hot.log_cells, hot.write(self, buffer, data, blocking)
        self._submit(WriteBuffer(buffer, data), blocking, log, cells)

    def enqueue_read_buffer(self, buffer: Buffer, blocking: bool = True) -> np.ndarray:
        """Copy a buffer to a new host array. Without blocking, the array is filled by the
        time finish() returns."""
        return self._enqueue_read(buffer, blocking)

    def _enqueue_read(self, buffer: Buffer, blocking: bool, check: bool = False) -> np.ndarray:
        """`enqueue_read_buffer`; with `check`, the read of a golden check (see ReadBuffer)."""
        self._check_host_transfer("enqueue_read_buffer")
        self._check_buffer(buffer)
        out = host_empty(buffer.shape, buffer.dtype.read_dtype, f"reading buffer '{buffer.name}'")
        hot = observe.hot
        if hot is not None and observe.nested_depth.n:
            hot = None
        # An observer that records goldens gets a copy made when the read runs: the
        # caller may change the returned array as soon as the read has run.
        keep = (
            host_empty(out.shape, out.dtype, f"the golden of buffer '{buffer.name}'")
            if hot is not None and hot.goldens
            else None
        )
        cmd = ReadBuffer(buffer, out, keep, check)
        if hot is None:
            self._submit(cmd, blocking)
        else:
            # See host/observe.py: not an `api` wrapper. The observer's cells are logged as
            # the command is put on the queue (see _put).
            self._submit(cmd, blocking, hot.log_cells, hot.read(self, buffer, cmd, blocking))
        return out

    def enqueue_program(
        self, program: Program, bindings: Mapping[str, Buffer], blocking: bool = False
    ) -> None:
        """Run a program with every slot bound to a buffer of this device."""
        self.device._check_open()
        if not isinstance(program, Program):
            raise InvalidArgumentError(
                f"enqueue_program takes a Program, got {type(program).__name__}"
            )
        if program.device is not self.device:
            raise foreign_object_error(
                f"program '{program.name}'",
                program.device,
                self.device,
                "was created on",
                "create it on the device that runs it",
            )
        cmd = RunProgram(program, program.plan(bindings), bindings)
        _check_blocking(blocking)
        if self._capture is not None and blocking:
            raise TraceError(
                "enqueue_program(blocking=True) is not allowed while capturing a trace"
            )
        hot = observe.hot
        log = cells = None
        if hot is not None and not observe.nested_depth.n:
            # See host/observe.py: not an `api` wrapper. A binding the observer has seen on
            # this queue carries its log cells; they are logged as the command is put on
            # the queue (see _put).
            log, noted = hot.log_cells, cmd.plan.tag
            if noted is not None and noted[0] is hot and noted[1] is self and not blocking:
                cells = noted[2]
            else:
                cells = hot.program(self, cmd, blocking)
        if self._capture is not None:
            with self._lock:
                if cells is not None:
                    log(cells)
                self._capture.commands.append(cmd)
            return
        self._submit(cmd, blocking, log, cells)

    def enqueue_copy_buffer(self, src: Buffer, dst: Buffer, blocking: bool = False) -> None:
        """Copy all of `src` into `dst` (same shape and dtype), between two devices or within
        one. This queue must belong to src's or dst's device; the copy runs after this
        queue's earlier commands. Another device's queues see it complete through an event
        (record_event here, wait_event there)."""
        self._check_copy(src, dst)
        _check_blocking(blocking)
        hot = observe.hot
        log = cells = None
        if hot is not None and not observe.nested_depth.n:  # see host/observe.py
            log, cells = hot.log_cells, hot.copy(self, src, dst, blocking)
        self._submit(CopyBuffer(src, dst), blocking, log, cells)

    def record_event(self) -> Event:
        """An Event that completes once every command enqueued on this queue so far has run."""
        self._check_queue_command("record_event")
        event = Event(self)
        event._record = RecordEvent(event)
        hot = observe.hot
        log = cells = None
        if hot is not None and not observe.nested_depth.n:  # see host/observe.py
            log, cells = hot.log_cells, hot.record_event(self, event)
        self._submit(event._record, False, log, cells)
        return event

    def wait_event(self, event: Event) -> None:
        """Run nothing enqueued on this queue after this call until `event` has completed
        (the host does not wait). An event that fails fails this queue's next finish()."""
        self._check_wait(event)
        hot = observe.hot
        log = cells = None
        if hot is not None and not observe.nested_depth.n:  # see host/observe.py
            log, cells = hot.log_cells, hot.wait_event(self, event)
        self._submit(WaitEvent(event), False, log, cells)

    def _check_queue_command(self, what: str) -> None:
        self.device._check_open()
        if self._capture is not None:
            raise TraceError(
                f"{what} is not allowed inside a device trace (queue {self.index} is capturing "
                f"trace {self._capture.id}); only programs are recorded into a trace"
            )

    def _check_copy(self, src: Buffer, dst: Buffer) -> None:
        """Every argument error of a copy, raised at the call (capture checks first too)."""
        self._check_queue_command("enqueue_copy_buffer")
        for role, buf in (("src", src), ("dst", dst)):
            if not isinstance(buf, Buffer):
                raise InvalidArgumentError(
                    f"enqueue_copy_buffer: {role} must be a Buffer, got {type(buf).__name__}"
                )
        if self.device is not src.device and self.device is not dst.device:
            raise DeviceMismatchError(
                f"enqueue_copy_buffer on device {self.device.index} queue {self.index}: src "
                f"buffer '{src.name}' is on device {src.device.index} and dst buffer "
                f"'{dst.name}' on device {dst.device.index}; enqueue the copy on a queue of "
                "one of those two devices"
            )
        for role, buf in (("src ", src), ("dst ", dst)):
            buf._check_device(buf.device, role)  # freed, or its device closed
        if src.shape != dst.shape:
            raise ShapeError(
                f"enqueue_copy_buffer: src buffer '{src.name}' has shape {src.shape} but dst "
                f"buffer '{dst.name}' has shape {dst.shape}; a copy needs equal shapes"
            )
        if src.dtype != dst.dtype:
            raise DTypeError(
                f"enqueue_copy_buffer: src buffer '{src.name}' is {src.dtype.name} but dst "
                f"buffer '{dst.name}' is {dst.dtype.name}; a copy needs equal dtypes (convert "
                "with a program's cast kernel)"
            )

    def _check_wait(self, event: Event) -> None:
        self._check_queue_command("wait_event")
        if not isinstance(event, Event):
            raise InvalidArgumentError(
                f"wait_event takes an Event (from record_event()), got {type(event).__name__}"
            )
        event._check_waitable(f"wait_event on device {self.device.index} queue {self.index}")

    @api("finish", leaf=True)
    def finish(self) -> None:
        """Wait until every enqueued command has run; raise the first device error, if any."""
        self.device._check_open()
        if self._capture is not None:
            raise TraceError(
                f"finish() while queue {self.index} is capturing trace {self._capture.id}; "
                "call end_trace_capture first"
            )
        self._drain()
        self._raise_pending_error()

    @api("begin_trace_capture")
    def begin_trace_capture(self) -> int:
        """Start recording enqueue_program calls into a device trace instead of running them."""
        self.device._check_open()
        if self._capture is not None:
            raise TraceError(f"queue {self.index} is already capturing trace {self._capture.id}")
        self._capture = self.device._new_trace(self.index)
        return self._capture.id

    @api("end_trace_capture")
    def end_trace_capture(self, trace_id: int) -> None:
        self.device._check_open()
        if self._capture is None or self._capture.id != trace_id:
            active = f"trace {self._capture.id}" if self._capture else "no trace"
            raise TraceError(
                f"end_trace_capture({trace_id!r}): queue {self.index} is capturing {active}"
            )
        self._capture.complete = True
        self._capture = None

    @api("replay_trace")
    def replay_trace(self, trace_id: int, blocking: bool = False) -> None:
        """Run the commands of a captured trace, in order, as one command of this queue."""
        self.device._check_open()
        if self._capture is not None:
            raise TraceError("replay_trace is not allowed while capturing a trace")
        trace = self.device._get_trace(trace_id)
        if trace.queue_index != self.index:
            raise TraceError(
                f"trace {trace_id} was captured on queue {trace.queue_index}; "
                f"replay it there, not on queue {self.index}"
            )
        for cmd in trace.commands:
            for step in cmd.plan.steps:
                for buf in step.ins + step.outs:
                    buf._storage()
        record, observe.pending.record = observe.pending.record, None
        self._submit(ReplayTrace(trace), blocking, *(record or ()))

    def stats(self) -> dict:
        """Totals for this queue: commands run, modelled device time and energy."""
        return {
            "queue": self.index,
            "commands": self.commands_done,
            "device_time_s": self.device_time_s,
            "energy_j": self.energy_j,
        }

    def watch_kernels(self, watch: Callable[[Command, bool], KernelWatch | None] | None) -> None:
        """For tools (capture's fingerprints, replay's --locate): from now on, every command
        put on this queue that runs kernels (a program, a trace replay) gets
        `watch(command, logged)` as its KernelWatch (`logged`: an observer logged the call
        that put it), given in the order the commands are put on, which is the order they
        run in. None stops watching."""
        if watch is not None and not callable(watch):
            raise InvalidArgumentError(f"watch_kernels takes a function or None, not {watch!r}")
        with self._lock:
            self._watch = watch

    # --- internals ----------------------------------------------------------------
    def _enqueue_write_stored(
        self,
        buffer: Buffer,
        bits: np.ndarray,
        blocking: bool = False,
        priced: Modelled | None = None,
    ) -> None:
        """See internal.write_stored."""
        self._check_host_transfer("write")
        self._check_buffer(buffer)
        command = WriteBuffer(buffer, bits.reshape(buffer.shape), stored=True, priced=priced)
        self._submit(command, blocking)

    def _start_profiling(self) -> None:
        """Keep every command from now on (not just the last `history`), with when it was
        enqueued and when each of a program's kernels ran: what a profile is drawn from."""
        self._drain()
        self._profiling = True
        self.history = deque(self.history)

    def _check_host_transfer(self, what: str) -> None:
        self.device._check_open()
        if self._capture is not None:
            raise TraceError(
                f"{what} is not allowed inside a device trace (queue {self.index} is capturing "
                f"trace {self._capture.id}); do transfers before begin_trace_capture"
            )

    def _check_buffer(self, buffer: Buffer) -> None:
        if not isinstance(buffer, Buffer):
            raise InvalidArgumentError(f"expected a Buffer, got {type(buffer).__name__}")
        buffer._check_device(self.device, "")

    def _submit(
        self,
        cmd: Command,
        blocking: bool,
        log: Callable[[tuple], object] | None = None,
        cells: tuple | None = None,
    ) -> None:
        _check_blocking(blocking)
        if self._profiling:
            cmd.profile()
        cmd.index = next(self._seq)
        self._last = cmd
        if not self._put(cmd, log, cells):
            # The device was closed (by another thread) after this call checked it.
            raise self.device._closed_error()
        if blocking:
            self._run_pending()
            self._raise_pending_error()

    def _put(
        self,
        cmd: Command,
        log: Callable[[tuple], object] | None = None,
        cells: tuple | None = None,
    ) -> bool:
        """Hand a command to the worker (started on first use); False once the queue is
        stopped. Under the lock, so that no command lands behind the stop sentinel, where
        no worker would run it and a blocking call would wait for it forever; and so that
        an observer's log of the call (`log(cells)`) is made in the same order as the
        commands of every thread are put, which is the order they run in."""
        with self._lock:
            if self._stopped:
                return False
            if not self._started:  # first, so that a failed start logs and queues nothing
                try:
                    workers.run(self._work, self._wakeups)
                except RuntimeError as e:  # threading's "can't start new thread"
                    raise DeviceError(
                        f"device {self.device.index} queue {self.index}: cannot start its "
                        f"worker thread ({e}); the process is out of threads: close devices "
                        "or queues it no longer uses"
                    ) from None
                self._started = True
            if cells is not None:
                log(cells)
            if self._watch is not None and cmd.kind in _WATCHED:
                cmd.watch = self._watch(cmd, cells is not None)
            # Counted before the append: a Ctrl-C raised as it returns must not leave a
            # command queued uncounted, which a waiting thread would return before running.
            self._puts += 1
            self._pending.append(cmd)
            self._wakeups.put(True)
            return True

    def _run_pending(self) -> None:
        """Run every command queued so far on this thread (after the one the worker may be
        running): what a thread that must wait for them does instead of sleeping. Not those
        other threads queue meanwhile: a thread that kept enqueueing would keep it here."""
        upto = self._puts
        with self._run_lock, np.errstate(all="ignore"):
            before = use_scratch(self._scratch)
            try:
                pending = self._pending
                while self._taken < upto and pending:
                    self._run_next()
            finally:
                use_scratch(before)

    def _run_until(self, cmd: Command) -> None:
        """Run this queue's commands on this thread until `cmd` (put on it already) has run:
        what a host thread waiting for an event does instead of sleeping."""
        with self._run_lock:
            self._drain_until(cmd)

    def _try_run_until(self, cmd: Command) -> bool:
        """`_run_until` if no other thread runs this queue now, else nothing; never blocks on
        the queue's lock (a queue command waiting for an event calls it while it holds its
        own queue's). Returns whether `cmd` has run."""
        if not self._run_lock.acquire(blocking=False):
            return False
        try:
            self._drain_until(cmd)
        finally:
            self._run_lock.release()
        return cmd.status != PENDING

    def _drain_until(self, cmd: Command) -> None:
        """The commands before and including `cmd`, run on this thread (under _run_lock)."""
        with np.errstate(all="ignore"):
            before = use_scratch(self._scratch)
            try:
                pending = self._pending
                while cmd.status == PENDING and pending:
                    self._run_next()
            finally:
                use_scratch(before)

    def _run_next(self) -> None:
        """Run the first pending command, then take it off (under _run_lock). Python raises
        a Ctrl-C on a host thread between any two steps: one raised after the run leaves
        the command first, run or failed, for the next thread to take off without running
        it again, so that none is lost or run twice."""
        pending = self._pending
        cmd = pending[0]
        if cmd.status == PENDING:
            self._run(cmd)
        pending.popleft()
        # Counted after: a Ctrl-C in between lets a later wait run one command more than
        # it must, never one fewer.
        self._taken += 1

    def _run(self, cmd: Command) -> None:
        """Run one command, or skip it behind an error not yet reported (under _run_lock)."""
        if self._error is None:
            try:
                cmd.execute(self.device._backend)
            except Exception as e:
                cmd.status = FAILED
                self._error = self._wrap_error(cmd, e)
            except BaseException as e:  # Ctrl-C while the host thread ran it
                cmd.status = FAILED
                self._error = self._wrap_error(cmd, e)
                cmd.retire()
                self.history.append(cmd)
                raise
            if cmd.status == DONE:
                self.device_time_s += cmd.modelled.time_s
                self.energy_j += cmd.modelled.energy_j
                self.commands_done += 1
        else:
            cmd.status = SKIPPED
            self.skipped += 1
            cmd.skipped(self._error)
        cmd.retire()
        self.history.append(cmd)

    def _wrap_error(self, cmd: Command, e: Exception) -> DeviceExecutionError:
        notes = "".join(f" ({n})" for n in getattr(e, "__notes__", ()))
        detail = str(e) if isinstance(e, MnrtError) else f"{type(e).__name__}: {e}"
        site = f"device {self.device.index} queue {self.index} command #{cmd.index} ({cmd.label})"
        err = DeviceExecutionError(f"{site}{notes} failed: {detail}")
        err.__cause__ = e
        err.site, err.origin = site, cmd.origin  # for its enqueuer to say where it came from
        return err

    def _drain(self) -> None:
        """Wait until everything enqueued so far has run; raises nothing."""
        if self._started:
            self._run_pending()

    def _raise_pending_error(self) -> None:
        err, self._error = self._error, None
        if err is not None:
            raise err

    def _reset(self) -> None:
        self._drain()
        self._error = None
        self._capture = None
        self.history.clear()
        self.device_time_s = self.energy_j = 0.0
        self.commands_done = 0

    def _stop(self) -> None:
        """Run what was enqueued, then let the worker go; later commands are refused."""
        with self._lock:
            self._stopped = True
        if self._started:
            self._run_pending()
            workers.stop(self._wakeups)  # behind every command's wake-up

    def _forget_worker(self) -> None:
        """In a forked child: the worker (and whoever held the lock) stayed in the parent."""
        self._lock = threading.Lock()
        self._run_lock = threading.Lock()
        self._pending.clear()
        self._stopped = True
