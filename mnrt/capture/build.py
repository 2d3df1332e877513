"""Turning a recorder's log into a LightBinary: commands as tables, data as blobs."""

from __future__ import annotations

import platform
import socket
import time
from collections import Counter

import numpy as np

from .._version import __version__
from ..device.dtypes import BY_CODE
from ..device.spec import MNCORE2
from ..format import BlobStore, LightBinary
from ..format.fb.BeginTraceCapture import BeginTraceCaptureT
from ..format.fb.BufferDesc import BufferDescT
from ..format.fb.Command import CommandT
from ..format.fb.CommandUnion import CommandUnion as U
from ..format.fb.CopyBuffer import CopyBufferT
from ..format.fb.CreateBuffer import CreateBufferT
from ..format.fb.CreateProgram import CreateProgramT
from ..format.fb.DeallocateBuffer import DeallocateBufferT
from ..format.fb.DeviceDescription import DeviceDescriptionT
from ..format.fb.EndTraceCapture import EndTraceCaptureT
from ..format.fb.EnqueueProgram import EnqueueProgramT
from ..format.fb.Finish import FinishT
from ..format.fb.GoldenCheck import GoldenCheckT
from ..format.fb.KernelDesc import KernelDescT
from ..format.fb.Metadata import MetadataT
from ..format.fb.OpenDevice import OpenDeviceT
from ..format.fb.OpenQueue import OpenQueueT
from ..format.fb.ProgramDesc import ProgramDescT
from ..format.fb.ReadBuffer import ReadBufferT
from ..format.fb.RecordEvent import RecordEventT
from ..format.fb.ReleaseTrace import ReleaseTraceT
from ..format.fb.ReplayTrace import ReplayTraceT
from ..format.fb.SlotView import SlotViewT
from ..format.fb.WaitEvent import WaitEventT
from ..format.fb.WriteBuffer import WriteBufferT
from ..format.fingerprints import columns_of_commands
from ..format.values import attribute
from ..host import Program
from . import recorder as r
from .fingerprinter import Fingerprinter

PRODUCER = "mnrt capture"
_NAN = float("nan")


def _program_desc(prog: Program) -> ProgramDescT:
    kernels = []
    for k in prog.kernels:
        schema = k.kdef.accepted_attrs
        kernels.append(
            KernelDescT(
                op=k.op,
                inputs=list(k.inputs),
                outputs=list(k.outputs),
                attrs=[attribute(n, schema[n].kind, v) for n, v in k.attrs.items()],
            )
        )
    views = [
        SlotViewT(slot, view.of, view.offset, list(view.shape)) for slot, view in prog.views.items()
    ]
    return ProgramDescT(name=prog.name, kernels=kernels, views=views or None)


def _tolerance(value: float | None) -> float:
    return _NAN if value is None else float(value)


class _Context:
    """What converting one log needs besides the entry itself."""

    def __init__(self, log: list[tuple]) -> None:
        # Queues that are their device's only queue in the capture: nothing can overtake a
        # command there, so a snapshot write on one need not block (see _write).
        devices = {e[1]: e[2] for e in log if e[0] == r.OPEN_QUEUE}
        per_device = Counter(devices.values())
        # A copy run by another device's queue reads (or writes) a buffer without its own
        # device's queue ordering it: such a device's queues are never sole.
        buffer_device = {e[1]: e[2] for e in log if e[0] == r.CREATE_BUFFER}
        shared = {
            buffer_device[bid]
            for e in log
            if e[0] == r.COPY
            for bid in (e[2], e[3])
            if buffer_device.get(bid) != devices.get(e[1])
        }
        self.sole_queues = {
            q for q, dev in devices.items() if per_device[dev] == 1 and dev not in shared
        }
        self.blobs = BlobStore()
        self.dtype_of: dict[int, int] = {}  # buffer gid -> dtype code
        # One command object per distinct enqueue (a loop enqueues the same one again and
        # again): the packer then recognises repeats by identity and packs each once.
        self.programs: dict[tuple, CommandT] = {}
        # The binary's inputs and outputs (see format/io.py), noted as their commands are
        # converted: buffers a host call wrote (not a snapshot) and buffers read or checked.
        self.inputs: dict[int, None] = {}
        self.outputs: dict[int, None] = {}

    def stored_blob(self, data: np.ndarray, bid: int) -> int:
        """Host data as the device stores it (half as its 1-6-9 bits), as a blob id."""
        return self.blobs.add(BY_CODE[self.dtype_of[bid]].to_storage(data))


def _create_buffer(e: tuple, ctx: _Context) -> CommandT:
    _, bid, dev, shape, code, name = e
    ctx.dtype_of[bid] = code
    desc = BufferDescT(shape=list(shape), dtype=code, name=name)
    return CommandT(U.CreateBuffer, CreateBufferT(bid, dev, desc))


def _write(e: tuple, ctx: _Context) -> CommandT:
    _, qid, bid, data, blocking, stored = e
    if stored and qid in ctx.sole_queues:
        # A snapshot (stored bits) is recorded blocking so that another queue of the device
        # cannot read the buffer before it lands on replay; with no other queue, in-order
        # execution already guarantees that, and not blocking spares a handoff per write.
        blocking = False
    if stored:
        blob = ctx.blobs.add(data)
    else:
        blob = ctx.stored_blob(data, bid)
        ctx.inputs[bid] = None
    return CommandT(U.WriteBuffer, WriteBufferT(qid, bid, blob, blocking))


