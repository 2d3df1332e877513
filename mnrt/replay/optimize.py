"""A smaller binary that replays the same (`mnrt optimize FILE -o OUT`).

Three steps: dead commands go (writes and copies whose data nothing later reads, programs
whose outputs nothing later needs, device traces never replayed, then the buffers and programs
no kept command uses); identical programs of one device are created once; payloads are
stored once and recompressed at zstd's strong level, or kept as they were where that is
smaller (a stronger level is not always). Reads and golden checks are what the binary is
for, so they and everything they depend on stay. The result is replayed before it is
handed back and must pass its goldens.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass

from ..format import LightBinary
from ..format.edit import STRONG_LEVEL, Editor
from ..format.fb.Command import CommandT
from ..format.fb.CommandUnion import CommandUnion as U
from ..format.fingerprints import Fingerprint
from .diff import plain
from .plan import Plan, program_buffers, validate
from .trim import Live, TrimError, check_replays, referenced_ids


class OptimizeError(TrimError):
    """The optimised binary does not reproduce the original's goldens (a bug: report it)."""


@dataclass
class OptimizeStats:
    commands: tuple[int, int]  # before, after
    bytes: tuple[int, int]
    buffers_dropped: int
    programs_merged: int

    def to_dict(self) -> dict:
        return {
            "commands": list(self.commands),
            "bytes": list(self.bytes),
            "buffers_dropped": self.buffers_dropped,
            "programs_merged": self.programs_merged,
        }


def live_commands(binary: LightBinary, plan: Plan) -> list[int]:
    """Indices of the commands a replay's reads and goldens depend on (see module doc)."""
    commands = binary.commands
    live = Live()
    live.follow(commands, len(commands))
    traces = {**live.released, **live.traces}
    in_trace = {i for ids in traces.values() for i in ids}
    trace_of = {i: t for t, ids in traces.items() for i in ids}
    needed: set[int] = set()
    keep: set[int] = set()
    replayed: set[int] = set()
    for i in range(len(commands) - 1, -1, -1):
        kind, cmd = commands[i].cmdType, commands[i].cmd
        if i in in_trace:
            if trace_of[i] in replayed:
                keep.add(i)
        elif kind in (U.ReadBuffer, U.GoldenCheck):
            keep.add(i)
            needed.add(cmd.bufferId)
        elif kind == U.WriteBuffer:
            if cmd.bufferId in needed:
                keep.add(i)
                needed.discard(cmd.bufferId)
        elif kind == U.EnqueueProgram:
            kernels = program_buffers(plan, cmd.programId, cmd.bufferIds)
            if any(w & needed for _, w in kernels):
                keep.add(i)
                for reads, writes in reversed(kernels):
                    needed -= writes - reads
                    needed |= reads
        elif kind == U.CopyBuffer:  # writes all of dst from src
            if cmd.dstId in needed:
                keep.add(i)
                needed.discard(cmd.dstId)
                needed.add(cmd.srcId)
        elif kind in (U.RecordEvent, U.WaitEvent):
            keep.add(i)  # order between queues (cheap), and a kept wait needs its record
        elif kind == U.ReplayTrace:
            keep.add(i)
            replayed.add(cmd.traceId)
            for j in traces.get(cmd.traceId, ()):
                needed |= referenced_ids(commands[j].cmd)
        elif kind in (U.Finish, U.OpenDevice, U.OpenQueue):
            keep.add(i)
        elif kind in (U.CreateBuffer, U.DeallocateBuffer, U.CreateProgram, U.ReleaseTrace):
            pass  # kept below if a kept command uses what they define
        else:  # a command type this pass does not know: kept, and all it names needed
            keep.add(i)
            needed |= referenced_ids(cmd)
    used = set().union(*(referenced_ids(commands[i].cmd) for i in keep))
    defines = {U.CreateBuffer: "bufferId", U.DeallocateBuffer: "bufferId",
               U.CreateProgram: "programId"}  # fmt: skip
    for i, c in enumerate(commands):
        if (c.cmdType in defines and getattr(c.cmd, defines[c.cmdType]) in used) or (
            c.cmdType == U.ReleaseTrace and c.cmd.traceId in replayed
        ):
            keep.add(i)
    return sorted(keep)


def _merge_programs(commands: list[CommandT]) -> tuple[list[CommandT], list[int], int]:
    """Identical CreatePrograms of one device made once; enqueues use the first one.
    Returns the commands, the new index of each given command (of a dropped one, of the
    next kept one) and how many programs were merged."""
    first: dict[str, int] = {}
    alias: dict[int, int] = {}
    out: list[CommandT] = []
    index = []
    for c in commands:
        index.append(len(out))
        if c.cmdType == U.CreateProgram:
            key = json.dumps([c.cmd.deviceId, plain(c.cmd.program)], sort_keys=True)
            if key in first:
                alias[c.cmd.programId] = first[key]
                continue
            first[key] = c.cmd.programId
        elif c.cmdType == U.EnqueueProgram and c.cmd.programId in alias:
            body = copy.copy(c.cmd)
            body.programId = alias[c.cmd.programId]
            c = CommandT(c.cmdType, body)
        out.append(c)
    return out, index, len(alias)


def optimize(binary: LightBinary, verify: bool = True) -> tuple[LightBinary, OptimizeStats]:
    """The optimised binary and what changed; with `verify` it is replayed first and must
    pass its goldens (OptimizeError otherwise)."""
    plan = validate(binary)
    keep = live_commands(binary, plan)
    commands, index, merged = _merge_programs([binary.commands[i] for i in keep])
    new_index = {old: index[k] for k, old in enumerate(keep)}
    prints = [
        Fingerprint(new_index[f.command], f.kernel, f.output, f.stats)
        for f in binary.fingerprints
        if f.command in new_index
    ]
    result = Editor(binary).build(commands, fingerprints=prints, level=STRONG_LEVEL)
    if verify:
        check_replays(result, "the optimised binary", OptimizeError, plan)
    before = {c.cmd.bufferId for c in binary.commands if c.cmdType == U.CreateBuffer}
    after = {c.cmd.bufferId for c in commands if c.cmdType == U.CreateBuffer}
    stats = OptimizeStats(
        (len(binary), len(result)),
        (binary.file_size, result.file_size),
        len(before - after),
        merged,
    )
    return result, stats
