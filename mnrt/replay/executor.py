"""Executing a validated plan through the host API, one handler per command type.

Objects live in one table per kind, keyed by the binary's global ids; `lookup` is the only
way in, so a missing object is always reported the same way. Reads and golden checks are
compared once every queue has finished. A profiling executor also keeps when each command
ran and how much device memory was in use after each allocation (see profile.py).

Logical devices folded onto one runner device (a placement's `folded`) share it, each of
their queues on a queue of its own. With a transport of several ranks, a rank carries out
only the commands of the devices it owns (see ranks.py): the far end of a copy is a send or
a receive tagged with the copy's id, and an event that crosses ranks is a signal.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..device.memory import Fill
from ..device.parallel import sharing_cores
from ..device.tolerance import default_tolerance
from ..errors import CaptureError, DeviceExecutionError, InvalidBinaryError
from ..format.fb.CommandUnion import CommandUnion as U
from ..format.io import Namer
from ..host import Device, internal, observe
from ..host.commands import Command, KernelWatch
from ..host.device import MAX_QUEUES, open_device_with_fill
from ..host.golden import Check, compare
from .placement import Placement, logical_devices
from .plan import BUFFER, DEVICE, EVENT, PROGRAM, QUEUE, TRACE, Plan
from .ranks import Ranks
from .transport.base import Transport
from .transport.local import LocalTransport

if TYPE_CHECKING:
    from ..device.cost import Modelled
    from ..host.queue import CommandQueue

# Command type -> the host API name it replays, for timings and profiles.
COMMAND_NAMES = {
    getattr(U, name): "_".join(re.findall("[A-Z][a-z]*", name)).lower()
    for name in vars(U)
    if not name.startswith("_") and name != "NONE" and isinstance(getattr(U, name), int)
}


# Commands that put a command on a queue (and so are a span of the modelled timeline).
QUEUE_COMMANDS = frozenset({
    U.WriteBuffer, U.ReadBuffer, U.EnqueueProgram, U.ReplayTrace, U.GoldenCheck,
    U.CopyBuffer, U.RecordEvent, U.WaitEvent,
})  # fmt: skip
# Of those, the ones a rank may carry out itself, without its queue (the far end of a copy,
# a wait for another rank's event): still a span of that queue.
HOST_SIDE = frozenset({U.CopyBuffer, U.WaitEvent})


class Executor:
    """Runs one pass of a plan on opened devices and collects reads for checking."""

    def __init__(
        self,
        plan: Plan,
        device_map: Placement,
        verify: bool = True,
        rtol: float | None = None,
        atol: float | None = None,
        profiling: bool = False,
        inputs: dict[int, np.ndarray] | None = None,
        expected: dict[int, np.ndarray] | None = None,
        transport: Transport | None = None,
        timeline: bool = False,
        watch: Callable[[int], KernelWatch | None] | None = None,
    ) -> None:
        """`inputs` (stored data by buffer id) replace every recorded write of those
        buffers, and the recorded goldens then no longer apply: only `expected` (values
        by buffer id) is compared, with each output's last read value. With a `transport`
        of several ranks, only the devices this rank owns are opened (see ranks.py). With
        `timeline`, each queue command is kept for the modelled timeline (`submitted`).
        `watch(command index)` gives the KernelWatch of each command that runs kernels
        (see locate.py)."""
        if observe.current() is not None:
            # Its host calls would land in the capture, the data it writes (unobserved,
            # from the binary's blobs) would not: a binary that cannot reproduce itself.
            raise CaptureError(
                "a binary cannot be replayed while a capture is running (the capture would "
                "record the replay's device work without the data it writes); replay before "
                "begin_capture() or after end_capture()"
            )
        self.plan = plan
        self.watch = watch
        self.ranks = Ranks(plan, transport or LocalTransport())
        self.transport = self.ranks.transport
        # (command index, queue id, the host command it put on the queue or None) per
        # queue command of this rank's devices, when keeping the timeline.
        self.submitted: list[tuple[int, int, Command | None]] | None = [] if timeline else None
        self.users: dict[int, set[int]] = {}  # runner index -> captured indices on it
        self.slots: dict[int, dict[tuple[int, int], int]] = {}  # runner index -> queue slots
        self.blobs = plan.binary.blobs
        self.device_map = device_map
        self.placed: dict[int, int] = {}  # captured device index -> runner index, once open
        self.rtol, self.atol = rtol, atol
        self.tables: dict[str, dict[int, Any]] = {
            k: {} for k in (DEVICE, QUEUE, BUFFER, PROGRAM, TRACE, EVENT)
        }
        self.inputs = inputs or {}
        self.expected = expected or {}
        # Recorded goldens apply to the recorded inputs only.
        self.goldens = verify and not self.inputs
        # (name, buffer id, data read, golden blob, rtol, atol, command index) per golden
        self.pending: list[tuple[str, int, np.ndarray, int, float, float, int]] = []
        self.last_read: dict[int, np.ndarray] = {}  # buffer id -> its last read's array
        self.recorded_tol: dict[int, tuple[float, float]] = {}  # of its last golden
        self.read_at: dict[int, int] = {}  # buffer id -> the command index of its last read
        self.names = {e.buffer_id: e.name for e in plan.binary.outputs}
        self.check_name = Namer()  # check names, unique in the replay
        self.signalled: set[int] = set()  # events of other ranks this rank has waited for
        self.index = 0
        self.host_s: dict[str, tuple[float, int]] = {}  # by command type: (seconds, count)
        # The modelled cost of the copies to other ranks that this rank's queues enqueued
        # (a queue at a copy's receiving end charges its write instead): a copy is charged
        # once, to the queue that enqueued it, as in process.
        self.remote_copies_s = self.remote_copies_j = 0.0
        # When profiling: (command index, type, start, end) per command, and
        # (time, device id, bytes in use) after each allocation or free.
        self.profiling = profiling
        self.spans: list[tuple[int, int, float, float]] = []
        self.memory: list[tuple[float, int, int]] = []
        self.handlers: dict[int, Callable[[Any], None]] = {
            U.OpenDevice: self.open_device,
            U.OpenQueue: self.open_queue,
            U.CreateBuffer: self.create_buffer,
            U.DeallocateBuffer: self.deallocate,
            U.WriteBuffer: self.write,
            U.ReadBuffer: self.read,
            U.CreateProgram: self.create_program,
            U.EnqueueProgram: self.enqueue_program,
            U.Finish: lambda c: self.lookup(QUEUE, c.queueId).finish(),
            U.BeginTraceCapture: self.begin_trace,
            U.EndTraceCapture: self.end_trace,
            U.ReplayTrace: self.replay_trace,
            U.ReleaseTrace: self.release_trace,
            U.GoldenCheck: self.golden,
            U.CopyBuffer: self.copy,
            U.RecordEvent: self.record_event,
            U.WaitEvent: self.wait_event,
        }

    def lookup(self, kind: str, gid: int) -> Any:
        try:
            return self.tables[kind][gid]
        except KeyError:
            raise InvalidBinaryError(f"no {kind} with id {gid}", command=self.index) from None

    def run(self, stop: int | None = None) -> None:
        """Every command in order (those before index `stop` only, if given: a prefix, for
        a trim's state snapshot), then wait for every queue. `host_s` adds up the host's
        time per command type (a blocking call's includes its wait for the device), and the
        wait after the last command as `final_finish`.

        BLAS gets the share of the cores that the binary's devices give each (by its
        logical devices, not by the ones this rank or runner device holds): OpenBLAS rounds
        a product differently on another thread count, and every run of a binary (a
        replay on any placement, a trim's snapshot, reduce's) must give the same bits as
        the capture, which shared them so."""
        with sharing_cores(len(logical_devices(self.plan))):
            self._run(stop)

    def _run(self, stop: int | None) -> None:
        spent = dict.fromkeys(self.handlers, 0.0)
        counts = dict.fromkeys(self.handlers, 0)
        handlers, clock = self.handlers, time.perf_counter
        spans = self.spans.append if self.profiling else None
        skip = self.ranks.remote_commands()
        submitted = self.submitted
        queues = self.tables[QUEUE]
        seen: dict[int, Command | None] = {}  # queue id -> the command last noted
        before = clock()
        kind = None
        try:
            commands = self.plan.binary.commands
            for index, command in enumerate(commands if stop is None else commands[:stop]):
                self.index = index
                kind = command.cmdType
                if skip is not None and index in skip:
                    continue
                handlers[kind](command.cmd)
                if kind in QUEUE_COMMANDS:
                    qid = command.cmd.queueId
                    q = queues.get(qid)
                    last = internal.last_command(q) if q is not None else None
                    if last is not seen.get(qid):
                        seen[qid] = last
                        last.origin = index  # its error names the binary's command
                        if submitted is not None:
                            submitted.append((index, qid, last))
                    elif submitted is not None and kind in HOST_SIDE and q is not None:
                        submitted.append((index, qid, None))  # done without a queue command
                now = clock()
                spent[kind] += now - before
                counts[kind] += 1
                if spans is not None:
                    spans((index, kind, before, now))
                before = now
            kind = None
            for q in self.tables[QUEUE].values():
                if q.device.is_open:
                    q.finish()
        except BaseException as e:
            if spans is not None and kind is not None:  # the command that failed, too
                spans((self.index, kind, before, clock()))
            if isinstance(e, DeviceExecutionError):
                raise self._in_binary(e) from e.__cause__
            raise
        self.host_s = {COMMAND_NAMES[k]: (spent[k], counts[k]) for k in self.handlers if counts[k]}
        self.host_s["final_finish"] = (clock() - before, 1)

    def _in_binary(self, e: DeviceExecutionError) -> DeviceExecutionError:
        """A queue's error, saying which of the binary's commands failed (a queue numbers
        its commands its own way), as `mnrt trim --commands` and `mnrt dump` count them:
        also where it reached this one through an event another queue waited for."""
        text, cause, seen = str(e), e, set()
        while isinstance(cause, DeviceExecutionError) and id(cause) not in seen:
            seen.add(id(cause))
            origin, site = getattr(cause, "origin", None), getattr(cause, "site", None)
            if origin is not None and site:
                kind = COMMAND_NAMES[self.plan.binary.commands[origin].cmdType]
                text = text.replace(
                    site, f"command {origin} of the binary ({kind}, run as {site})", 1
                )
            cause = cause.__cause__
        if text == str(e):
            return e
        err = DeviceExecutionError(text)
        for note in getattr(e, "__notes__", ()):
            err.add_note(note)
        return err

    def close(self) -> None:
        if self.watch is not None:
            for q in self.tables[QUEUE].values():
                q.watch_kernels(None)
        for dev in self.tables[DEVICE].values():
            internal.close_quietly(dev)

    # --- handlers -------------------------------------------------------------------
    def open_device(self, c) -> None:
        index = self.placed.get(c.index)
        if index is None:
            index = self.device_map.which(c.index)
        for dev in self.tables[DEVICE].values():
            if dev.index == index and dev.is_open:
                users = self.users[index]
                if users - {c.index}:
                    # Another logical device folded onto it uses it: share it (a reopened
                    # folded device keeps the runner device open).
                    users.add(c.index)
                    self.tables[DEVICE][c.deviceId] = dev
                    self.placed[c.index] = index
                    return
                # The capture closed this device and opened it again (a device is open once
                # in a process): so does replay, raising a device error still unseen.
                dev.close()
                self.slots.pop(index, None)
        # Fresh buffers hold zeros, as the capture took them to (it records any other fill
        # as data), whatever `mnrt smi clear` left this runner's device holding.
        dev = open_device_with_fill(index, Fill(), self.device_map.reserved)
        self.tables[DEVICE][c.deviceId] = dev
        self.placed[c.index] = dev.index
        self.users[dev.index] = {c.index}

    def open_queue(self, c) -> None:
        dev: Device = self.lookup(DEVICE, c.deviceId)
        index = self._queue_slot(dev.index, self.plan.device_index[c.deviceId], c.index)
        q = self.tables[QUEUE][c.queueId] = dev.command_queue(index)
        if self.watch is not None:
            # Called as each command is put on the queue: by this thread, in its handler.
            q.watch_kernels(lambda cmd, logged: self.watch(self.index))
        if self.profiling:
            internal.start_profiling(q)

    def _queue_slot(self, runner: int, logical: int, index: int) -> int:
        """The runner device's queue for queue `index` of logical device `logical`: its own
        index when free, else the lowest free one, so logical devices folded onto one
        device keep their queues apart; with all taken, the queues share (in-order queues
        merged in issue order still honour every wait, as each names an earlier record)."""
        slots = self.slots.setdefault(runner, {})
        key = (logical, index)
        if key not in slots:
            taken = set(slots.values())
            free = [i for i in range(MAX_QUEUES) if i not in taken]
            slots[key] = index if index not in taken else (free[0] if free else index)
        return slots[key]

    def create_buffer(self, c) -> None:
        info = self.plan.buffers[c.bufferId]
        dev: Device = self.lookup(DEVICE, c.deviceId)
        self.tables[BUFFER][c.bufferId] = dev.create_buffer(info.shape, info.dtype, info.name)
        if self.profiling:
            self._note_memory(c.deviceId)

    def deallocate(self, c) -> None:
        self.lookup(BUFFER, c.bufferId).deallocate()
        if self.profiling:
            self._note_memory(self.plan.buffers[c.bufferId].device)

    def _note_memory(self, device_id: int) -> None:
        used = self.tables[DEVICE][device_id].memory_info()["used_bytes"]
        self.memory.append((time.perf_counter(), device_id, used))

    def _stored(self, blob: int, gid: int) -> np.ndarray:
        """A blob as an array of the buffer's stored dtype: zero-copy when uncompressed."""
        info = self.plan.buffers[gid]
        return np.frombuffer(self.blobs.read(blob, self.index), info.dtype.storage)

    def write(self, c) -> None:
        q = self.lookup(QUEUE, c.queueId)
        data = self.inputs.get(c.bufferId)
        if data is None:
            data = self._stored(c.data, c.bufferId)
        internal.write_stored(q, self.lookup(BUFFER, c.bufferId), data, c.blocking)

    def read(self, c) -> None:
        q = self.lookup(QUEUE, c.queueId)
        out = q.enqueue_read_buffer(self.lookup(BUFFER, c.bufferId), blocking=c.blocking)
        self._note_read(c, out, c.golden, "")

    def golden(self, c) -> None:
        q = self.lookup(QUEUE, c.queueId)
        out = internal.check_read(q, self.lookup(BUFFER, c.bufferId), blocking=False)
        self._note_read(c, out, c.golden, c.name.decode() if isinstance(c.name, bytes) else c.name)

    def _note_read(self, c, out: np.ndarray, golden: int, name: str | None) -> None:
        """Keep a read as its buffer's latest value (the output the replay returns) and,
        with a golden, queue its check under a name unique in the replay: the check's own
        name or the buffer's output name, suffixed when a buffer is checked again."""
        gid = c.bufferId
        self.last_read[gid] = out
        self.read_at[gid] = self.index
        if not golden:
            return
        self.recorded_tol[gid] = (c.rtol, c.atol)
        if self.goldens:
            base = name or self.names.get(gid) or self.plan.buffers[gid].name
            self.pending.append(
                (self.check_name(base), gid, out, golden, c.rtol, c.atol, self.index)
            )

    @property
    def outputs(self) -> dict[str, np.ndarray]:
        """Each output's last read value, by output name (valid once run() has returned)."""
        return {
            e.name: self.last_read[e.buffer_id]
            for e in self.plan.binary.outputs
            if e.buffer_id in self.last_read
        }

    def create_program(self, c) -> None:
        info = self.plan.programs[c.programId]
        dev: Device = self.lookup(DEVICE, c.deviceId)
        self.tables[PROGRAM][c.programId] = dev.create_program(info.kernels, info.name, info.views)

    def enqueue_program(self, c) -> None:
        q = self.lookup(QUEUE, c.queueId)
        prog = self.lookup(PROGRAM, c.programId)
        buffers = self.tables[BUFFER]
        bindings = {s: buffers[int(b)] for s, b in zip(prog.slots, c.bufferIds)}
        q.enqueue_program(prog, bindings, blocking=c.blocking)

    def begin_trace(self, c) -> None:
        q = self.lookup(QUEUE, c.queueId)
        self.tables[TRACE][c.traceId] = q.begin_trace_capture()

    def end_trace(self, c) -> None:
        self.lookup(QUEUE, c.queueId).end_trace_capture(self.lookup(TRACE, c.traceId))

    def replay_trace(self, c) -> None:
        q = self.lookup(QUEUE, c.queueId)
        q.replay_trace(self.lookup(TRACE, c.traceId), blocking=c.blocking)

    def release_trace(self, c) -> None:
        self.lookup(DEVICE, c.deviceId).release_trace(self.lookup(TRACE, c.traceId))

    def copy(self, c) -> None:
        ranks = self.ranks
        src_local = ranks.local_buffer(c.srcId)
        dst_local = ranks.local_buffer(c.dstId)
        if src_local and dst_local:
            q = self.lookup(QUEUE, c.queueId)
            src, dst = self.lookup(BUFFER, c.srcId), self.lookup(BUFFER, c.dstId)
            q.enqueue_copy_buffer(src, dst, blocking=c.blocking)
        elif src_local:
            self._send(c)
        elif dst_local:
            self._receive(c)

    def _send(self, c) -> None:
        """The src end of a copy to another rank: src as of this point of the command
        stream (the copying queue drained, or src's whole device when the other end's
        queue copies), sent tagged with the copy's id."""
        src = self.lookup(BUFFER, c.srcId)
        q = self.tables[QUEUE].get(c.queueId)
        if q is not None:
            q.finish()
        else:
            internal.sync(src.device)
        data = np.ascontiguousarray(src.peek())
        self.transport.send(data, self.ranks.owner_of_buffer(c.dstId), c.copyId)
        if q is not None:  # the copy is this rank's queue's: its cost is this rank's
            cost = self._copy_cost(c, q)
            self.remote_copies_s += cost.time_s
            self.remote_copies_j += cost.energy_j

    def _receive(self, c) -> None:
        """The dst end of a copy from another rank: received, then written through the
        copying queue (in its order) or, when the other end's queue copied, once every
        queue of dst's device has finished with dst's old contents."""
        dst = self.lookup(BUFFER, c.dstId)
        data = np.empty(dst.shape, dst.dtype.storage)
        self.transport.recv(data, self.ranks.owner_of_buffer(c.srcId), c.copyId)
        q = self.tables[QUEUE].get(c.queueId)
        if q is not None:  # priced as the copy it is, not as a host write
            internal.write_stored(q, dst, data, c.blocking, priced=self._copy_cost(c, q))
            return
        internal.overwrite(dst, data)

    def _copy_cost(self, c, q: CommandQueue) -> Modelled:
        """A copy between ranks priced as the in-process replay prices it: between its
        captured devices (which are the runner devices there when nothing was folded)."""
        src, dst = self.plan.buffers[c.srcId], self.plan.buffers[c.dstId]
        ends = (self.plan.device_index[src.device], self.plan.device_index[dst.device])
        return q.device.spec.copy_cost(*ends, dst.nbytes)

    def record_event(self, c) -> None:
        event = self.tables[EVENT][c.eventId] = self.lookup(QUEUE, c.queueId).record_event()
        ranks = self.ranks.waiting_ranks(c.eventId)
        if ranks:
            event.wait()
            for rank in ranks:
                self.transport.signal(rank, c.eventId)

    def wait_event(self, c) -> None:
        event = self.tables[EVENT].get(c.eventId)
        if event is not None:
            self.lookup(QUEUE, c.queueId).wait_event(event)
        elif c.eventId not in self.signalled:
            # Recorded on another rank: it signals once the event has completed there;
            # what this rank issues after the wait is issued after that.
            self.transport.wait_signal(self.ranks.recording_rank(c.eventId), c.eventId)
            self.signalled.add(c.eventId)

    # --- verdicts -------------------------------------------------------------------
    def checks(self) -> list[Check]:
        """Compare every read with its golden, then each expected output with the output's
        last read (after run(): the queues have finished). A tolerance the run gives wins;
        then the recorded one; a golden recorded without one gets the tolerance model's
        default for the computation that produced it."""
        results = []
        # Every listed output is read by some command (see io.check_lists), on the rank that
        # owns its device: each rank compares those it read.
        wanted = {gid: e for gid, e in self.expected.items() if gid in self.read_at}
        for name, gid, actual, blob, rtol, atol, index in self.pending:
            dtype = self.plan.buffers[gid].dtype
            expected = dtype.from_storage(
                np.frombuffer(self.blobs.read(blob), dtype.storage).reshape(actual.shape)
            )
            results.append(self._compare(name, gid, actual, expected, rtol, atol, index))
        nan = float("nan")
        for gid, expected in wanted.items():
            actual, name = self.last_read[gid], self.check_name(self.names[gid])
            rtol, atol = self.recorded_tol.get(gid, (nan, nan))
            index = self.read_at[gid]
            results.append(self._compare(name, gid, actual, expected, rtol, atol, index))
        return results

    def _compare(
        self,
        name: str,
        gid: int,
        actual: np.ndarray,
        expected: np.ndarray,
        rtol: float,
        atol: float,
        index: int,
    ) -> Check:
        """One check, with this run's tolerances where given, else the recorded ones, else
        (recorded as NaN) the tolerance model's for the read at command `index`."""
        dtype = self.plan.buffers[gid].dtype
        if math.isnan(rtol) or math.isnan(atol):
            error = self.plan.golden_errors.get(index, 0.0)
            default_rtol, default_atol = default_tolerance(dtype, error, expected)
            rtol = default_rtol if math.isnan(rtol) else rtol
            atol = default_atol if math.isnan(atol) else atol
        rtol = self.rtol if self.rtol is not None else rtol
        atol = self.atol if self.atol is not None else atol
        return replace(compare(name, actual, expected, dtype, rtol, atol), command=index)