def _read(e: tuple, ctx: _Context) -> CommandT:
    _, qid, bid, blocking, golden = e
    blob = 0 if golden is None else ctx.stored_blob(golden, bid)
    ctx.outputs[bid] = None
    return CommandT(U.ReadBuffer, ReadBufferT(qid, bid, blocking, blob, _NAN, _NAN))


def _golden(e: tuple, ctx: _Context) -> CommandT:
    _, qid, bid, expected, rtol, atol, name = e
    blob = ctx.stored_blob(expected, bid)
    ctx.outputs[bid] = None
    check = GoldenCheckT(qid, bid, blob, _tolerance(rtol), _tolerance(atol), name)
    return CommandT(U.GoldenCheck, check)


# Log entry kind -> converter of (entry, context) to a command table.
_CONVERTERS = {
    r.OPEN_DEVICE: lambda e, ctx: CommandT(U.OpenDevice, OpenDeviceT(e[1], e[2])),
    r.OPEN_QUEUE: lambda e, ctx: CommandT(U.OpenQueue, OpenQueueT(e[1], e[2], e[3])),
    r.CREATE_BUFFER: _create_buffer,
    r.DEALLOCATE: lambda e, ctx: CommandT(U.DeallocateBuffer, DeallocateBufferT(e[1])),
    r.WRITE: _write,
    r.READ: _read,
    r.CREATE_PROGRAM: lambda e, ctx: CommandT(
        U.CreateProgram, CreateProgramT(e[1], e[2], _program_desc(e[3]))
    ),
    r.PROGRAM: lambda e, ctx: (
        ctx.programs.get(e)
        or ctx.programs.setdefault(
            e, CommandT(U.EnqueueProgram, EnqueueProgramT(e[1], e[2], list(e[3]), e[4]))
        )
    ),
    r.FINISH: lambda e, ctx: CommandT(U.Finish, FinishT(e[1])),
    r.BEGIN_TRACE: lambda e, ctx: CommandT(U.BeginTraceCapture, BeginTraceCaptureT(e[1], e[2])),
    r.END_TRACE: lambda e, ctx: CommandT(U.EndTraceCapture, EndTraceCaptureT(e[1], e[2])),
    r.REPLAY_TRACE: lambda e, ctx: CommandT(U.ReplayTrace, ReplayTraceT(e[1], e[2], e[3])),
    r.RELEASE_TRACE: lambda e, ctx: CommandT(U.ReleaseTrace, ReleaseTraceT(e[1], e[2])),
    r.GOLDEN: _golden,
    r.COPY: lambda e, ctx: CommandT(U.CopyBuffer, CopyBufferT(e[1], e[2], e[3], e[4], e[5])),
    r.RECORD_EVENT: lambda e, ctx: CommandT(U.RecordEvent, RecordEventT(e[1], e[2])),
    r.WAIT_EVENT: lambda e, ctx: CommandT(U.WaitEvent, WaitEventT(e[1], e[2])),
}


def _fingerprints(log: list[tuple], printed: dict[int, list[Fingerprinter]]) -> dict:
    """The KernelFingerprint columns (see format/fingerprints.py): each queue's
    fingerprinters (one per command that ran kernels, in the order they were put on it) paired
    with that queue's log rows that ran kernels, in log order: programs enqueued outside a
    device trace (those inside one run when it is replayed), and trace replays."""
    capturing: dict[int, int] = {}  # queue gid -> trace gid it captures
    next_group = dict.fromkeys(printed, 0)
    commands = []
    for index, e in enumerate(log):
        kind = e[0]
        if kind == r.BEGIN_TRACE:
            capturing[e[1]] = e[2]
        elif kind == r.END_TRACE:
            capturing.pop(e[1], None)
        elif kind == r.RELEASE_TRACE:  # releasing a trace being captured ends it
            capturing = {q: t for q, t in capturing.items() if t != e[2]}
        elif (kind == r.PROGRAM and e[1] not in capturing) or kind == r.REPLAY_TRACE:
            groups, n = printed.get(e[1]), next_group.get(e[1], 0)
            if groups is None or n >= len(groups):
                continue
            next_group[e[1]] = n + 1
            commands.append((index, groups[n].counts, groups[n].stats))
    return columns_of_commands(commands)


def build(
    log: list[tuple],
    devices: dict[int, int],
    description: str = "",
    printed: dict[int, list[Fingerprinter]] | None = None,
) -> LightBinary:
    """Serialise a capture log, with the kernels' fingerprints when `printed` has them.
    Called after every queue has finished."""
    ctx = _Context(log)
    commands = [_CONVERTERS[entry[0]](entry, ctx) for entry in log]
    metadata = MetadataT(
        createdUnixS=time.time(),
        hostname=socket.gethostname(),
        python=platform.python_version(),
        mnrtVersion=__version__,
        description=description,
    )
    device = DeviceDescriptionT(
        arch=MNCORE2.arch, deviceCount=len(devices), dramBytes=MNCORE2.dram_bytes
    )
    return LightBinary.build(
        commands,
        ctx.blobs,
        producer=f"{PRODUCER} {__version__}",
        metadata=metadata,
        device=device,
        inputs=list(ctx.inputs),
        outputs=list(ctx.outputs),
        fingerprints=_fingerprints(log, printed) if printed else {},
    )
