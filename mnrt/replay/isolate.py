"""The first step of `mnrt reduce` (reduce.py): the kernel a failure names, alone.

A binary of that kernel only, its operands written with what they held just before it ran
in the failing replay, and its fingerprint: the kernels before it matched the capture bit
for bit, so this is the failure itself. It opens as many devices as the binary did, the
kernel on the first: a replay gives BLAS the share of the cores its devices give each
(Executor.run), and a product rounds differently on another share. A kernel whose
operands are slot views gets buffers of their shapes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import MnrtError
from ..format import LightBinary
from ..format.edit import Editor
from ..format.fb.BufferDesc import BufferDescT
from ..format.fb.Command import CommandT
from ..format.fb.CommandUnion import CommandUnion as U
from ..format.fb.CreateBuffer import CreateBufferT
from ..format.fb.CreateProgram import CreateProgramT
from ..format.fb.EnqueueProgram import EnqueueProgramT
from ..format.fb.OpenDevice import OpenDeviceT
from ..format.fb.OpenQueue import OpenQueueT
from ..format.fb.ProgramDesc import ProgramDescT
from ..format.fb.ReadBuffer import ReadBufferT
from ..format.fb.WriteBuffer import WriteBufferT
from ..format.fingerprints import Fingerprint
from ..format.text import decoded
from ..host.commands import KernelWatch
from .executor import Executor
from .locate import KernelSite
from .placement import logical_devices, place
from .plan import validate

_NAN = float("nan")


class _Snapshot:
    """The KernelWatch factory of a replay that copies one kernel's operands just before
    it runs (the failing replay's own state at that point)."""

    def __init__(self, command: int, kernel: int) -> None:
        self.command, self.kernel = command, kernel
        self.ins: list[Any] = []  # the buffers bound to its inputs, then its outputs
        self.outs: list[Any] = []
        self.bits: dict[int, np.ndarray] | None = None  # id(buffer) -> stored bits

    def __call__(self, command: int) -> _SnapshotWatch | None:
        return _SnapshotWatch(self) if command == self.command else None


class _SnapshotWatch(KernelWatch):
    def __init__(self, owner: _Snapshot) -> None:
        self.owner, self.kernel = owner, 0

    def before(self, step: Any) -> None:
        if self.kernel == self.owner.kernel:
            o = self.owner
            o.ins, o.outs = list(step.ins), list(step.outs)
            o.bits = {id(b): np.array(b.peek()) for b in (*step.ins, *step.outs)}

    def after(self, step: Any, results: Any) -> None:
        self.kernel += 1


def isolate(binary: LightBinary, site: KernelSite) -> LightBinary | None:
    """A binary of the kernel at `site` alone, on what its operands held just before it
    ran in a replay of `binary` (see the module doc), with its fingerprint; None where
    that is no valid binary."""

    plan = validate(binary, blobs=False)
    snap = _Snapshot(site.command, site.kernel)
    executor = Executor(plan, place(plan, "auto", None, None), verify=False, watch=snap)
    try:
        executor.run(site.command + 1)
    except MnrtError:
        pass  # the kernel may be the one that fails: its operands were copied before
    finally:
        executor.close()
    desc = _kernel_desc(binary, plan, site.command, site.kernel)
    if snap.bits is None or desc is None:
        return None
    editor = Editor(binary)
    dev, queue, prog = 1, 2, 3
    commands = [CommandT(U.OpenDevice, OpenDeviceT(dev, 0)),
                CommandT(U.OpenQueue, OpenQueueT(queue, dev, 0))]  # fmt: skip
    ids: dict[int, int] = {}
    for buf in (*snap.ins, *snap.outs):
        if id(buf) not in ids:
            gid = ids[id(buf)] = 4 + len(ids)
            shape = BufferDescT(shape=list(buf.shape), dtype=buf.dtype.code, name=buf.name)
            commands.append(CommandT(U.CreateBuffer, CreateBufferT(gid, dev, shape)))
    for index in range(1, len(logical_devices(plan))):  # see the module doc
        commands.append(CommandT(U.OpenDevice, OpenDeviceT(4 + len(ids) + index, index)))
    for key in dict.fromkeys(id(b) for b in snap.ins):  # what it reads, in-place outputs too
        write = WriteBufferT(queue, ids[key], editor.add_blob(snap.bits[key]), True)
        commands.append(CommandT(U.WriteBuffer, write))
    program = ProgramDescT(name=site.program, kernels=[desc])
    commands.append(CommandT(U.CreateProgram, CreateProgramT(prog, dev, program)))
    inputs, outputs = ([decoded(n) for n in names or ()] for names in (desc.inputs, desc.outputs))
    bound = {**dict(zip(inputs, snap.ins)), **dict(zip(outputs, snap.outs))}
    bound_names = [*inputs, *outputs]
    enqueue = len(commands)
    buffers = [ids[id(bound[s])] for s in dict.fromkeys(bound_names)]
    commands.append(CommandT(U.EnqueueProgram, EnqueueProgramT(queue, prog, buffers, False)))
    for buf in snap.outs:
        read = ReadBufferT(queue, ids[id(buf)], True, 0, _NAN, _NAN)
        commands.append(CommandT(U.ReadBuffer, read))
    prints = [
        Fingerprint(enqueue, 0, f.output, f.stats)
        for f in binary.fingerprints
        if (f.command, f.kernel) == (site.command, site.kernel)
    ]
    result = editor.build(commands, fingerprints=prints)
    try:
        validate(result)
    except MnrtError:
        return None
    return result


def _kernel_desc(binary: LightBinary, plan: Any, command: int, kernel: int) -> Any:
    """The stored KernelDesc of the `kernel`-th kernel command `command` ran, or None."""
    c = binary.commands[command]
    if c.cmdType == U.EnqueueProgram:
        pids = [c.cmd.programId]
    else:
        pids = plan.trace_programs.get(c.cmd.traceId, [])
    creates = {x.cmd.programId: x.cmd.program for x in binary.commands
               if x.cmdType == U.CreateProgram}  # fmt: skip
    for pid in pids:
        kernels = creates[pid].kernels
        if kernel < len(kernels):
            return kernels[kernel]
        kernel -= len(kernels)
    return None
