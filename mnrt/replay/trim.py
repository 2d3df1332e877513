"""A replayable slice of a binary (`mnrt trim FILE --commands a:b`).

The slice is commands a..b-1 preceded by a state snapshot: every object live at command a
(devices, queues, buffers, programs, device traces ready to replay), every live buffer's
contents at that point, which a replay of commands 0..a-1 gives, and the events recorded
before a that the slice waits for (recorded again once the snapshot is written).
Goldens and fingerprints of the slice's commands come along; the result is replayed
before it is handed back, so a slice that does not reproduce is never written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, MnrtError
from ..format import LightBinary
from ..format.edit import Editor
from ..format.fb.Command import CommandT
from ..format.fb.CommandUnion import CommandUnion as U
from ..format.fb.OpenQueue import OpenQueueT
from ..format.fb.RecordEvent import RecordEventT
from ..format.fb.WriteBuffer import WriteBufferT
from ..format.fingerprints import Fingerprint
from .executor import Executor
from .hazards import race_text, races
from .placement import place
from .plan import BUFFER, Plan, validate


class TrimError(InvalidArgumentError):
    """A slice that cannot be made replayable (it begins inside a device trace's capture)
    or that does not reproduce its own goldens."""


def parse_range(text: str, count: int) -> tuple[int, int]:
    """'a:b' (either side may be left out, negatives count from the end, as in Python)
    as a non-empty (start, stop) within `count` commands."""
    parts = text.split(":")
    if len(parts) != 2:
        raise InvalidArgumentError(f"--commands {text!r}: give a range as START:STOP, e.g. 10:20")
    try:
        start, stop, _ = slice(*(int(p) if p.strip() else None for p in parts)).indices(count)
    except ValueError:
        raise InvalidArgumentError(
            f"--commands {text!r}: START and STOP must be integers"
        ) from None
    if start >= stop:
        raise InvalidArgumentError(
            f"--commands {text!r} selects no command of the binary's {count}; give START < STOP"
        )
    return start, stop


@dataclass
class Live:
    """What is defined at some command: creation commands by id, and each device trace's
    commands (begin, enqueues, end) with whether it is still being captured. Traces released
    by then move to `released` (what their replays read still matters to what follows)."""

    creates: dict[int, int] = field(default_factory=dict)  # object id -> creating command
    traces: dict[int, list[int]] = field(default_factory=dict)
    released: dict[int, list[int]] = field(default_factory=dict)
    capturing: dict[int, int] = field(default_factory=dict)  # queue id -> trace id

    def follow(self, commands: Sequence[CommandT], stop: int) -> None:
        for i, c in enumerate(commands[:stop]):
            kind, cmd = c.cmdType, c.cmd
            if kind in _CREATES:
                self.creates[getattr(cmd, _CREATES[kind])] = i
            elif kind == U.DeallocateBuffer:
                self.creates.pop(cmd.bufferId, None)
            elif kind == U.BeginTraceCapture:
                self.traces[cmd.traceId] = [i]
                self.capturing[cmd.queueId] = cmd.traceId
            elif kind == U.EndTraceCapture:
                self.traces[cmd.traceId].append(i)
                self.capturing.pop(cmd.queueId, None)
            elif kind == U.ReleaseTrace:
                if cmd.traceId in self.traces:
                    self.released[cmd.traceId] = self.traces.pop(cmd.traceId)
                self.capturing = {q: t for q, t in self.capturing.items() if t != cmd.traceId}
            elif kind == U.EnqueueProgram and cmd.queueId in self.capturing:
                self.traces[self.capturing[cmd.queueId]].append(i)

    def open_capture(self) -> tuple[int, int] | None:
        """(trace id, the command that began it) of a device trace still being captured,
        if one is: no slice may begin or end inside one."""
        for trace in self.capturing.values():
            return trace, self.traces[trace][0]
        return None


_CREATES = {
    U.OpenDevice: "deviceId",
    U.OpenQueue: "queueId",
    U.CreateBuffer: "bufferId",
    U.CreateProgram: "programId",
}


def referenced_ids(cmd: Any) -> set[int]:
    """Every object id a command body names: any field called ...Id or ...Ids (so command
    types added later are covered by their field names)."""
    ids: set[int] = set()
    for name, value in vars(cmd).items():
        if name.endswith("Id") and isinstance(value, (int, np.integer)) and value:
            ids.add(int(value))
        elif name.endswith("Ids") and value is not None:
            ids.update(int(v) for v in value)
    return ids


def _closure(commands: Sequence[CommandT], wanted: set[int], live: Live) -> set[int]:
    """`wanted` plus what defining them needs (a queue's device, a buffer's device...)."""
    todo, seen = list(wanted), set()
    while todo:
        gid = todo.pop()
        if gid in seen:
            continue
        seen.add(gid)
        if gid in live.creates:
            todo.extend(referenced_ids(commands[live.creates[gid]].cmd) - {gid})
        for i in live.traces.get(gid, ()):
            todo.extend(referenced_ids(commands[i].cmd))
    return seen


def snapshot(plan: Plan, stop: int, buffers: set[int]) -> dict[int, np.ndarray]:
    """The stored bits of `buffers` once commands 0..stop-1 have run."""

    executor = Executor(plan, place(plan, "auto", None, None), verify=False)
    try:
        executor.run(stop)
        return {gid: np.array(executor.tables[BUFFER][gid].peek()) for gid in buffers}
    finally:
        executor.close()


def trim(binary: LightBinary, start: int, stop: int, verify: bool = True) -> LightBinary:
    """Commands start..stop-1 of `binary` after a state snapshot (see the module doc);
    with `verify`, replayed first: one that fails raises TrimError."""
    plan = validate(binary, blobs=False)
    commands = binary.commands
    live = Live()
    live.follow(commands, start)
    if (capture := live.open_capture()) is not None:
        raise TrimError(
            f"command {start} is inside the capture of device trace {capture[0]} (begun at "
            f"command {capture[1]}); start the slice before or after it"
        )
    at_stop = Live()
    at_stop.follow(commands, stop)
    if (capture := at_stop.open_capture()) is not None:
        raise TrimError(
            f"the slice ends inside the capture of device trace {capture[0]} (begun at "
            f"command {capture[1]}, still capturing at command {stop - 1}); end the slice "
            "before the capture begins or after it ends"
        )
    body = commands[start:stop]
    # Every live object, as a GFXReconstruct trim snapshots all state at its first frame:
    # the slice may be edited or extended later (`mnrt optimize` drops what it never uses).
    used = _closure(commands, set(live.creates) | set(live.traces), live)
    editor = Editor(binary)
    out: list[CommandT] = []
    kept = sorted(i for gid, i in live.creates.items() if gid in used)
    out += [commands[i] for i in kept]
    buffers = {gid for gid, i in live.creates.items()
               if gid in used and commands[i].cmdType == U.CreateBuffer}  # fmt: skip
    queue_of = _queue_per_device(commands, kept)
    # A device whose buffers are live before it has a queue (the capture logs a queue when
    # first used) gets a queue of its own for its snapshot, under an id the binary leaves free.
    fresh = max((g for c in commands for g in referenced_ids(c.cmd)), default=0) + 1
    for gid in sorted(buffers):
        device = plan.buffers[gid].device
        if device not in queue_of:
            queue_of[device] = fresh
            out.append(CommandT(U.OpenQueue, OpenQueueT(fresh, device, 0)))
            fresh += 1
    for gid, bits in snapshot(plan, start, buffers).items():
        queue = queue_of[plan.buffers[gid].device]
        write = WriteBufferT(queue, gid, editor.add_blob(bits), True)
        out.append(CommandT(U.WriteBuffer, write))
    for trace in sorted(t for t in live.traces if t in used):
        out += [commands[i] for i in live.traces[trace]]
    out += _events_before(plan, body, start)
    first = len(out)
    out += list(body)
    prints = [
        Fingerprint(f.command - start + first, f.kernel, f.output, f.stats)
        for f in binary.fingerprints
        if start <= f.command < stop
    ]
    result = editor.build(out, fingerprints=prints)
    if verify:
        check_replays(result, f"the slice {start}:{stop}", TrimError, plan)
    return result


def _events_before(plan: Plan, body: Sequence[CommandT], start: int) -> list[CommandT]:
    """The slice's waits on events recorded before it, as records on their queues once the
    snapshot is written: what they waited for has run by then (it is in the snapshot)."""
    events = dict.fromkeys(c.cmd.eventId for c in body if c.cmdType == U.WaitEvent)
    return [
        CommandT(U.RecordEvent, RecordEventT(plan.event_queue[e], e))
        for e in events
        if plan.event_record[e] < start
    ]


def _queue_per_device(commands: Sequence[CommandT], kept: list[int]) -> dict[int, int]:
    """A kept queue of each device (its first), to write snapshots with."""
    out: dict[int, int] = {}
    for i in kept:
        c = commands[i]
        if c.cmdType == U.OpenQueue:
            out.setdefault(c.cmd.deviceId, c.cmd.queueId)
    return out


def check_replays(
    binary: LightBinary, what: str, error: type[MnrtError], source: Plan | None = None
) -> None:
    """Replay `binary` and raise `error` unless it runs and passes its goldens (a binary
    with none passes when it runs). A failure names a race of `binary`, else one of
    `source`, the binary it was made from: a racy source's replay may not reach the state
    its capture recorded, whatever is made of it."""
    from . import replay

    try:
        report = replay(binary)
    except MnrtError as e:
        raise error(f"{what} does not replay: {e}") from None
    if not report.passed:
        failed = ", ".join(c.name for c in report.checks if not c.passed)
        race = report.race
        if race is None and source is not None and (found := races(source, limit=2)):
            race = race_text(source, found, "the original binary's")
        why = f"; {race}" if race is not None else ""
        raise error(f"{what} does not reproduce its goldens on replay ({failed} differ){why}")
