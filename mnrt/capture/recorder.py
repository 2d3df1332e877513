"""The recorder: an observer of host API calls that keeps an in-memory log of them.

Recording a call only assigns global ids and logs one row (plus a copy of written data);
the FlatBuffer is built once, at end_capture (see `build.py`). Calls that put a command on a
queue (enqueues, replay_trace) hand the queue the action that logs them, which it runs as it
puts the command on, so the log keeps each queue's commands in the order they run even when
threads share a queue. Objects that existed before capture began are recorded at their first
use as a state snapshot: their creation, and for buffers their contents at that moment, so a
capture can start in the middle of a program.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from ..device.parallel import GrowingShare
from ..errors import CaptureError
from ..host import Buffer, CommandQueue, Device, Event, Program, internal, observe
from ..host.commands import ReadBuffer, RunProgram
from .fingerprinter import Fingerprinter

# Log entry kinds; build.py turns each into one command table.
OPEN_DEVICE = "open_device"
OPEN_QUEUE = "open_queue"
CREATE_BUFFER = "create_buffer"
DEALLOCATE = "deallocate"
WRITE = "write"
READ = "read"
CREATE_PROGRAM = "create_program"
PROGRAM = "program"
FINISH = "finish"
BEGIN_TRACE = "begin_trace"
END_TRACE = "end_trace"
REPLAY_TRACE = "replay_trace"
RELEASE_TRACE = "release_trace"
GOLDEN = "golden"
COPY = "copy"
RECORD_EVENT = "record_event"
WAIT_EVENT = "wait_event"


_SLOW = object()  # a fast handler's answer: take the general path instead


_WIDTH = 8  # cells per log row: its length and up to seven fields
_PADS = tuple((None,) * (_WIDTH - 1 - n) for n in range(_WIDTH))


def _cells(row: tuple) -> tuple:
    """A row as the log's cells: its length, its fields, padding to _WIDTH."""
    return (len(row), *row, *_PADS[len(row)])


class _Log:
    """The recorded calls, kept as one flat list of fixed-width rows (the row's length,
    then its fields). Recording a call then allocates nothing the cyclic garbage collector
    tracks: a list of tuples would keep one alive per call, and a long capture would set off
    collection after collection in a program that otherwise triggers none."""

    def __init__(self) -> None:
        self.cells: list[Any] = []

    def append(self, row: tuple) -> None:
        self.cells.extend(_cells(row))

    def insert(self, index: int, row: tuple) -> None:
        at = index * _WIDTH
        self.cells[at:at] = [len(row), *row, *_PADS[len(row)]]

    def __len__(self) -> int:
        return len(self.cells) // _WIDTH

    def __iter__(self) -> Iterator[tuple]:
        cells = self.cells
        for at in range(0, len(cells), _WIDTH):
            yield tuple(cells[at + 1 : at + 1 + cells[at]])


def _arg(args: tuple, kwargs: dict, i: int, name: str, default: Any = None) -> Any:
    if len(args) > i:
        return args[i]
    return kwargs.get(name, default)


