"""The report's modelled timelines: the binary's queue commands as spans (host/timeline.py),
scheduled on the captured topology (`modelled`) and on the placement that ran
(`modelled_as_run`, the same spans folded onto the runner devices).

Spans are in logical terms (captured device and queue indices, keyed by command index), so
every rank of a distributed replay builds its own and rank 0 schedules them together. A
command's cost is what the device modelled when it ran; a copy's is priced for its logical
ends (the link between two captured devices, even when the replay folded them onto one).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from ..device.cost import Modelled
from ..device.spec import MNCORE2, DeviceSpec
from ..format.fb.CommandUnion import CommandUnion as U
from ..host.commands import DONE, Command
from ..host.timeline import Span, Timeline, fold, schedule
from .plan import Plan

SPAN_KINDS = {
    U.WriteBuffer: "write",
    U.ReadBuffer: "read",
    U.GoldenCheck: "read",
    U.EnqueueProgram: "program",
    U.ReplayTrace: "trace",
    U.CopyBuffer: "copy",
    U.RecordEvent: "record_event",
    U.WaitEvent: "wait_event",
}


class Ran(NamedTuple):
    """What a span needs of a host command that ran: a report keeps these rather than the
    commands, which hold their buffers' (and so the closed devices') memory."""

    label: str
    status: str
    modelled: Modelled | None


def ran(submitted: Iterable[tuple[int, int, Command | None]]) -> list[tuple[int, int, Ran | None]]:
    return [
        (index, qid, None if cmd is None else Ran(cmd.label, cmd.status, cmd.modelled))
        for index, qid, cmd in submitted
    ]


def spans(
    plan: Plan,
    submitted: Iterable[tuple[int, int, Command | Ran | None]],
    spec: DeviceSpec = MNCORE2,
) -> list[Span]:
    """A span per queue command this rank issued: (command index, queue id, the host
    command it put on the queue or what `ran` kept of it, or None when the rank did the
    work itself)."""
    out = []
    commands = plan.binary.commands
    for index, qid, cmd in submitted:
        command = commands[index]
        c = command.cmd
        device = plan.device_index[plan.queue_device[qid]]
        kind = SPAN_KINDS[command.cmdType]
        name = cmd.label if cmd is not None else kind
        after: tuple[int, ...] = ()
        link = None
        nbytes = 0
        if command.cmdType == U.CopyBuffer:
            src, dst = plan.buffers[c.srcId], plan.buffers[c.dstId]
            ends = (plan.device_index[src.device], plan.device_index[dst.device])
            nbytes = src.nbytes
            cost = spec.copy_cost(ends[0], ends[1], nbytes)
            time_s, energy_j = cost.time_s, cost.energy_j
            link = ends if ends[0] != ends[1] else None
            if cmd is None:
                name = f"copy_buffer '{src.name}' -> '{dst.name}'"
        else:
            done = cmd is not None and cmd.status == DONE and cmd.modelled is not None
            time_s = cmd.modelled.time_s if done else 0.0
            energy_j = cmd.modelled.energy_j if done else 0.0
            if command.cmdType == U.WaitEvent:
                after = (plan.event_record[c.eventId],)
                if cmd is None:
                    name = f"wait_event {c.eventId}"
        out.append(
            Span(
                key=index,
                device=device,
                queue=plan.queue_index[qid],
                kind=kind,
                name=name,
                duration_s=time_s,
                energy_j=energy_j,
                after=after,
                link=link,
                nbytes=nbytes,
            )
        )
    return out


def timelines(
    all_spans: list[Span], placed: Mapping[int, int], spec: DeviceSpec = MNCORE2
) -> tuple[Timeline, Timeline]:
    """The captured topology's timeline and the placement's (`placed`: captured device
    index -> runner device index) for the same spans: one and the same when every device
    ran on the index it was captured on."""
    ordered = sorted(all_spans, key=lambda s: s.key)
    captured = schedule(ordered, spec)
    if all(placed.get(s.device, s.device) == s.device for s in ordered):
        return captured, captured
    return captured, schedule(fold(ordered, placed, spec), spec)
