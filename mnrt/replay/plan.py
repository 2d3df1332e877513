"""Validating a binary's commands before anything runs, into a replay plan.

One pass over the command list checks what the structural verifier cannot: every id is
defined before use, never reused, and of the right kind; blobs exist and have exactly the
size of the buffer they fill; dtypes and shapes are sane; kernels and attributes exist;
bindings fit their program (every kernel's shape rules hold for the bound buffers); objects
of one device are used on that device only; device traces follow the host API's rules
(begin, end, replay, release, nothing but programs inside one); tolerances are sane; and the
device memory the binary holds at any point fits the device. Each problem is an
InvalidBinaryError naming the command index, so a binary that verifies does not fail half
way through a replay for any of these. The plan keeps what replay needs (decoded programs,
slot orders), so execution repeats none of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..device.dtypes import BY_CODE, DType
from ..device.kernels.registry import TensorSpec
from ..device.spec import MNCORE2, DeviceSpec
from ..device.tolerance import kernel_errors
from ..errors import InvalidBinaryError, MnrtError
from ..format import LightBinary
from ..format.fb.CommandUnion import CommandUnion as U
from ..format.fingerprints import Stats
from ..format.text import decoded
from ..format.values import attribute_value
from ..host import Kernel, SlotView
from ..host.device import MAX_QUEUES, extent_bytes
from ..host.program import bound_slots, check_views, view_root, view_specs
from .io import check_lists as check_io_lists

MAX_RANK = 16
DEVICE, QUEUE, BUFFER, PROGRAM, TRACE = "device", "queue", "buffer", "program", "trace"
EVENT, COPY = "event", "copy"


@dataclass
class BufferInfo:
    shape: tuple[int, ...]
    dtype: DType
    name: str
    device: int
    nbytes: int


@dataclass
class ProgramInfo:
    name: str
    kernels: list[Kernel]
    slots: tuple[str, ...]
    device: int
    views: dict[str, SlotView] = field(default_factory=dict)


@dataclass
class TraceInfo:
    """A device trace as validation follows it: where it was captured, what it binds."""

    device: int
    queue: tuple[int, int]  # (device gid, queue index)
    state: str = "capturing"  # then "ready", then "released"
    buffers: set[int] = field(default_factory=set)
    enqueued: list[tuple[int, list[int]]] = field(default_factory=list)  # (program, buffers)


@dataclass
class Plan:
    """A validated binary: per-command facts the executor uses."""

    binary: LightBinary
    buffers: dict[int, BufferInfo] = field(default_factory=dict)
    programs: dict[int, ProgramInfo] = field(default_factory=dict)
    queue_device: dict[int, int] = field(default_factory=dict)
    device_index: dict[int, int] = field(default_factory=dict)  # device gid -> captured index
    peak_bytes: dict[int, int] = field(default_factory=dict)  # device gid -> peak allocation
    # Command index of each golden and read -> the error model's bound on its buffer's
    # contents (device/tolerance.py): what a golden recorded without tolerances is allowed.
    golden_errors: dict[int, float] = field(default_factory=dict)
    # (command, kernel among those it ran) -> the error each output carries (the tolerance
    # model's, relative to its scale): how far a replay on another host may move it; kept
    # for the kernels the binary fingerprints
    output_errors: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    trace_programs: dict[int, list[int]] = field(default_factory=dict)  # trace gid -> programs
    # The kernel fingerprints by (command, kernel): each output's, in order (see locate.py).
    fingerprints: dict[tuple[int, int], list[Stats]] = field(default_factory=dict)
    queue_index: dict[int, int] = field(default_factory=dict)  # queue gid -> its index
    event_queue: dict[int, int] = field(default_factory=dict)  # event gid -> recording queue
    event_record: dict[int, int] = field(default_factory=dict)  # event gid -> command index
    # event gid -> the device gids of the queues that wait for it (distributed replay
    # signals the ranks that own them).
    event_waiters: dict[int, set[int]] = field(default_factory=dict)


def program_buffers(
    plan: Plan, program: int, ids: Sequence[int]
) -> list[tuple[set[int], set[int]]]:
    """The kernels of one enqueue of `program` on buffers `ids`, in order, as the buffer
    ids each reads and writes. A kernel writes the whole of a buffer bound to its output;
    one whose output is a slot view writes only part of its buffer, so it counts as reading
    the buffer too: what the rest holds still matters (to a dead-write analysis, say)."""
    info = plan.programs[program]
    bound = dict(zip(info.slots, (int(i) for i in ids)))
    operands = {s for k in info.kernels for s in k.inputs + k.outputs}
    slot = {s: bound[view_root(info.views, s)[0]] for s in operands}
    return [
        (
            {slot[s] for s in k.inputs} | {slot[s] for s in k.outputs if s in info.views},
            {slot[s] for s in k.outputs},
        )
        for k in info.kernels
    ]


def program_kernel(plan: Plan, command: int, kernel: int) -> tuple[ProgramInfo | None, int]:
    """The program that holds the `kernel`-th kernel command `command` ran (a trace runs
    its programs one after another), and the kernel's position in it; None if none does."""
    for program in program_sequence(plan, command):
        if kernel < len(program.kernels):
            return program, kernel
        kernel -= len(program.kernels)
    return None, kernel