class Recorder:
    """Observer installed by begin_capture; see mnrt.host.observe."""

    def __init__(
        self,
        goldens: bool = True,
        owner: str = "",
        fingerprints: bool = False,
        contents: Mapping[int, tuple[Buffer, Callable[[], np.ndarray]]] | None = None,
    ) -> None:
        self.goldens = goldens
        self.fingerprints = fingerprints
        # Queue gid -> the fingerprinters of each command it ran that runs kernels, in the
        # order they were put on it (build.py pairs them with the log's rows of that queue).
        self.printed: dict[int, list[Fingerprinter]] = {}
        self.owner = owner  # who began it, when not the user (a compile recording a binary)
        # id(buffer) -> (buffer, what gives its contents in stored form): buffers whose
        # contents the one who began the capture vouches for (a compiled function's weights,
        # uploaded from arrays nothing changes). Their snapshot records that array, not a
        # copy of the device memory: the same bytes, without copying hundreds of megabytes.
        self._contents = dict(contents or {})
        self.log = _Log()
        # What the queue calls with the cells a hook returned, as it puts the command on
        # (see host/observe.py): one call, allocating nothing, per enqueue.
        self.log_cells = self.log.cells.extend
        self.devices: dict[int, int] = {}  # gid -> device index, in the order of first use
        # BLAS's share of the cores, by the devices used so far: what a replay of the binary
        # gives its kernels (Executor.run), so that the replay computes the same bits.
        self.cores = GrowingShare()
        self._noted: list[Any] = []  # plans given an action by `program`
        self._keep: list[Any] = []  # every object given an id (in its tag) while we record
        self._traces: dict[tuple[int, int], int] = {}  # (device gid, trace id) -> gid
        self._next = 1  # global ids come from this one counter; 0 means none
        # Log index of each device trace being captured now: snapshots taken meanwhile are
        # placed before it, since replay may not allocate or write inside a trace.
        self._open_traces: dict[int, int] = {}
        self._trace_queue: dict[int, int] = {}  # trace gid -> gid of the queue capturing it
        self._skipped: dict[int, int] = {}  # id(queue) -> its skipped count when first seen
        self._closed = False
        self._lock = threading.Lock()
        self._before: dict[str, Callable[[str, tuple, dict], None]] = {
            "deallocate": self._known_buffer_no_data,
            "finish": self._before_queue,
            "begin_trace_capture": self._before_queue,
            "end_trace_capture": self._before_queue,
            "replay_trace": self._before_replay,
            "release_trace": self._before_release,
            "reset": self._refuse,
            "clear": self._refuse,
        }
        self._after: dict[str, Callable[[tuple, dict, Any], None]] = {
            "open_device": self._after_open_device,
            "command_queue": self._after_command_queue,
            "create_buffer": self._after_create_buffer,
            "deallocate": self._after_deallocate,
            "create_program": self._after_create_program,
            "finish": self._after_finish,
            "begin_trace_capture": self._after_begin_trace,
            "end_trace_capture": self._after_end_trace,
            "release_trace": self._after_release_trace,
            "event_wait": self._after_event_wait,
            "event_query": self._after_event_wait,
        }
        # Calls that put a command on a queue: their log cells, which the queue logs as it
        # puts the command on (see host/observe.py: pending).
        self._at_put: dict[str, Callable[[tuple, dict], tuple | None]] = {
            "replay_trace": self._replay_record,
        }
        # The calls a hot loop makes, recorded without the lock while every object they
        # touch is already known; anything else takes the general path.
        self._fast: dict[str, Callable[[Callable, tuple], Any]] = {
            "finish": self._fast_finish,
        }

    # --- observer interface -------------------------------------------------------
    def call(self, name: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        if not kwargs:
            fast = self._fast.get(name)
            if fast is not None:
                result = fast(fn, args)
                if result is not _SLOW:
                    return result
        # The general path may make host calls of its own (snapshots): none of them is a
        # call of the program being captured.
        with observe.unobserved():
            before = self._before.get(name)
            if before is not None:
                with self._lock:
                    before(name, args, kwargs)
            at_put = self._at_put.get(name)
            if at_put is not None:
                with self._lock:
                    cells = at_put(args, kwargs)
                    observe.pending.record = None if cells is None else (self.log_cells, cells)
            try:
                result = fn(*args, **kwargs)
            finally:
                observe.pending.record = None  # taken by the queue, or the call failed
            after = self._after.get(name)
            if after is not None:
                with self._lock:
                    after(args, kwargs, result)
        return result

    # Fast paths: every object's id is its tag (0 while unknown, which sends the call down
    # the general path to be snapshotted first); no lock, since appending is atomic.
    def _fast_finish(self, fn: Callable, args: tuple) -> Any:
        qid = getattr(args[0], "tag", 0)
        if not qid:
            return _SLOW
        result = fn(*args)
        self.log.append((FINISH, qid))
        return result

    # --- ids and snapshots --------------------------------------------------------
    def _new_id(self, obj: Any) -> int:
        if self._closed:
            # A call another thread began before the capture ended: it is not recorded, and
            # its objects must not carry an id of this capture into the next one.
            return 0
        gid = self._next
        self._next += 1
        obj.tag = gid
        self._keep.append(obj)
        return gid

    def _emit(self, entry: tuple) -> None:
        """Log a snapshot entry, ahead of any device trace that is being captured."""
        if self._closed:
            return
        if not self._open_traces:
            self.log.append(entry)
            return
        at = min(self._open_traces.values())
        self.log.insert(at, entry)
        self._open_traces = {t: i + 1 if i >= at else i for t, i in self._open_traces.items()}

    def vouch(self, contents: Mapping[int, tuple[Buffer, Callable[[], np.ndarray]]]) -> None:
        """More buffers whose contents their owner vouches for (see __init__): those not
        seen yet are snapshotted from the arrays given when they are first seen."""
        with self._lock:
            for key, known in contents.items():
                if not known[0].tag:
                    self._contents.setdefault(key, known)

    def close(self) -> tuple[int, dict[int, int]]:
        """Stop recording: end the device traces still being captured (the binary must
        not leave one open; the live queue still records into it), clear the tags given
        out, so no id or action of this capture outlives it, and return the number of log
        rows and the devices that make up the capture. A host call another thread is still
        in may append rows after this; they are not part of it."""
        with self._lock:
            for gid in list(self._open_traces):
                self.log.append((END_TRACE, self._trace_queue[gid], gid))
            self._open_traces.clear()
            self._closed = True
            self._contents.clear()
            for obj in self._keep:
                obj.tag = 0
                if self.fingerprints and isinstance(obj, CommandQueue):
                    obj.watch_kernels(None)
            for plan in self._noted:
                plan.tag = None
            return len(self.log), dict(self.devices)

    def queues(self) -> list[CommandQueue]:
        """The queues the capture gave ids, in the order it did: those whose commands it
        recorded, which end_capture waits for."""
        return [obj for obj in self._keep if isinstance(obj, CommandQueue)]

    def skipped_commands(self) -> dict[CommandQueue, int]:
        """Captured queues that skipped commands (behind a failed one) since first seen,
        with how many: replay would run those commands, so the capture is not faithful."""
        skipped = {}
        for q in self.queues():
            n = q.skipped - self._skipped.get(id(q), q.skipped)
            if n:
                skipped[q] = n
        return skipped

    def _device(self, dev: Device) -> int:
        gid = dev.tag
        if not gid:
            gid = self._new_id(dev)
            if gid:
                self.devices[gid] = dev.index
                self._emit((OPEN_DEVICE, gid, dev.index))
                self.cores.update(len(set(self.devices.values())))
        return gid

    def _queue(self, q: CommandQueue) -> int:
        gid = q.tag
        if not gid:
            dev = self._device(q.device)
            gid = self._new_id(q)
            if gid:
                self._skipped[id(q)] = q.skipped
                if self.fingerprints:
                    q.watch_kernels(Fingerprinter.factory(self.printed.setdefault(gid, [])))
                self._emit((OPEN_QUEUE, gid, dev, q.index))
                if internal.capturing(q) is not None:
                    self._adopt_trace(q, gid, dev)
        return gid

    def _adopt_trace(self, q: CommandQueue, qid: int, dev: int) -> None:
        """A queue first seen while it captures a device trace begun before this capture:
        record the trace's beginning and the programs it holds so far, so that what the
        queue records from now on lands in the trace on replay too."""
        trace = internal.capturing(q)
        steps = [
            (self._program(cmd.program), tuple(self._buffer(b, q) for b in cmd.plan.buffers))
            for cmd in trace.commands
        ]
        self._begin_trace(dev, trace.id, qid)
        for pid, bids in steps:
            self.log.append((PROGRAM, qid, pid, bids, False))

    def _buffer(self, buf: Buffer, q: CommandQueue | None, with_data: bool = True) -> int:
        """The buffer's id; a buffer first seen now is snapshotted (created, then filled
        with its current contents through `q` or its device's queue 0)."""
        if not isinstance(buf, Buffer):
            raise CaptureError(f"expected a Buffer, got {type(buf).__name__}")
        if buf.tag:
            return buf.tag
        dev = self._device(buf.device)
        gid = self._new_id(buf)
        self._emit((CREATE_BUFFER, gid, dev, buf.shape, buf.dtype.code, buf.name))
        if with_data and buf.is_allocated:
            q = q if q is not None else buf.device.command_queue(0)
            qid = self._queue(q)
            internal.sync(buf.device)  # contents as of now, after everything enqueued before
            data = self._vouched(buf)
            if data is None:
                data = np.array(buf.peek())
            # Blocking: on replay the contents are in place before the next command is
            # issued, as they were live, whichever queue uses the buffer next.
            self._emit((WRITE, qid, gid, data, True, True))
        return gid

    def _vouched(self, buf: Buffer) -> np.ndarray | None:
        """The contents vouched for `buf` (see __init__), when they have its stored form."""
        known = self._contents.pop(id(buf), None)
        if known is None or known[0] is not buf:
            return None
        data = known[1]()
        if data.dtype != buf.dtype.storage or data.shape != buf.shape:
            return None
        return data

    def _program(self, prog: Program) -> int:
        gid = prog.tag
        if not gid:
            dev = self._device(prog.device)
            gid = self._new_id(prog)
            self._emit((CREATE_PROGRAM, gid, dev, prog))
        return gid

    # --- before: make every object the call touches known ----------------------------
    def _refuse(self, name: str, args: tuple, kwargs: dict) -> None:
        raise CaptureError(
            f"Device.{name}() cannot be captured into a light binary; "
            f"call it before begin_capture() or after end_capture()"
        )

    def _known_buffer_no_data(self, name: str, args: tuple, kwargs: dict) -> None:
        if isinstance(args[0], Buffer) and args[0].is_allocated:
            self._buffer(args[0], None, with_data=False)

    def _before_queue(self, name: str, args: tuple, kwargs: dict) -> None:
        self._queue(args[0])

    def _before_replay(self, name: str, args: tuple, kwargs: dict) -> None:
        q = args[0]
        qid = self._queue(q)
        tid = _arg(args, kwargs, 1, "trace_id")
        dev = self._device(q.device)
        if not isinstance(tid, (int, np.integer)) or (dev, tid) in self._traces:
            return  # known, or the call itself will reject the id
        trace = internal.trace(q.device, tid)
        if trace is None or not trace.complete:
            return  # the call itself will raise
        # A trace captured before capture began: record it again, program by program.
        gid = self._next
        self._next += 1
        self._traces[(dev, tid)] = gid
        steps = []
        for cmd in trace.commands:
            pid = self._program(cmd.program)
            steps.append((pid, tuple(self._buffer(b, q) for b in cmd.plan.buffers)))
        self.log.append((BEGIN_TRACE, qid, gid))
        for pid, bids in steps:
            self.log.append((PROGRAM, qid, pid, bids, False))
        self.log.append((END_TRACE, qid, gid))

    def _before_release(self, name: str, args: tuple, kwargs: dict) -> None:
        self._device(args[0])

    # --- after: record the call ---------------------------------------------------
    def _after_open_device(self, args: tuple, kwargs: dict, dev: Device) -> None:
        self._device(dev)

    def _after_command_queue(self, args: tuple, kwargs: dict, q: CommandQueue) -> None:
        self._queue(q)

    def _after_create_buffer(self, args: tuple, kwargs: dict, buf: Buffer) -> None:
        # A new buffer holds the device's fill. Zeros are what replay's fresh buffers hold;
        # any other fill (Device.clear) is recorded, or reading the buffer before writing
        # it would give other data on replay.
        self._buffer(buf, None, with_data=not internal.fills_with_zeros(buf.device))

    def _after_deallocate(self, args: tuple, kwargs: dict, result: None) -> None:
        self.log.append((DEALLOCATE, args[0].tag))

    def _after_create_program(self, args: tuple, kwargs: dict, prog: Program) -> None:
        self._program(prog)

    def program(self, q: CommandQueue, cmd: RunProgram, blocking: bool) -> tuple:
        """enqueue_program's hook (see host/observe.py): learn (and snapshot, if need be)
        the queue, program and buffers, and return the log cells of the call, which the
        queue logs as it puts the command on; leave them on the plan too, for the queue to
        use on later enqueues."""
        with observe.unobserved(), self._lock:
            qid = self._queue(q)
            pid = self._program(cmd.program)
            # A buffer the program writes whole before reading it needs no snapshot.
            read = {id(b) for b in cmd.plan.read_first}
            bids = tuple(self._buffer(b, q, with_data=id(b) in read) for b in cmd.plan.buffers)
            cells = (5, PROGRAM, qid, pid, bids, blocking, None, None)
            if not blocking and not self._closed:
                # The queue uses these directly for the next enqueues of this binding here.
                cmd.plan.tag = (self, q, cells)
                self._noted.append(cmd.plan)
        return cells

    def write(self, q: CommandQueue, buf: Buffer, data: np.ndarray, blocking: bool) -> tuple:
        """enqueue_write_buffer's hook, before the write is submitted; returns its log
        cells. A write replaces all of the buffer: no snapshot of its contents."""
        qid, bid = q.tag, buf.tag
        if not (qid and bid):
            with observe.unobserved(), self._lock:
                qid = self._queue(q)
                bid = self._buffer(buf, q, with_data=False)  # the write replaces it all
        # The data is copied now: the caller may change its array once the write has run.
        return (6, WRITE, qid, bid, data.copy(), blocking, False, None)

    def read(self, q: CommandQueue, buf: Buffer, cmd: ReadBuffer, blocking: bool) -> tuple:
        """enqueue_read_buffer's hook, before the read is submitted; returns its log cells.
        A first-seen buffer's snapshot is the contents the read will read (every queue of
        its device drained). The read copies its data as it runs into `cmd.keep`, which the
        log holds (not the command: thousands of reads kept alive would set off the garbage
        collector again and again) and end_capture takes once queues finish."""
        qid, bid = q.tag, buf.tag
        if not (qid and bid):
            with observe.unobserved(), self._lock:
                qid = self._queue(q)
                bid = self._buffer(buf, q)
        return (5, READ, qid, bid, blocking, cmd.keep, None, None)

    def _after_finish(self, args: tuple, kwargs: dict, result: None) -> None:
        self.log.append((FINISH, args[0].tag))

    def _after_begin_trace(self, args: tuple, kwargs: dict, tid: int) -> None:
        q = args[0]
        self._begin_trace(q.device.tag, tid, q.tag)

    def _begin_trace(self, dev: int, tid: int, qid: int) -> None:
        """Log the start of device trace `tid` of device `dev` on queue `qid`, under a new id:
        until it ends, snapshots go before it (see _emit) and close() ends it."""
        gid = self._next
        self._next += 1
        self._traces[(dev, tid)] = gid
        self._open_traces[gid] = len(self.log)
        self._trace_queue[gid] = qid
        self.log.append((BEGIN_TRACE, qid, gid))

    def _after_end_trace(self, args: tuple, kwargs: dict, result: None) -> None:
        q = args[0]
        tid = _arg(args, kwargs, 1, "trace_id")
        gid = self._traces.get((q.device.tag, tid))
        if gid is None:
            return  # the capture ended while this call ran
        self._open_traces.pop(gid, None)
        self.log.append((END_TRACE, q.tag, gid))

    def _replay_record(self, args: tuple, kwargs: dict) -> tuple | None:
        """The log cells of a replay_trace, logged as the queue puts it on: so a program
        another thread enqueues on the same queue is logged on the side of it that it ran."""
        q = args[0]
        tid = _arg(args, kwargs, 1, "trace_id")
        blocking = bool(_arg(args, kwargs, 2, "blocking", False))
        gid = self._traces.get((q.device.tag, tid)) if isinstance(tid, (int, np.integer)) else None
        if gid is None:  # the call itself will reject the id
            return None
        return _cells((REPLAY_TRACE, q.tag, gid, blocking))

    def copy(self, q: CommandQueue, src: Buffer, dst: Buffer, blocking: bool) -> tuple:
        """enqueue_copy_buffer's hook (see host/observe.py), after the call checked its
        arguments: the log cells of the copy, which gets a global id of its own. A
        first-seen src is snapshotted with its contents, a dst without (the copy replaces
        all of it)."""
        qid, sid, did = q.tag, src.tag, dst.tag
        with self._lock:  # the id counter is shared with other threads' calls
            if not (qid and sid and did):
                with observe.unobserved():
                    qid = self._queue(q)
                    sid = self._buffer(src, q if src.device is q.device else None)
                    did = self._buffer(dst, q if dst.device is q.device else None, False)
            cid = self._next
            self._next += 1
        return (6, COPY, qid, sid, did, blocking, cid, None)

    def record_event(self, q: CommandQueue, event: Event) -> tuple:
        """record_event's hook: the new event's id (in its tag) and the log cells."""
        qid = q.tag
        with self._lock:
            if not qid:
                with observe.unobserved():
                    qid = self._queue(q)
            gid = self._new_id(event)
        return (3, RECORD_EVENT, qid, gid, None, None, None, None)

    def wait_event(self, q: CommandQueue, event: Event) -> tuple:
        """wait_event's hook: the log cells; an event recorded before capture began is
        recorded first (see _event)."""
        qid, eid = q.tag, event.tag
        if not (qid and eid):
            with observe.unobserved(), self._lock:
                qid = self._queue(q)
                eid = self._event(event)
        return (3, WAIT_EVENT, qid, eid, None, None, None, None)

    def _event(self, event: Event) -> int:
        """The event's id; one recorded before capture began is recorded now, on its queue,
        as a snapshot: on replay it completes no earlier than it did live."""
        gid = event.tag
        if not gid:
            qid = self._queue(event.queue)
            gid = self._new_id(event)
            if gid:
                self._emit((RECORD_EVENT, qid, gid))
        return gid

    def _after_event_wait(self, args: tuple, kwargs: dict, result: bool | None) -> None:
        """The host waited for an event (or found it complete): replay must not issue what
        follows before the event's queue has got that far, so the wait is recorded as a
        finish of that queue (which waits for no less)."""
        event = args[0]
        if result is not False and event.tag and event.queue.tag:
            self.log.append((FINISH, event.queue.tag))

    def _after_release_trace(self, args: tuple, kwargs: dict, result: None) -> None:
        dev = args[0]
        tid = _arg(args, kwargs, 1, "trace_id")
        dev_gid = dev.tag
        gid = self._traces.get((dev_gid, tid))
        if gid is not None:
            self._open_traces.pop(gid, None)  # releasing a trace being captured ends it
            self.log.append((RELEASE_TRACE, dev_gid, gid))

    def golden(
        self,
        q: CommandQueue,
        buf: Buffer,
        golden: np.ndarray,
        rtol: float | None,
        atol: float | None,
        name: str,
    ) -> None:
        """Record a user-supplied golden (mnrt.compare_to_golden), already checked and in
        the buffer's read dtype (stored, like the buffer's own data, in its dtype)."""
        with observe.unobserved(), self._lock:
            qid = self._queue(q)
            bid = self._buffer(buf, q)
            self.log.append((GOLDEN, qid, bid, golden, rtol, atol, name))
