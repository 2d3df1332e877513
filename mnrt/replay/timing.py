"""A replay's queue commands as modelled-timeline spans: what the report's `modelled` and
`modelled_as_run` and the profile's modelled tracks are all drawn from, so they agree.

Spans sit on the devices and queues the binary captured (logical devices): each queue's
commands in the order they ran, a wait listing the record of its event, a copy between
two devices carrying its (src, dst) devices and priced for them (a replay that folded them
onto one device ran a local copy instead). `as_run` folds the spans onto the devices the
replay ran on (`mnrt.host.timeline.fold`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..device.spec import MNCORE2, DeviceSpec
from ..host.timeline import Span, Timeline, fold, schedule
from .plan import BUFFER, DEVICE, QUEUE

if TYPE_CHECKING:
    from ..host.commands import Command
    from .executor import Executor

# A queue command's kind -> the timeline's name for it (the rest keep theirs).
SPAN_KINDS = {"write_buffer": "write", "read_buffer": "read", "replay_trace": "trace"}


@dataclass(frozen=True)
class ReplaySpans:
    """The spans of one replay and, by span key, the queue (global id) and command each
    stands for."""

    spans: list[Span]
    queue_of: Mapping[int, int]
    command_of: Mapping[int, Command]
    spec: DeviceSpec = MNCORE2

    def modelled(self) -> Timeline:
        """The timeline of the captured topology."""
        return schedule(self.spans, self.spec)

    def as_run(self, placement: Mapping[int, int]) -> Timeline:
        """The timeline of the same work on `placement` (captured index -> device index)."""
        return schedule(fold(self.spans, placement, self.spec), self.spec)


def replay_spans(executor: Executor) -> ReplaySpans:
    """Every queue command of `executor` that finished (so has a modelled cost). Its queues
    must have kept every command (as a profiling executor's do)."""
    plan = executor.plan
    logical = {gid: plan.device_index[gid] for gid in executor.tables[DEVICE]}
    device_of_buffer = {
        id(buf): logical[plan.buffers[gid].device] for gid, buf in executor.tables[BUFFER].items()
    }
    keys = itertools.count()
    placed: list[tuple[int, int, int, Command]] = []  # (key, queue gid, device, command)
    recorded: dict[int, int] = {}  # event id -> key of its record
    for queue_id, q in executor.tables[QUEUE].items():
        device = logical[plan.queue_device[queue_id]]
        for cmd in q.history:
            if cmd.modelled is None:  # failed or skipped: it took no modelled time
                continue
            key = next(keys)
            placed.append((key, queue_id, device, cmd))
            if cmd.kind == "record_event":
                recorded[cmd.event.id] = key
    spec = next((d.spec for d in executor.tables[DEVICE].values()), MNCORE2)
    spans = []
    for key, queue_id, device, cmd in placed:
        after: tuple[int, ...] = ()
        link = None
        nbytes = 0
        cost = cmd.modelled
        if cmd.kind == "wait_event" and cmd.event.id in recorded:
            after = (recorded[cmd.event.id],)
        elif cmd.kind == "copy":
            src, dst = device_of_buffer[id(cmd.src)], device_of_buffer[id(cmd.dst)]
            nbytes = cmd.dst.nbytes
            cost = spec.copy_cost(src, dst, nbytes)
            link = None if src == dst else (src, dst)
        spans.append(
            Span(
                key=key,
                device=device,
                queue=plan.queue_index[queue_id],
                kind=SPAN_KINDS.get(cmd.kind, cmd.kind),
                name=cmd.label,
                duration_s=cost.time_s,
                energy_j=cost.energy_j,
                after=after,
                link=link,
                nbytes=nbytes,
            )
        )
    return ReplaySpans(
        spans,
        {key: queue_id for key, queue_id, _, _ in placed},
        {key: cmd for key, _, _, cmd in placed},
        spec,
    )