def program_sequence(plan: Plan, command: int) -> list[ProgramInfo]:
    """The programs command `command` runs, in order: an EnqueueProgram's one, a
    ReplayTrace's trace's; none for any other command."""
    c = plan.binary.commands[command]
    if c.cmdType == U.EnqueueProgram:
        return [plan.programs[c.cmd.programId]]
    if c.cmdType == U.ReplayTrace:
        return [plan.programs[p] for p in plan.trace_programs.get(c.cmd.traceId, ())]
    return []


class _Validator:
    def __init__(self, binary: LightBinary, spec: DeviceSpec) -> None:
        self.binary = binary
        self.spec = spec
        self.plan = Plan(binary)
        self.kinds: dict[int, str] = {}
        self.live: set[int] = set()  # live buffer gids
        self.used: dict[int, int] = {}  # device gid -> bytes allocated now
        self.queues: dict[int, tuple[int, int]] = {}  # queue gid -> (device gid, index)
        self.capturing: dict[tuple[int, int], int] = {}  # queue -> trace gid it captures
        self.traces: dict[int, TraceInfo] = {}
        self.shapes_checked: set[tuple] = set()  # (program gid, bound specs) found valid
        self.errors: dict[int, float] = {}  # buffer gid -> error bound of what it holds
        # the kernel executions whose output errors are kept (Plan.output_errors): those
        # with fingerprints, the only ones locate compares (so as many as the file lists)
        self.printed = {(f.command, f.kernel) for f in binary.fingerprints}
        self.index = 0
        self.current: dict[int, int] = {}  # captured device index -> the gid open on it now
        self.closed: set[int] = set()  # device gids the capture closed (opened again since)
        self.checks: dict[int, Callable[[Any], None]] = {
            U.OpenDevice: self.open_device,
            U.OpenQueue: self.open_queue,
            U.CreateBuffer: self.create_buffer,
            U.DeallocateBuffer: self.deallocate,
            U.WriteBuffer: self.write,
            U.ReadBuffer: self.read,
            U.CreateProgram: self.create_program,
            U.EnqueueProgram: self.enqueue_program,
            U.Finish: lambda c: self.host_queue(c.queueId, "finish"),
            U.BeginTraceCapture: self.begin_trace,
            U.EndTraceCapture: self.end_trace,
            U.ReplayTrace: self.replay_trace,
            U.ReleaseTrace: self.release_trace,
            U.GoldenCheck: self.golden,
            U.CopyBuffer: self.copy,
            U.RecordEvent: self.record_event,
            U.WaitEvent: self.wait_event,
        }

    def fail(self, message: str) -> InvalidBinaryError:
        return InvalidBinaryError(message, command=self.index)

    def define(self, gid: int, kind: str) -> None:
        if gid == 0:
            raise self.fail(f"{kind} id 0 is reserved for 'none'")
        if gid in self.kinds:
            raise self.fail(f"id {gid} is defined twice (already a {self.kinds[gid]})")
        self.kinds[gid] = kind

    def ref(self, gid: int, kind: str) -> None:
        have = self.kinds.get(gid)
        if have is None:
            raise self.fail(f"{kind} id {gid} is used before it is defined")
        if have != kind:
            raise self.fail(f"id {gid} is a {have}, not a {kind}")

    def live_buffer(self, gid: int) -> BufferInfo:
        self.ref(gid, BUFFER)
        if gid not in self.live:
            raise self.fail(f"buffer id {gid} is used after it was deallocated")
        return self.plan.buffers[gid]

    def on_device(self, info: BufferInfo, gid: int, device: int) -> None:
        if info.device != device:
            raise self.fail(
                f"buffer id {gid} belongs to device id {info.device}, not device id {device}"
            )

    def host_queue(self, gid: int, what: str) -> int:
        """A queue that `what` (a host transfer or wait) may use now: none inside a trace.
        Returns its device's gid."""
        self.ref(gid, QUEUE)
        trace = self.capturing.get(self.queues[gid])
        if trace is not None:
            raise self.fail(
                f"{what} on queue id {gid} while it captures trace id {trace}; only programs "
                "may be enqueued inside a device trace"
            )
        return self.queues[gid][0]

    def memory_change(self, device: int, what: str) -> None:
        """Allocation and program creation are not allowed while a queue of the device
        captures a trace."""
        for (dev, _), trace in self.capturing.items():
            if dev == device:
                raise self.fail(f"{what} on device id {device} while trace id {trace} is captured")

    def tolerances(self, c) -> None:
        for name in ("rtol", "atol"):
            value = getattr(c, name)
            if not math.isnan(value) and not 0 <= value < math.inf:
                raise self.fail(
                    f"{name} {value} is not a tolerance (a finite number >= 0, or NaN for the "
                    "dtype's default)"
                )

    def blob_of_size(self, blob: int, nbytes: int, what: str) -> None:
        info = self.binary.blobs.info(blob, self.index)
        if info.size != nbytes:
            raise self.fail(f"{what} blob {blob} holds {info.size} bytes; the buffer has {nbytes}")

    # --- one method per command type ------------------------------------------------
    def open_device(self, c) -> None:
        self.define(c.deviceId, DEVICE)
        before = self.current.get(c.index)
        if before is not None:  # the capture closed that device and opened it again
            self.closed.add(before)
        self.current[c.index] = c.deviceId
        self.plan.device_index[c.deviceId] = c.index
        self.used[c.deviceId] = 0
        self.plan.peak_bytes[c.deviceId] = 0

    def open_queue(self, c) -> None:
        self.ref(c.deviceId, DEVICE)
        self.define(c.queueId, QUEUE)
        if c.index >= MAX_QUEUES:
            raise self.fail(
                f"queue id {c.queueId} has index {c.index}; a device has 0..{MAX_QUEUES - 1}"
            )
        self.plan.queue_device[c.queueId] = c.deviceId
        self.plan.queue_index[c.queueId] = c.index
        self.queues[c.queueId] = (c.deviceId, c.index)

    def create_buffer(self, c) -> None:
        self.ref(c.deviceId, DEVICE)
        self.memory_change(c.deviceId, "create_buffer")
        self.define(c.bufferId, BUFFER)
        desc = c.desc
        dtype = BY_CODE.get(desc.dtype)
        if dtype is None:
            raise self.fail(f"buffer id {c.bufferId} has invalid dtype code {desc.dtype}")
        shape = tuple(int(d) for d in (desc.shape if desc.shape is not None else ()))
        if len(shape) > MAX_RANK:
            raise self.fail(f"buffer id {c.bufferId} has rank {len(shape)} (at most {MAX_RANK})")
        nbytes = math.prod(shape) * dtype.itemsize
        if extent_bytes(shape, dtype.itemsize) > self.spec.dram_bytes:
            raise self.fail(
                f"buffer id {c.bufferId} of shape {shape} ({dtype.name}) spans more than the "
                f"device's {self.spec.dram_bytes} bytes of DRAM"
            )
        dev = c.deviceId
        self.used[dev] += nbytes
        if self.used[dev] > self.spec.dram_bytes:
            raise self.fail(
                f"buffer id {c.bufferId} of shape {shape} ({dtype.name}, {nbytes} bytes) takes "
                f"device memory in use to {self.used[dev]} bytes, more than the device's "
                f"{self.spec.dram_bytes}"
            )
        self.plan.peak_bytes[dev] = max(self.plan.peak_bytes[dev], self.used[dev])
        self.live.add(c.bufferId)
        self.errors[c.bufferId] = 0.0
        self.plan.buffers[c.bufferId] = BufferInfo(shape, dtype, decoded(desc.name), dev, nbytes)

    def deallocate(self, c) -> None:
        info = self.live_buffer(c.bufferId)
        self.memory_change(info.device, "deallocate")
        self.live.discard(c.bufferId)
        self.used[info.device] -= info.nbytes

    def write(self, c) -> None:
        device = self.host_queue(c.queueId, "write")
        info = self.live_buffer(c.bufferId)
        self.on_device(info, c.bufferId, device)
        self.blob_of_size(c.data, info.nbytes, "data")
        self.errors[c.bufferId] = 0.0

    def read(self, c) -> None:
        device = self.host_queue(c.queueId, "read")
        info = self.live_buffer(c.bufferId)
        self.on_device(info, c.bufferId, device)
        # Every read's bound, not only a golden's: an --expected output is checked
        # against its buffer's last read.
        self.plan.golden_errors[self.index] = self.errors[c.bufferId]
        if c.golden:
            self.blob_of_size(c.golden, info.nbytes, "golden")
            self.tolerances(c)

    def golden(self, c) -> None:
        device = self.host_queue(c.queueId, "golden check")
        info = self.live_buffer(c.bufferId)
        self.on_device(info, c.bufferId, device)
        self.blob_of_size(c.golden, info.nbytes, "golden")
        self.tolerances(c)
        self.plan.golden_errors[self.index] = self.errors[c.bufferId]

    def copy(self, c) -> None:
        device = self.host_queue(c.queueId, "copy_buffer")
        self.define(c.copyId, COPY)
        src, dst = self.live_buffer(c.srcId), self.live_buffer(c.dstId)
        if device not in (src.device, dst.device):
            raise self.fail(
                f"copy id {c.copyId} runs on queue id {c.queueId} of device id {device}, but "
                f"its src buffer id {c.srcId} is on device id {src.device} and its dst buffer "
                f"id {c.dstId} on device id {dst.device}"
            )
        if src.shape != dst.shape or src.dtype != dst.dtype:
            raise self.fail(
                f"copy id {c.copyId}: src buffer id {c.srcId} is {src.dtype.name}{list(src.shape)}"
                f" but dst buffer id {c.dstId} is {dst.dtype.name}{list(dst.shape)}; a copy "
                "needs equal shapes and dtypes"
            )
        self.errors[c.dstId] = self.errors[c.srcId]

    def record_event(self, c) -> None:
        self.host_queue(c.queueId, "record_event")
        self.define(c.eventId, EVENT)
        self.plan.event_queue[c.eventId] = c.queueId
        self.plan.event_record[c.eventId] = self.index

    def wait_event(self, c) -> None:
        device = self.host_queue(c.queueId, "wait_event")
        self.ref(c.eventId, EVENT)
        recorder = self.plan.queue_device[self.plan.event_queue[c.eventId]]
        if recorder in self.closed:
            raise self.fail(
                f"queue id {c.queueId} waits for event id {c.eventId} of device id {recorder}, "
                "which was closed before this wait (it can never complete)"
            )
        self.plan.event_waiters.setdefault(c.eventId, set()).add(device)

    def create_program(self, c) -> None:
        self.ref(c.deviceId, DEVICE)
        self.memory_change(c.deviceId, "create_program")
        self.define(c.programId, PROGRAM)
        desc = c.program
        kernels = []
        for i, k in enumerate(desc.kernels or ()):
            try:
                attrs = dict(attribute_value(a, self.index) for a in (k.attrs or ()))
                kernels.append(
                    Kernel(
                        decoded(k.op),
                        [decoded(s) for s in (k.inputs or ())],
                        [decoded(s) for s in (k.outputs or ())],
                        attrs,
                    )
                )
            except InvalidBinaryError:
                raise
            except MnrtError as e:
                raise self.fail(f"program id {c.programId} kernel {i}: {e}") from None
        if not kernels:
            raise self.fail(f"program id {c.programId} has no kernels")
        views = {}
        for v in desc.views if desc.views is not None else ():
            shape = tuple(int(d) for d in (v.shape if v.shape is not None else ()))
            if len(shape) > MAX_RANK:
                raise self.fail(
                    f"program id {c.programId} view {decoded(v.slot)!r} has rank {len(shape)} "
                    f"(at most {MAX_RANK})"
                )
            views[decoded(v.slot)] = SlotView(decoded(v.of), int(v.offset), shape)
        try:
            views = check_views(f"program id {c.programId}", views, kernels)
        except MnrtError as e:
            raise self.fail(str(e)) from None
        slots = bound_slots((s for k in kernels for s in (*k.inputs, *k.outputs)), views)
        self.plan.programs[c.programId] = ProgramInfo(
            decoded(desc.name), kernels, slots, c.deviceId, views
        )

    def enqueue_program(self, c) -> None:
        self.ref(c.queueId, QUEUE)
        self.ref(c.programId, PROGRAM)
        prog = self.plan.programs[c.programId]
        ids = [] if c.bufferIds is None else [int(b) for b in c.bufferIds]
        if len(ids) != len(prog.slots):
            raise self.fail(
                f"program id {c.programId} has {len(prog.slots)} slots but {len(ids)} buffers "
                "are bound"
            )
        device = self.queues[c.queueId][0]
        if prog.device != device:
            raise self.fail(
                f"program id {c.programId} belongs to device id {prog.device}, not the "
                f"queue's device id {device}"
            )
        infos = [self.live_buffer(gid) for gid in ids]
        for gid, info in zip(ids, infos):
            self.on_device(info, gid, device)
        self.check_shapes(c.programId, prog, infos)
        trace = self.capturing.get(self.queues[c.queueId])
        if trace is not None:
            if c.blocking:
                raise self.fail("a blocking enqueue_program inside a device trace")
            self.traces[trace].buffers.update(ids)
            self.traces[trace].enqueued.append((c.programId, ids))
        else:
            self.propagate_errors(prog, ids)

    def propagate_errors(self, prog: ProgramInfo, ids: list[int], first: int = 0) -> int:
        """What the program leaves in its buffers carries its kernels' errors on top of
        their inputs' (device/tolerance.py), kernel by kernel as it runs; each kernel's
        are kept by (command, `first` + its position). The number of kernels it ran."""
        errors = {s: self.errors[gid] for s, gid in zip(prog.slots, ids)}
        specs = {s: TensorSpec(self.plan.buffers[gid].shape, self.plan.buffers[gid].dtype)
                 for s, gid in zip(prog.slots, ids)}  # fmt: skip
        specs.update(view_specs(f"program {prog.name!r}", prog.views, specs))
        # A view carries what its buffer does, and what a kernel leaves in a view its
        # buffer carries on top of what it carried (conservatively: the most of any part).
        root = {s: view_root(prog.views, s)[0] for s in specs}
        for i, k in enumerate(prog.kernels):
            outs = kernel_errors(
                k.kdef,
                [specs[s] for s in k.inputs],
                [specs[s] for s in k.outputs],
                k.attrs,
                [errors[root[s]] for s in k.inputs],
            )
            for s, e in zip(k.outputs, outs):
                errors[root[s]] = max(errors[root[s]], e) if s in prog.views else e
            if (self.index, first + i) in self.printed:
                self.plan.output_errors[(self.index, first + i)] = outs
        for slot, gid in zip(prog.slots, ids):
            self.errors[gid] = errors[slot]
        return len(prog.kernels)

    def check_shapes(self, gid: int, prog: ProgramInfo, infos: list[BufferInfo]) -> None:
        """Every kernel's shape rules hold for the bound buffers, as enqueue will check."""
        bound = {s: TensorSpec(i.shape, i.dtype) for s, i in zip(prog.slots, infos)}
        key = (gid, tuple(bound.values()))
        if key in self.shapes_checked:
            return
        try:
            bound.update(view_specs(f"program id {gid}", prog.views, bound))
        except MnrtError as e:
            raise self.fail(str(e)) from None
        for i, k in enumerate(prog.kernels):
            where = f"program id {gid} kernel {i} '{k.op}'"
            try:
                expected = k.kdef.infer([bound[s] for s in k.inputs], k.attrs)
                k.kdef.check_outputs(len(k.outputs), expected)
            except MnrtError as e:
                raise self.fail(f"{where}: {e}") from None
            for slot, want in zip(k.outputs, expected):
                have = bound[slot]
                if have.shape != want.shape or have.dtype not in want.dtypes:
                    produced = " or ".join(str(TensorSpec(want.shape, d)) for d in want.dtypes)
                    raise self.fail(
                        f"{where}: output slot '{slot}' is bound to a {have}; the kernel "
                        f"produces {produced}"
                    )
        self.shapes_checked.add(key)

    def trace(self, gid: int, queue: int) -> TraceInfo:
        """A trace that `queue` may replay now."""
        self.ref(gid, TRACE)
        info = self.traces[gid]
        if info.state != "ready":
            raise self.fail(f"trace id {gid} is {info.state}, it cannot be replayed")
        if info.queue != self.queues[queue]:
            raise self.fail(f"trace id {gid} was captured on another queue than queue id {queue}")
        return info

    def begin_trace(self, c) -> None:
        self.ref(c.queueId, QUEUE)
        queue = self.queues[c.queueId]
        if queue in self.capturing:
            raise self.fail(
                f"queue id {c.queueId} already captures trace id {self.capturing[queue]}"
            )
        self.define(c.traceId, TRACE)
        self.traces[c.traceId] = TraceInfo(queue[0], queue)
        self.capturing[queue] = c.traceId

    def end_trace(self, c) -> None:
        self.ref(c.queueId, QUEUE)
        self.ref(c.traceId, TRACE)
        queue = self.queues[c.queueId]
        if self.capturing.get(queue) != c.traceId:
            raise self.fail(f"queue id {c.queueId} is not capturing trace id {c.traceId}")
        del self.capturing[queue]
        self.traces[c.traceId].state = "ready"
        self.plan.trace_programs[c.traceId] = [p for p, _ in self.traces[c.traceId].enqueued]

    def replay_trace(self, c) -> None:
        self.host_queue(c.queueId, "replay_trace")
        info = self.trace(c.traceId, c.queueId)
        for gid in info.buffers:
            if gid not in self.live:
                raise self.fail(f"trace id {c.traceId} uses buffer id {gid}, deallocated since")
        ran = 0
        for program, ids in info.enqueued:
            ran += self.propagate_errors(self.plan.programs[program], ids, ran)

    def release_trace(self, c) -> None:
        self.ref(c.deviceId, DEVICE)
        self.ref(c.traceId, TRACE)
        info = self.traces[c.traceId]
        if info.device != c.deviceId:
            raise self.fail(f"trace id {c.traceId} belongs to device id {info.device}")
        if info.state == "released":
            raise self.fail(f"trace id {c.traceId} is released twice")
        if info.state == "capturing":
            del self.capturing[info.queue]
        info.state = "released"

    def run(self) -> Plan:
        for index, command in enumerate(self.binary.commands):
            self.index = index
            check = self.checks.get(command.cmdType)
            if check is None or command.cmd is None:
                raise self.fail(f"command has no valid body (type {command.cmdType})")
            check(command.cmd)
        if self.capturing:
            trace = next(iter(self.capturing.values()))
            raise self.fail(f"trace id {trace} is still being captured after the last command")
        return self.plan


