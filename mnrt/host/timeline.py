"""The modelled timeline of work on several devices: when each queue command would start and
end on MN-Core 2 boards, given its queue, the commands it waits for and the link.

Pure (spans in, times out; no threads, no devices), so a replay, the compiler's pipeline
planner and a test all ask the same question the same way. The rules:

- every queue is a timeline: a span starts no earlier than the one enqueued before it on
  the same (device, queue) ended;
- nor before every span in its `after` ended (an event it waits on, a copy it needs);
- a device's compute (`program`, `trace` spans) runs one at a time whichever queue
  enqueued it, as one device has one PE array; copies, host transfers and event commands
  run on DMA engines and overlap compute;
- a copy between devices occupies every link direction on its route
  (`LinkSpec.route`) for its whole time, so copies that share one (two copies out of one
  board, two copies through one switch uplink) take turns; so does a host transfer, on
  the link directions between the host and its device (`LinkSpec.host_route`): writes to
  two boards behind one switch, or a write beside a copy into the same board, take turns.

Spans are placed greedily: of the spans whose predecessors are placed, the one that can
start first goes next (ties in enqueue order), the list scheduling a hardware queue does.
A device's busy time is the time at least one of its queues runs a span; its energy is that
of its spans (the work, as the single-device report counts it) plus its static power while
idle (`idle_energy_j`): a board draws it for the whole run, and a pipeline's bubbles cost
energy as well as time. The bubble fraction is the idle share of devices x makespan, over
the devices with at least one span.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import NamedTuple

from ..device.spec import MNCORE2, DeviceSpec
from ..errors import InvalidArgumentError

# Span kinds that occupy their device's PE array (a queue command's `kind` names a device
# trace's replay "replay_trace").
COMPUTE_KINDS = frozenset({"program", "trace", "replay_trace"})
# Span kinds that move bytes between the host and their device.
HOST_KINDS = frozenset({"write", "read"})


@dataclass(frozen=True)
class Span:
    """One queue command as the timeline sees it: where it runs, what it costs and what it
    must wait for."""

    key: int  # unique in the run
    device: int  # logical device index
    queue: int  # queue index on that device
    kind: str  # "program" | "write" | "read" | "copy" | "record_event" | "wait_event" | "trace"
    name: str
    duration_s: float
    energy_j: float
    after: tuple[int, ...] = ()  # keys it must start after, besides its queue predecessor
    link: tuple[int, int] | None = None  # (src, dst) devices of a cross-device copy
    nbytes: int = 0


class DeviceUsage(NamedTuple):
    """One device's share of a timeline: `energy_j` holds `idle_energy_j`, the static power
    it draws between its spans."""

    index: int
    busy_s: float
    energy_j: float
    idle_energy_j: float = 0.0


class Flow(NamedTuple):
    """A dependency between two spans: `kind` is "event" when `from_key` records an event
    that `to_key` waits on, else "after"."""

    from_key: int
    to_key: int
    kind: str


@dataclass(frozen=True)
class Timeline:
    """Where `schedule` placed every span. Times are seconds from the first span's start."""

    spans: tuple[Span, ...]
    start_s: Mapping[int, float]
    end_s: Mapping[int, float]
    makespan_s: float
    energy_j: float
    bubble_fraction: float
    devices: list[DeviceUsage] = field(default_factory=list)
    flows: list[Flow] = field(default_factory=list)

    @property
    def idle_energy_j(self) -> float:
        """What the devices draw while idle, which `energy_j` holds (see DeviceUsage)."""
        return sum(d.idle_energy_j for d in self.devices)

    def to_dict(self) -> dict:
        """The report's `modelled` (DESIGN.md section 11)."""
        return {
            "makespan_s": self.makespan_s,
            "energy_j": self.energy_j,
            "idle_energy_j": self.idle_energy_j,
            "bubble_fraction": self.bubble_fraction,
            "devices": [d._asdict() for d in self.devices],
        }


