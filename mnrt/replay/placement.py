"""Where a replay puts each device the binary captured (its logical devices).

Two ways: `device` places each logical device on a device of its own (the binary's first
device on an index, or a mapping by captured index; the rest on the lowest free ones), as
the capture ran; `device_map` / `devices` fold logical devices onto fewer runner devices
(`--device-map 0:0,1:0,2:1,3:1`, `--devices 2`): copies between logical devices that land
on one runner device then run as local copies, and their queues as distinct queues of it.
Every map is checked against the binary and the runner before anything runs: a logical
device left unplaced, one the binary does not have, or a runner device that does not exist
is an InvalidArgumentError (exit 2) naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

from ..device.boards import ENV_DEVICE_COUNT, check_index, device_count
from ..errors import DeviceBusyError, InvalidArgumentError
from ..format.fb.CommandUnion import CommandUnion as U
from ..host.device import open_indices, release_dropped_until
from .plan import Plan
from .transport.base import Transport


class Placement(NamedTuple):
    """Where a replay puts each captured device: `which` gives a runner index, or "auto"
    for the lowest-numbered one free as it is opened, which must not be `reserved` (the
    indices chosen for the binary's other devices). `folded`: several logical devices may
    share one runner device (a device_map or devices placement)."""

    which: Callable[[int], int | str]
    reserved: frozenset[int]
    folded: bool = False


def logical_devices(plan: Plan) -> list[int]:
    """The binary's logical devices: its captured device indices, in order."""
    return sorted(set(plan.device_index.values()))


def parse_device_map(text: str) -> dict[int, int]:
    """`--device-map 0:0,1:0,2:1` as {logical: runner device}."""
    mapping: dict[int, int] = {}
    for part in (p.strip() for p in text.split(",")):
        logical, sep, physical = part.partition(":")
        try:
            if not sep:
                raise ValueError
            key, value = int(logical), int(physical)
        except ValueError:
            raise InvalidArgumentError(
                f"--device-map entry {part!r} is not LOGICAL:DEVICE (e.g. 0:0,1:0,2:1,3:1)"
            ) from None
        if key in mapping:
            raise InvalidArgumentError(f"--device-map places logical device {key} twice")
        mapping[key] = value
    return mapping


def _free_indices(chosen: set[int]) -> list[int]:
    """The device indices neither open in this process nor chosen by the caller, in order."""
    taken = chosen | open_indices()
    return [i for i in range(device_count()) if i not in taken]


def place(
    plan: Plan,
    device: int | str | Mapping[int, int | str] = "auto",
    device_map: Mapping[int, int] | None = None,
    devices: int | None = None,
    transport: Transport | None = None,
) -> Placement:
    """The placement a replay of `plan` asked for (see the module's docstring), by the
    ranks of `transport` where several replay it."""
    if device_map is not None or devices is not None:
        if device != "auto":
            raise InvalidArgumentError(
                "give either device (one runner device per captured one) or "
                "device_map/devices (folding them), not both"
            )
        if device_map is not None and devices is not None:
            raise InvalidArgumentError("give either device_map or devices, not both")
        several = transport is not None and transport.size > 1
        if device_map is not None:
            fold = _checked_map(plan, device_map)
            if several:
                _check_ranks(plan, fold, transport)
        else:
            fold = _spread(plan, devices, transport if several else None)
        _check_traces(plan, fold)
        return Placement(fold.__getitem__, frozenset(fold.values()), folded=True)
    return _one_each(plan, device)


def _checked_map(plan: Plan, device_map: Mapping[int, int]) -> dict[int, int]:
    logical = logical_devices(plan)
    if not isinstance(device_map, Mapping):
        raise InvalidArgumentError(
            f"device_map must map logical devices to runner devices, got {device_map!r}"
        )
    for key, value in device_map.items():
        for what, v in (("logical device", key), ("device", value)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise InvalidArgumentError(f"device_map: {what} {v!r} is not an index")
    stray = sorted(k for k in device_map if k not in logical)
    if stray:
        raise InvalidArgumentError(
            f"device map names logical device {', '.join(map(str, stray))}, which the binary "
            f"does not have; its logical devices are {', '.join(map(str, logical))}"
        )
    unplaced = [k for k in logical if k not in device_map]
    if unplaced:
        raise InvalidArgumentError(
            f"device map leaves logical device {', '.join(map(str, unplaced))} unplaced; "
            f"place every one of {', '.join(map(str, logical))} (e.g. "
            + ",".join(f"{k}:{device_map.get(k, 0)}" for k in logical)
            + ")"
        )
    fold = {k: device_map[k] for k in logical}
    for index in fold.values():
        check_index(index)  # a device this runner does not have: DeviceNotFoundError
    return fold


def _check_traces(plan: Plan, fold: Mapping[int, int]) -> None:
    """A device may not allocate or create programs while one of its queues captures a
    device trace: logical devices that did so while another captured one cannot share a
    runner device with it."""
    capturing: dict[int, int] = {}  # trace gid -> logical device capturing it
    where = plan.device_index
    for index, command in enumerate(plan.binary.commands):
        kind, c = command.cmdType, command.cmd
        if kind == U.BeginTraceCapture:
            capturing[c.traceId] = where[plan.queue_device[c.queueId]]
        elif kind in (U.EndTraceCapture, U.ReleaseTrace):
            capturing.pop(c.traceId, None)
        elif capturing and kind in (U.CreateBuffer, U.CreateProgram, U.DeallocateBuffer):
            device = c.deviceId if kind != U.DeallocateBuffer else plan.buffers[c.bufferId].device
            logical = where[device]
            for other in capturing.values():
                if other != logical and fold[other] == fold[logical]:
                    raise InvalidArgumentError(
                        f"logical devices {other} and {logical} cannot share runner device "
                        f"{fold[logical]}: device {logical} allocates (command {index}) while "
                        f"device {other} captures a device trace, which one device does not "
                        "allow; place them on different devices"
                    )


def _check_ranks(plan: Plan, fold: Mapping[int, int], transport: Transport) -> None:
    """Ranks replay their logical devices in processes of their own (hosts, on a cluster),
    so a map may fold together only devices of one rank: one that put two ranks' devices on
    one runner device would be honoured by neither (each opening a device of its own)."""
    logical = logical_devices(plan)
    first: dict[int, tuple[int, int]] = {}  # runner device -> (logical device, its rank)
    for position, index in enumerate(logical):
        rank = transport.owner(position, len(logical))
        other, other_rank = first.setdefault(fold[index], (index, rank))
        if other_rank != rank:
            raise InvalidArgumentError(
                f"device_map puts logical devices {other} and {index} on runner device "
                f"{fold[index]}, but ranks {other_rank} and {rank} replay them, each in a "
                "process of its own; fold together only devices of one rank (the ranks own "
                "the logical devices in blocks), or replay in one process"
            )


def _spread(plan: Plan, devices: object, transport: Transport | None = None) -> dict[int, int]:
    """Logical devices folded onto the lowest `devices` free runner devices, in blocks.
    Over the ranks of a `transport`, which own the logical devices in blocks
    (`Transport.owner`), the runner devices are dealt to the ranks by the same rule, and
    each rank's logical devices are folded onto its own."""
    logical = logical_devices(plan)
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise InvalidArgumentError(f"devices must be a whole number >= 1, got {devices!r}")
    if devices > len(logical):
        raise InvalidArgumentError(
            f"devices={devices}, but the binary has only {len(logical)} logical device(s) "
            f"({', '.join(map(str, logical))}); give at most {len(logical)}"
        )
    ranks = transport.size if transport is not None else 1
    if devices < ranks:
        raise InvalidArgumentError(
            f"devices={devices}, but {ranks} ranks replay the binary, each on devices of its "
            f"own process; give at least {ranks}"
        )
    release_dropped_until(lambda: len(_free_indices(set())) >= devices)
    free = _free_indices(set())
    if len(free) < devices:
        raise DeviceBusyError(
            f"devices={devices}, but only {len(free)} of this runner's {device_count()} "
            f"devices are free; close devices or set {ENV_DEVICE_COUNT}"
        )
    if transport is None:
        return {k: free[i * devices // len(logical)] for i, k in enumerate(logical)}
    fold = {}
    for rank in range(ranks):
        own = [k for i, k in enumerate(logical) if transport.owner(i, len(logical)) == rank]
        runner = [free[j] for j in range(devices) if transport.owner(j, devices) == rank]
        runner = runner[: len(own)]
        fold.update((k, runner[i * len(runner) // len(own)]) for i, k in enumerate(own))
    return fold


def _one_each(plan: Plan, device: int | str | Mapping[int, int | str]) -> Placement:
    """Which runner device each captured device index replays on: the chosen ones (`device`
    for the binary's first device, or a mapping by captured index), and every other one,
    as the binary opens it, the lowest-numbered device neither chosen nor open in this
    process, picked as it is opened (so replays on several threads never pick the same
    one). No two captured devices land on one runner device, and a runner with too few
    devices is refused before anything runs."""
    captured = list(dict.fromkeys(plan.device_index.values()))
    if isinstance(device, Mapping):
        stray = [k for k in device if k not in captured]
        if stray:
            raise InvalidArgumentError(
                f"device mapping has {', '.join(map(repr, stray))}, which the binary did not "
                f"capture; its devices were captured as {captured}"
            )
        chosen = {i: device[i] for i in captured if i in device and device[i] != "auto"}
    elif device == "auto":
        chosen = {}
    elif isinstance(device, bool) or not isinstance(device, int):
        raise InvalidArgumentError(f"device must be 'auto', an index or a mapping, got {device!r}")
    else:
        check_index(device)
        chosen = {captured[0]: device} if captured else {}
    for index in chosen.values():
        check_index(index)
    if len(set(chosen.values())) < len(chosen):
        raise InvalidArgumentError(
            f"device mapping {dict(device)} puts two captured devices on one device; "
            "give each its own"
        )
    wanted = sum(index not in chosen for index in captured)
    # devices dropped without close() may hold the rest
    release_dropped_until(lambda: len(_free_indices(set(chosen.values()))) >= wanted)
    free = _free_indices(set(chosen.values()))
    free = iter(free)
    assignment = dict(chosen)
    for index in captured:
        if index not in assignment:
            runner = next(free, None)
            if runner is None:
                raise DeviceBusyError(
                    f"the binary uses {len(captured)} devices (captured as {captured}); no "
                    f"device of this runner's {device_count()} is left for its device {index} "
                    "(each is open in this process or given to another captured device); "
                    f"close devices, set {ENV_DEVICE_COUNT}, or fold the binary's devices onto "
                    "fewer (mnrt run --devices N, replay(..., devices=N))"
                )
            assignment[index] = runner
    return Placement(lambda index: chosen.get(index, "auto"), frozenset(chosen.values()))
