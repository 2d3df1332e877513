"""Which rank replays what: the ownership rules of distributed replay, in one place.

A rank owns the logical devices its transport assigns it (`Transport.owner`, by position
among the binary's devices). It opens only those, and carries out only the commands of
their queues, buffers and programs; a copy with one end here and the other on another
rank is sent or received, tagged with the copy's id; an event recorded here that a queue
of another rank waits for is signalled to that rank. With one rank, everything is local
and the executor asks nothing of this.
"""

from __future__ import annotations

from ..format.fb.CommandUnion import CommandUnion as U
from .placement import logical_devices
from .plan import Plan
from .transport.base import Transport


class Ranks:
    """This rank's share of a plan."""

    def __init__(self, plan: Plan, transport: Transport) -> None:
        self.plan = plan
        self.transport = transport
        logical = logical_devices(plan)
        position = {index: i for i, index in enumerate(logical)}
        # captured device index -> the rank that owns it
        self.owner_of_index = {
            index: transport.owner(position[index], len(logical)) for index in logical
        }
        self.rank = transport.rank
        self.single = transport.size == 1

    def owner_of_device(self, device_gid: int) -> int:
        return self.owner_of_index[self.plan.device_index[device_gid]]

    def owner_of_buffer(self, buffer_gid: int) -> int:
        return self.owner_of_device(self.plan.buffers[buffer_gid].device)

    def local_buffer(self, buffer_gid: int) -> bool:
        return self.single or self.owner_of_buffer(buffer_gid) == self.rank

    def recording_rank(self, event_gid: int) -> int:
        return self.owner_of_device(self.plan.queue_device[self.plan.event_queue[event_gid]])

    def waiting_ranks(self, event_gid: int) -> list[int]:
        """The other ranks with a queue that waits for this event (each signalled once)."""
        if self.single:
            return []
        waiters = self.plan.event_waiters.get(event_gid, ())
        return sorted({self.owner_of_device(d) for d in waiters} - {self.rank})

    def device_of(self, kind: int, c) -> int:
        """The device gid a command belongs to: its own, its queue's or its buffer's."""
        device = getattr(c, "deviceId", 0)
        if device:
            return device
        queue = getattr(c, "queueId", 0)
        if queue:
            return self.plan.queue_device[queue]
        return self.plan.buffers[c.bufferId].device

    def remote_commands(self) -> set[int] | None:
        """Indices of the commands another rank carries out (None with one rank): those of
        its devices, except copies with an end here, which this rank sends or receives."""
        if self.single:
            return None
        skip = set()
        for index, command in enumerate(self.plan.binary.commands):
            c = command.cmd
            if self.owner_of_device(self.device_of(command.cmdType, c)) == self.rank:
                continue
            if command.cmdType == U.CopyBuffer and self.rank in (
                self.owner_of_buffer(c.srcId),
                self.owner_of_buffer(c.dstId),
            ):
                continue
            skip.add(index)
        return skip