def schedule(spans: Sequence[Span], spec: DeviceSpec = MNCORE2) -> Timeline:
    """Place `spans` (in enqueue order per queue) on their queues, devices and links.

    A span that can never start (it waits on one that waits on it, or on one enqueued after
    it on its own queue) is an InvalidArgumentError naming it."""
    index = _check(spans)
    n = len(spans)
    waiting = [0] * n  # predecessors not placed yet
    dependents: list[list[int]] = [[] for _ in range(n)]
    last_on_queue: dict[tuple[int, int], int] = {}
    for i, s in enumerate(spans):
        before = {index[k] for k in s.after}
        prev = last_on_queue.get((s.device, s.queue))
        if prev is not None:
            before.add(prev)
        last_on_queue[(s.device, s.queue)] = i
        for j in before:
            dependents[j].append(i)
        waiting[i] = len(before)
    uses, resources = _resources(spans, spec)
    free_at = [0.0] * resources
    ready_at = [0.0] * n
    start = [math.nan] * n
    heap = [(0.0, i) for i in range(n) if waiting[i] == 0]
    heapq.heapify(heap)
    push, pop = heapq.heappush, heapq.heappop
    placed = 0
    while heap:
        bound, i = pop(heap)
        t = ready_at[i]
        for r in uses[i]:
            if free_at[r] > t:
                t = free_at[r]
        if t > bound:  # a resource was taken since it was queued: try again later
            push(heap, (t, i))
            continue
        start[i] = t
        end = t + spans[i].duration_s
        placed += 1
        for r in uses[i]:
            free_at[r] = end
        for j in dependents[i]:
            if end > ready_at[j]:
                ready_at[j] = end
            waiting[j] -= 1
            if waiting[j] == 0:
                push(heap, (ready_at[j], j))
    if placed < n:
        raise _never_starts(spans, [i for i in range(n) if math.isnan(start[i])])
    return _timeline(spans, start, spec.static_power_w)


def fold(
    spans: Sequence[Span], device_map: Mapping[int, int], spec: DeviceSpec = MNCORE2
) -> list[Span]:
    """The same work on the placement that ran: each logical device's spans move to
    `device_map[device]`; the queues of logical devices that land on one device stay
    distinct (those of the lowest logical device keep their numbers, the next device's
    follow after them); a copy whose ends land on one device becomes a local copy priced
    by `spec.local_copy_cost`, one whose ends move is priced for its new ends."""
    used = sorted({s.device for s in spans} | {d for s in spans if s.link for d in s.link})
    missing = [d for d in used if d not in device_map]
    if missing:
        raise InvalidArgumentError(
            f"the device map places no logical device {', '.join(map(str, missing))}: "
            "give every logical device a physical one"
        )
    for logical in used:
        _check_index(device_map[logical], f"device_map[{logical}]")
    queue_base: dict[int, int] = {}
    next_queue: dict[int, int] = {}
    for logical in used:
        physical = device_map[logical]
        queue_base[logical] = next_queue.get(physical, 0)
        queues = [s.queue for s in spans if s.device == logical]
        next_queue[physical] = queue_base[logical] + (max(queues) + 1 if queues else 0)
    return [_fold_span(s, device_map, queue_base, spec) for s in spans]


def _fold_span(
    s: Span, device_map: Mapping[int, int], queue_base: Mapping[int, int], spec: DeviceSpec
) -> Span:
    moved = replace(s, device=device_map[s.device], queue=queue_base[s.device] + s.queue)
    if s.link is None:
        return moved
    ends = (device_map[s.link[0]], device_map[s.link[1]])
    if ends == s.link:
        return moved
    cost = spec.copy_cost(ends[0], ends[1], s.nbytes)
    return replace(
        moved,
        duration_s=cost.time_s,
        energy_j=cost.energy_j,
        link=None if ends[0] == ends[1] else ends,
    )


def _resources(spans: Sequence[Span], spec: DeviceSpec) -> tuple[list[tuple[int, ...]], int]:
    """Per span, the numbers of the exclusive resources it holds while it runs (its
    device's PE array, the link directions of its route), and how many there are."""
    ids: dict[str, int] = {}
    by_where: dict[tuple, tuple[int, ...]] = {}  # see _where
    uses = []
    for s in spans:
        where = _where(s)
        if where is None:
            uses.append(())
            continue
        held = by_where.get(where)
        if held is None:
            if where[0] == "compute":
                names: tuple[str, ...] = (f"dev{s.device}.compute",)
            elif where[0] == "host":
                names = spec.link.host_route(s.device, to_device=where[2])
            else:
                names = spec.link.route(*s.link)
            held = by_where[where] = tuple(ids.setdefault(r, len(ids)) for r in names)
        uses.append(held)
    return uses, len(ids)


