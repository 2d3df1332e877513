"""Races in a binary: two commands of different queues that touch one buffer, at least one
of them writing it, with nothing ordering them. Queues run side by side (a replay gives
each its own thread, as the hardware runs them), so such a pair runs in either order and
the binary's results may differ from run to run: a golden that fails only sometimes, a
kernel `--locate` calls wrong that is not. The check reads the commands alone, as Vulkan's
synchronisation validation or compute-sanitizer's racecheck would, but statically.

What orders two commands (happens-before, kept as one vector clock per queue):
- one queue runs its commands in order;
- a WaitEvent runs after everything before the RecordEvent it waits for;
- the host waits for a queue at its blocking commands and Finish, and for every queue of a
  device at DeallocateBuffer (which waits as cudaFree does); what it enqueues afterwards,
  on any queue, runs after what it waited for.

A command's accesses: a program (or a replayed device trace) reads its kernels' inputs and
writes their outputs; a copy reads its source and writes its destination; a write writes
its buffer, a read or a golden check reads it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass

from ..format.fb.CommandUnion import CommandUnion as U
from .plan import Plan, program_buffers

_ON_A_QUEUE = (
    U.WriteBuffer, U.ReadBuffer, U.EnqueueProgram, U.ReplayTrace, U.GoldenCheck,
    U.CopyBuffer, U.RecordEvent, U.WaitEvent, U.Finish,
)  # fmt: skip
_KIND = {getattr(U, name): name for name in vars(U) if not name.startswith("_")}


@dataclass(frozen=True)
class Race:
    """Commands `first` and `second` (indices, first < second) of two queues touch buffer
    `buffer` (one writing it) and nothing orders them."""

    buffer: int
    buffer_name: str
    first: int
    second: int
    first_writes: bool
    second_writes: bool

    def describe(self, plan: Plan) -> str:
        def side(index: int, writes: bool) -> str:
            c = plan.binary.commands[index]
            what = _KIND.get(c.cmdType, "command")
            program = getattr(c.cmd, "programId", 0)
            if program in plan.programs:
                what += f" '{plan.programs[program].name}'"
            queue = c.cmd.queueId
            device = plan.device_index[plan.queue_device[queue]]
            return (
                f"command {index} ({what} on device {device} queue "
                f"{plan.queue_index[queue]}) {'writes' if writes else 'reads'} it"
            )

        return (
            f"buffer '{self.buffer_name}': {side(self.first, self.first_writes)} and "
            f"{side(self.second, self.second_writes)}, and no event orders them"
        )

    def to_dict(self) -> dict:
        return asdict(self)


RACES_SHOWN = 10  # what `races` finds unless asked for fewer: the first few say enough


def races(plan: Plan, limit: int = RACES_SHOWN) -> list[Race]:
    """The first `limit` races of the binary, in the order of their second command; one
    per pair of commands and buffer."""
    found: list[Race] = []
    for race in _races(plan):
        found.append(race)
        if len(found) == limit:
            break
    return found


def race_text(plan: Plan, found: list[Race], whose: str = "its") -> str:
    """What a user is told of a binary's races (`found`, the first of them): the first,
    and how to order it; `whose` names the binary."""
    first = found[0]
    more = " (and more)" if len(found) > 1 else ""
    return (
        f"{whose} queues race, so {whose} results may differ from run to run: "
        f"{first.describe(plan)}{more}; record an event on the queue "
        f"of command {first.first} after it and wait for that event on the queue of command "
        f"{first.second} before it (see `mnrt verify`)"
    )


class _Clocks:
    """Vector clocks: what each queue (and the host) knows to have run, as a count of
    commands per queue."""

    def __init__(self) -> None:
        self.slot: dict[int, int] = {}  # queue gid -> its position in a clock
        self.queue: dict[int, list[int]] = {}  # queue gid -> its clock
        self.host: list[int] = []

    def of(self, queue: int) -> list[int]:
        if queue not in self.slot:
            self.slot[queue] = len(self.slot)
            for clock in (*self.queue.values(), self.host):
                clock.append(0)
            self.queue[queue] = [0] * len(self.slot)
        return self.queue[queue]

    def tick(self, queue: int) -> list[int]:
        """A command enqueued on `queue`: after what the host has waited for."""
        clock = self.of(queue)
        _join(clock, self.host)
        clock[self.slot[queue]] += 1
        return clock


def _join(into: list[int], other: list[int]) -> None:
    for i, value in enumerate(other):
        if value > into[i]:
            into[i] = value


def _races(plan: Plan) -> Iterator[Race]:
    commands = plan.binary.commands
    clocks = _Clocks()
    events: dict[int, list[int]] = {}
    capturing: dict[int, int] = {}  # queue gid -> trace gid it records
    traced: dict[int, list[tuple[set[int], set[int]]]] = {}  # trace gid -> its accesses
    # buffer gid -> (queue, its count, command) of the last write, and of reads since
    last_write: dict[int, tuple[int, int, int]] = {}
    reads: dict[int, dict[int, tuple[int, int]]] = {}
    for index, command in enumerate(commands):
        kind, c = command.cmdType, command.cmd
        if kind == U.BeginTraceCapture:
            capturing[c.queueId] = c.traceId
            traced[c.traceId] = []
            continue
        if kind == U.EndTraceCapture:
            capturing.pop(c.queueId, None)
            continue
        if kind == U.DeallocateBuffer:  # waits for every queue of the buffer's device
            device = plan.buffers[c.bufferId].device
            for queue, clock in clocks.queue.items():
                if plan.queue_device.get(queue) == device:
                    _join(clocks.host, clock)
            last_write.pop(c.bufferId, None)
            reads.pop(c.bufferId, None)
            continue
        if kind not in _ON_A_QUEUE:
            continue
        if kind == U.EnqueueProgram and c.queueId in capturing:  # recorded, not run
            kernels = program_buffers(plan, c.programId, c.bufferIds)
            traced[capturing[c.queueId]].append(_union(kernels))
            continue
        queue = c.queueId
        clock = clocks.tick(queue)
        read, written = _accesses(plan, kind, c, traced)
        if kind == U.RecordEvent:
            events[c.eventId] = list(clock)
        elif kind == U.WaitEvent and c.eventId in events:
            _join(clock, events[c.eventId])
        for gid in sorted(read | written):
            for first, wrote in _unordered(
                gid, queue, clock, clocks, gid in written, last_write, reads
            ):
                yield Race(gid, plan.buffers[gid].name, first, index, wrote, gid in written)
        mine = (clock[clocks.slot[queue]], index)
        for gid in written:
            last_write[gid] = (queue, *mine)
            reads[gid] = {}
        for gid in read - written:
            reads.setdefault(gid, {})[queue] = mine
        if kind == U.Finish or getattr(c, "blocking", False):
            _join(clocks.host, clock)


def _unordered(gid, queue, clock, clocks, writes, last_write, reads) -> list[tuple[int, bool]]:
    """The earlier accesses to buffer `gid` that race with a command on `queue` at `clock`
    (which writes it, or reads it): (their command, whether it wrote), in command order."""
    earlier: list[tuple[int, bool]] = []
    write = last_write.get(gid)
    if write is not None and write[0] != queue and write[1] > clock[clocks.slot[write[0]]]:
        earlier.append((write[2], True))
    if writes:
        for other, (count, command) in reads.get(gid, {}).items():
            if other != queue and count > clock[clocks.slot[other]]:
                earlier.append((command, False))
    return sorted(earlier)


def _union(kernels: list[tuple[set[int], set[int]]]) -> tuple[set[int], set[int]]:
    read: set[int] = set()
    written: set[int] = set()
    for r, w in kernels:
        read |= r
        written |= w
    return read, written


def _accesses(plan: Plan, kind: int, c, traced) -> tuple[set[int], set[int]]:
    """(buffers read, buffers written) by one command run on its queue."""
    if kind == U.EnqueueProgram:
        return _union(program_buffers(plan, c.programId, c.bufferIds))
    if kind == U.ReplayTrace:
        return _union(traced.get(c.traceId, []))
    if kind == U.CopyBuffer:
        return {c.srcId}, {c.dstId}
    if kind == U.WriteBuffer:
        return set(), {c.bufferId}
    if kind in (U.ReadBuffer, U.GoldenCheck):
        return {c.bufferId}, set()
    return set(), set()
