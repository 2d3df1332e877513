"""Validating a binary's commands before anything runs, into a replay plan.

One pass over the command list checks what the structural verifier cannot: every id is
defined before use, never reused, and of the right kind; blobs exist and have exactly the
size of the buffer they fill; dtypes and shapes are sane; kernels and attributes exist;
bindings fit their program; and the device memory the binary holds at any point fits the
device. Each problem is an InvalidBinaryError naming the command index. The plan keeps
what replay needs (decoded programs, slot orders), so execution repeats none of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..device.dtypes import BY_CODE, DType
from ..device.spec import MNCORE2, DeviceSpec
from ..errors import InvalidBinaryError, MnrtError
from ..format import LightBinary
from ..format.fb.CommandUnion import CommandUnion as U
from ..format.values import attribute_value
from ..host import Kernel

MAX_RANK = 16
DEVICE, QUEUE, BUFFER, PROGRAM, TRACE = "device", "queue", "buffer", "program", "trace"


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


@dataclass
class Plan:
    """A validated binary: per-command facts the executor uses."""

    binary: LightBinary
    buffers: dict[int, BufferInfo] = field(default_factory=dict)
    programs: dict[int, ProgramInfo] = field(default_factory=dict)
    queue_device: dict[int, int] = field(default_factory=dict)
    device_index: dict[int, int] = field(default_factory=dict)  # device gid -> captured index
    peak_bytes: dict[int, int] = field(default_factory=dict)  # device gid -> peak allocation


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class _Validator:
    def __init__(self, binary: LightBinary, spec: DeviceSpec) -> None:
        self.binary = binary
        self.spec = spec
        self.plan = Plan(binary)
        self.kinds: dict[int, str] = {}
        self.live: set[int] = set()  # live buffer gids
        self.used: dict[int, int] = {}  # device gid -> bytes allocated now
        self.index = 0
        self.checks: dict[int, Callable[[Any], None]] = {
            U.OpenDevice: self.open_device,
            U.OpenQueue: self.open_queue,
            U.CreateBuffer: self.create_buffer,
            U.DeallocateBuffer: self.deallocate,
            U.WriteBuffer: self.write,
            U.ReadBuffer: self.read,
            U.CreateProgram: self.create_program,
            U.EnqueueProgram: self.enqueue_program,
            U.Finish: lambda c: self.ref(c.queueId, QUEUE),
            U.BeginTraceCapture: self.begin_trace,
            U.EndTraceCapture: self.trace_ref,
            U.ReplayTrace: self.trace_ref,
            U.ReleaseTrace: self.release_trace,
            U.GoldenCheck: self.golden,
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

    def blob_of_size(self, blob: int, nbytes: int, what: str) -> None:
        info = self.binary.blobs.info(blob, self.index)
        if info.size != nbytes:
            raise self.fail(f"{what} blob {blob} holds {info.size} bytes; the buffer has {nbytes}")

    # --- one method per command type ------------------------------------------------
    def open_device(self, c) -> None:
        self.define(c.deviceId, DEVICE)
        self.plan.device_index[c.deviceId] = c.index
        self.used[c.deviceId] = 0
        self.plan.peak_bytes[c.deviceId] = 0

    def open_queue(self, c) -> None:
        self.ref(c.deviceId, DEVICE)
        self.define(c.queueId, QUEUE)
        self.plan.queue_device[c.queueId] = c.deviceId

    def create_buffer(self, c) -> None:
        self.ref(c.deviceId, DEVICE)
        self.define(c.bufferId, BUFFER)
        desc = c.desc
        dtype = BY_CODE.get(desc.dtype)
        if dtype is None:
            raise self.fail(f"buffer id {c.bufferId} has invalid dtype code {desc.dtype}")
        shape = tuple(int(d) for d in (desc.shape if desc.shape is not None else ()))
        if len(shape) > MAX_RANK:
            raise self.fail(f"buffer id {c.bufferId} has rank {len(shape)} (at most {MAX_RANK})")
        nbytes = math.prod(shape) * dtype.itemsize
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
        self.plan.buffers[c.bufferId] = BufferInfo(shape, dtype, _text(desc.name), dev, nbytes)

    def deallocate(self, c) -> None:
        info = self.live_buffer(c.bufferId)
        self.live.discard(c.bufferId)
        self.used[info.device] -= info.nbytes

    def write(self, c) -> None:
        self.ref(c.queueId, QUEUE)
        info = self.live_buffer(c.bufferId)
        self.blob_of_size(c.data, info.nbytes, "data")

    def read(self, c) -> None:
        self.ref(c.queueId, QUEUE)
        info = self.live_buffer(c.bufferId)
        if c.golden:
            self.blob_of_size(c.golden, info.nbytes, "golden")

    def golden(self, c) -> None:
        self.ref(c.queueId, QUEUE)
        info = self.live_buffer(c.bufferId)
        self.blob_of_size(c.golden, info.nbytes, "golden")

    def create_program(self, c) -> None:
        self.ref(c.deviceId, DEVICE)
        self.define(c.programId, PROGRAM)
        desc = c.program
        kernels = []
        for i, k in enumerate(desc.kernels or ()):
            try:
                attrs = dict(attribute_value(a, self.index) for a in (k.attrs or ()))
                kernels.append(
                    Kernel(
                        _text(k.op),
                        [_text(s) for s in (k.inputs or ())],
                        [_text(s) for s in (k.outputs or ())],
                        attrs,
                    )
                )
            except InvalidBinaryError:
                raise
            except MnrtError as e:
                raise self.fail(f"program id {c.programId} kernel {i}: {e}") from None
        if not kernels:
            raise self.fail(f"program id {c.programId} has no kernels")
        slots = tuple(dict.fromkeys(s for k in kernels for s in (*k.inputs, *k.outputs)))
        self.plan.programs[c.programId] = ProgramInfo(_text(desc.name), kernels, slots, c.deviceId)

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
        for gid in ids:
            self.live_buffer(gid)

    def begin_trace(self, c) -> None:
        self.ref(c.queueId, QUEUE)
        self.define(c.traceId, TRACE)

    def trace_ref(self, c) -> None:
        self.ref(c.queueId, QUEUE)
        self.ref(c.traceId, TRACE)

    def release_trace(self, c) -> None:
        self.ref(c.deviceId, DEVICE)
        self.ref(c.traceId, TRACE)

    def run(self) -> Plan:
        for index, command in enumerate(self.binary.commands):
            self.index = index
            check = self.checks.get(command.cmdType)
            if check is None or command.cmd is None:
                raise self.fail(f"command has no valid body (type {command.cmdType})")
            check(command.cmd)
        return self.plan


def validate(binary: LightBinary, spec: DeviceSpec = MNCORE2, blobs: bool = True) -> Plan:
    """Check a binary end to end (and every blob's checksum, with `blobs`)."""
    plan = _Validator(binary, spec).run()
    if blobs:
        binary.blobs.verify_all()
    return plan