def _where(s: Span) -> tuple | None:
    """What a span holds while it runs: ("compute", device), ("link", src, dst) for a copy
    between devices, ("host", device, to the device?) for a host transfer, or nothing."""
    if s.kind in COMPUTE_KINDS:
        return ("compute", s.device)
    if s.link is not None:
        return ("link", *s.link)
    if s.kind in HOST_KINDS:
        return ("host", s.device, s.kind == "write")
    return None


def _timeline(spans: Sequence[Span], start: list[float], static_power_w: float) -> Timeline:
    end = [t + s.duration_s for t, s in zip(start, spans)]
    makespan = max(end, default=0.0)
    intervals: dict[int, list[tuple[float, float]]] = {}
    energy: dict[int, float] = {}
    for s, t0, t1 in zip(spans, start, end):
        intervals.setdefault(s.device, []).append((t0, t1))
        energy[s.device] = energy.get(s.device, 0.0) + s.energy_j
    devices = []
    for d in sorted(intervals):
        busy = _covered(intervals[d])
        idle = static_power_w * max(0.0, makespan - busy)
        devices.append(DeviceUsage(d, busy, energy[d] + idle, idle))
    capacity = len(devices) * makespan
    busy = sum(d.busy_s for d in devices)
    kinds = {s.key: s.kind for s in spans}
    flows = [
        Flow(k, s.key, "event" if kinds[k] == "record_event" else "after")
        for s in spans
        for k in s.after
    ]
    return Timeline(
        spans=tuple(spans),
        start_s=MappingProxyType({s.key: t for s, t in zip(spans, start)}),
        end_s=MappingProxyType({s.key: t for s, t in zip(spans, end)}),
        makespan_s=makespan,
        energy_j=sum(d.energy_j for d in devices),
        bubble_fraction=max(0.0, 1.0 - busy / capacity) if capacity > 0 else 0.0,
        devices=devices,
        flows=flows,
    )


def _covered(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of `intervals`."""
    total, reach = 0.0, -math.inf
    for t0, t1 in sorted(intervals):
        if t1 > reach:
            total += t1 - max(t0, reach)
            reach = t1
    return total


def _check(spans: Sequence[Span]) -> dict[int, int]:
    """Key -> position, after checking what a caller could get wrong."""
    index: dict[int, int] = {}
    for i, s in enumerate(spans):
        if not isinstance(s, Span):
            raise InvalidArgumentError(f"spans[{i}] is a {type(s).__name__}, not a Span")
        if s.key in index:
            raise InvalidArgumentError(f"span key {s.key} is used twice: give each span its own")
        index[s.key] = i
        if type(s.device) is not int or s.device < 0:
            _check_index(s.device, f"span {s.key}'s device")
        if type(s.queue) is not int or s.queue < 0:
            _check_index(s.queue, f"span {s.key}'s queue")
        for what, value in (("duration_s", s.duration_s), ("energy_j", s.energy_j)):
            if not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise InvalidArgumentError(
                    f"span {s.key} ({s.name}) has {what}={value!r}: it must be finite and >= 0"
                )
        if s.link is not None and len(s.link) != 2:
            raise InvalidArgumentError(
                f"span {s.key} ({s.name}) has link={s.link!r}: give (src, dst) devices"
            )
    for s in spans:
        for k in s.after:
            if k not in index:
                raise InvalidArgumentError(
                    f"span {s.key} ({s.name}) waits on unknown span {k}: "
                    "after names keys of spans in the same schedule"
                )
    return index


def _check_index(value: object, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"{what} is {value!r}: use a whole number from 0")


def _never_starts(spans: Sequence[Span], stuck: list[int]) -> InvalidArgumentError:
    shown = ", ".join(f"{spans[i].key} ({spans[i].name})" for i in stuck[:5])
    more = f" and {len(stuck) - 5} more" if len(stuck) > 5 else ""
    return InvalidArgumentError(
        f"spans {shown}{more} can never start: they wait, directly or through their queue, "
        "on each other or on a span enqueued after them on their own queue"
    )