def validate(binary: LightBinary, spec: DeviceSpec = MNCORE2, blobs: bool = True) -> Plan:
    """Check a binary end to end (and every blob's checksum, with `blobs`)."""
    plan = _Validator(binary, spec).run()
    check_io_lists(plan)
    plan.fingerprints = expected_prints(binary)
    if blobs:
        binary.blobs.verify_all()
    return plan


def expected_prints(binary: LightBinary) -> dict[tuple[int, int], list[Stats]]:
    """The binary's fingerprints by (command, kernel), outputs in order. Fingerprints that
    name a command which runs no kernels, or leave an output out, make the binary invalid
    (validate checks them here)."""
    commands = binary.commands
    by_kernel: dict[tuple[int, int], dict[int, Stats]] = {}
    for f in binary.fingerprints:
        if f.command >= len(commands) or commands[f.command].cmdType not in (
            U.EnqueueProgram,
            U.ReplayTrace,
        ):
            raise InvalidBinaryError(
                f"a kernel fingerprint names command {f.command}, which runs no kernels",
                command=f.command,
            )
        by_kernel.setdefault((f.command, f.kernel), {})[f.output] = f.stats
    out = {}
    for key, outputs in by_kernel.items():
        if sorted(outputs) != list(range(len(outputs))):
            raise InvalidBinaryError(
                f"kernel {key[1]}'s fingerprints skip an output", command=key[0]
            )
        out[key] = [outputs[j] for j in range(len(outputs))]
    return out
