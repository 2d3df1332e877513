"""Queue commands. Each is validated on the host thread when enqueued and run by the queue (its
worker, or a host thread waiting for it); afterwards it is the record of what ran (kind,
modelled device time and energy, host wall time), which the queue keeps as its per-command
history. A profiling queue also stamps when each command was enqueued and when its kernels
ran (replay's `--profile`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..device.cost import Modelled

if TYPE_CHECKING:
    from ..device.emulator import EmulatedDevice
    from .buffer import Buffer
    from .event import Event
    from .program import Plan, Program, Step

PENDING, DONE, FAILED, SKIPPED = "pending", "done", "failed", "skipped"


class KernelWatch(Protocol):
    """What watches each kernel a command runs (capture's fingerprints, replay's --locate):
    `before` runs just before the kernel, `after` just after it with its outputs as
    computed (`step.outs` hold them as stored), `done` once the command has run its last
    kernel or stopped on an error (a watch that works on beside the kernels finishes
    there, before anything else may write what it reads). All run on the thread running
    the queue."""

    def before(self, step: Step) -> None:
        """Nothing, for watches that look only at what a kernel computed."""

    def after(self, step: Step, results: Sequence[np.ndarray]) -> None: ...

    def done(self) -> None:
        """Nothing, for watches that do all their work in `before` and `after` (a watch
        subclassing KernelWatch inherits this)."""


class Command:
    """Base of queue commands; `run` does the device work and returns its modelled cost.
    `watch` (a KernelWatch, or None) is told of every kernel the command runs. `origin`:
    what its enqueuer calls it, if anything (a replay: the binary's command index), which
    the command's error carries."""

    __slots__ = (
        "enqueued_s",
        "index",
        "modelled",
        "origin",
        "start_s",
        "status",
        "wall_s",
        "watch",
    )
    kind = "command"

    def __init__(self) -> None:
        self.index = -1
        self.modelled: Modelled | None = None
        self.start_s = self.wall_s = 0.0  # perf_counter() when it began; seconds it took
        self.enqueued_s: float | None = None  # perf_counter() at enqueue, when profiling
        self.status = PENDING
        self.watch: KernelWatch | None = None
        self.origin: int | None = None

    def profile(self) -> None:
        """Keep the timestamps a profile needs (set by a profiling queue at enqueue)."""
        self.enqueued_s = time.perf_counter()

    @property
    def label(self) -> str:
        return self.kind

    def run(self, backend: EmulatedDevice) -> Modelled:
        raise NotImplementedError

    def skipped(self, error: Exception) -> None:
        """Called instead of running when the queue skips this command behind `error`."""

    def retire(self) -> None:
        """Drop what only running needed, as the command joins the queue's history: a
        record there keeps what profiles read (label, status, times, modelled cost), not
        the data of a write or read (a compile's weights, held long after the upload)."""

    def execute(self, backend: EmulatedDevice) -> None:
        self.start_s = start = time.perf_counter()
        try:
            self.modelled = self.run(backend)
            self.status = DONE
        finally:
            self.wall_s = time.perf_counter() - start

    def record(self) -> dict:
        """JSON-ready record of this command for profiles."""
        m = self.modelled
        return {
            "index": self.index,
            "kind": self.kind,
            "label": self.label,
            "status": self.status,
            "device_time_s": m.time_s if m else 0.0,
            "energy_j": m.energy_j if m else 0.0,
            "flops": m.flops if m else 0.0,
            "bound": m.bound if m else None,
            "wall_s": self.wall_s,
        }


class WriteBuffer(Command):
    __slots__ = ("buffer", "data", "priced", "stored")
    kind = "write_buffer"

    def __init__(
        self,
        buffer: Buffer,
        data: np.ndarray,
        stored: bool = False,
        priced: Modelled | None = None,
    ) -> None:
        super().__init__()
        self.buffer = buffer
        self.data = data
        self.stored = stored  # data is already in the device's stored form (replay)
        self.priced = priced  # what it costs when it is not a host transfer (see queue.py)

    @property
    def label(self) -> str:
        return f"write_buffer '{self.buffer.name}'"

    def retire(self) -> None:
        self.data = None

    def run(self, backend: EmulatedDevice) -> Modelled:
        data = self.data if self.stored else self.buffer.dtype.to_storage(self.data)
        np.copyto(self.buffer._storage(), data)
        self.buffer._unfilled = False  # written whole
        if self.priced is not None:
            return self.priced
        return backend.transfer_cost(self.buffer.nbytes)


class ReadBuffer(Command):
    """A read of a buffer to the host. A golden check's read (`check`) is the runner's look
    at device memory to verify what the workload computed, not a transfer the workload
    makes: it takes no modelled time or energy, so that which values a binary checks (a
    compiled binary checks the temporary its last kernel read, whose size depends on what
    the preset fused) never changes what the workload is modelled to cost."""

    __slots__ = ("buffer", "check", "keep", "out")
    kind = "read_buffer"

    def __init__(
        self,
        buffer: Buffer,
        out: np.ndarray,
        keep: np.ndarray | None = None,
        check: bool = False,
    ) -> None:
        super().__init__()
        self.buffer = buffer
        self.out = out
        self.check = check
        # `keep` (a capture's golden: the caller owns `out` and may change it as soon as the
        # read has run) gets a copy of what was read as it runs. A read that fails makes it
        # read-only: that is how its holder, which keeps the array and not this command,
        # tells a read that ran from one that did not (see capture._kept).
        self.keep = keep

    @property
    def label(self) -> str:
        return f"read_buffer '{self.buffer.name}'"

    def retire(self) -> None:
        self.out = self.keep = None

    def run(self, backend: EmulatedDevice) -> Modelled:
        keep = self.keep
        try:
            self.buffer._fill_in()
            self.buffer.dtype.from_storage(self.buffer._storage(), out=self.out)
            if keep is not None:
                keep[...] = self.out
        except BaseException:
            if keep is not None:
                keep.flags.writeable = False
            raise
        return _NOTHING if self.check else backend.transfer_cost(self.buffer.nbytes)


class RunProgram(Command):
    __slots__ = ("bindings", "kernel_spans", "plan", "program")
    kind = "program"

    def __init__(self, program: Program, plan: Plan, bindings: Mapping[str, Buffer]) -> None:
        super().__init__()
        self.program = program
        self.plan = plan
        self.bindings = bindings
        # (start, end) perf_counter() of each kernel that ran, when profiling.
        self.kernel_spans: list[tuple[float, float]] | None = None

    def profile(self) -> None:
        super().profile()
        self.kernel_spans = []

    @property
    def label(self) -> str:
        return f"program '{self.program.name}'"

    def run(self, backend: EmulatedDevice) -> Modelled:
        for buf in self.plan.read_first:
            if buf._unfilled:
                buf._fill_in()
        # The rest are written whole by a kernel before any kernel reads them.
        fresh = [buf for buf in self.plan.buffers if buf._unfilled]
        for buf in fresh:
            buf._unfilled = False
        spans, clock = self.kernel_spans, time.perf_counter
        watch = self.watch
        for i, step in enumerate(self.plan.steps):
            start = clock() if spans is not None else 0.0
            try:
                if watch is None:
                    step.bound.run()
                else:
                    watch.before(step)
                    watch.after(step, step.bound.run())
            except BaseException as e:
                if fresh:
                    _unwritten(fresh, self.plan.steps[:i])
                if isinstance(e, Exception):
                    e.add_note(f"in kernel {i} '{step.kdef.name}'")
                if watch is not None:
                    _done_after(watch, e)
                raise
            finally:
                if spans is not None:  # the kernel that failed gets its span too
                    spans.append((start, clock()))
        if watch is not None:
            watch.done()
        return self.plan.modelled


class ReplayTrace(Command):
    __slots__ = ("trace",)
    kind = "replay_trace"

    def __init__(self, trace) -> None:
        super().__init__()
        self.trace = trace

    @property
    def label(self) -> str:
        return f"replay_trace {self.trace.id}"

    def run(self, backend: EmulatedDevice) -> Modelled:
        total_t = total_e = flops = moved = 0.0
        for cmd in self.trace.commands:
            cmd.watch = self.watch  # the trace's programs are watched as this replay's
            try:
                m = cmd.run(backend)
            finally:
                cmd.watch = None
            total_t += m.time_s
            total_e += m.energy_j
            flops += m.flops
            moved += m.dram_bytes
        return Modelled(total_t, total_e, flops, moved, "trace")


def _done_after(watch: KernelWatch, error: BaseException) -> None:
    """Finish a watch whose command stopped on `error`, which stays the one raised: what
    went wrong in the watch as well is noted on it."""
    try:
        watch.done()
    except Exception as e:
        error.add_note(f"and the kernel watch failed: {type(e).__name__}: {e}")


def _unwritten(fresh: list[Buffer], ran: Sequence[Step]) -> None:
    """After a kernel failed: the fresh buffers that none of the kernels which ran wrote
    hold what np.empty gave them, so they wait for the fill again (a read after the error
    reads the fill, as it would have without the program)."""
    written = {buf.uid for step in ran for buf in step.outs}
    for buf in fresh:
        if buf.uid not in written:
            buf._unfilled = True


class CopyBuffer(Command):
    """A device-to-device (or same-device) copy: reads `src` and writes all of `dst` when it
    runs, ordered after the earlier commands of the queue that enqueued it."""

    __slots__ = ("dst", "src")
    kind = "copy"

    def __init__(self, src: Buffer, dst: Buffer) -> None:
        super().__init__()
        self.src = src
        self.dst = dst

    @property
    def label(self) -> str:
        return (
            f"copy_buffer '{self.src.name}' (device {self.src.device.index}) -> "
            f"'{self.dst.name}' (device {self.dst.device.index})"
        )

    def run(self, backend: EmulatedDevice) -> Modelled:
        src, dst = self.src, self.dst
        src._fill_in()
        np.copyto(dst._storage(), src._storage())
        dst._unfilled = False  # written whole
        return backend.spec.copy_cost(src.device.index, dst.device.index, dst.nbytes)


class RecordEvent(Command):
    """Completes its event once every earlier command of the queue has run; skipped behind a
    failed command, it fails the event with that command's error."""

    __slots__ = ("event",)
    kind = "record_event"

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event

    @property
    def label(self) -> str:
        return f"record_event {self.event.id}"

    def run(self, backend: EmulatedDevice) -> Modelled:
        self.event._complete(None)
        return _NOTHING

    def skipped(self, error: Exception) -> None:
        self.event._complete(error)


class WaitEvent(Command):
    """Holds its queue (not the host) until the event has completed; an event that failed
    fails this command, naming it, so the failure travels to the waiting queue's finish()."""

    __slots__ = ("event",)
    kind = "wait_event"

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event

    @property
    def label(self) -> str:
        ev = self.event
        return f"wait_event {ev.id} (recorded on device {ev.device.index} queue {ev.queue_index})"

    def run(self, backend: EmulatedDevice) -> Modelled:
        self.event._await_from_queue()
        return _NOTHING


_NOTHING = Modelled(0.0, 0.0)
