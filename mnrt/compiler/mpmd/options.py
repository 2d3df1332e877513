"""The `mpmd` and `stage_assignment` compile options, checked.

    "mpmd": {"devices": [0, 1, 2, 3], "stages": 4, "microbatches": 8, "schedule": "gpipe"}
    "stage_assignment": {"layer0": 0, "layer1": 0, "layer2": 1, ...}

`stages` defaults to the number of devices. `gpipe` runs one stage per device; `circular`
runs `stages / len(devices)` virtual stages per device, stage s on device s mod p (Shardy's
circular pipelining). `1f1b` interleaves forward and backward passes, which the compiler
does not make yet (it compiles inference graphs): it is refused with that reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import InvalidArgumentError
from ...format.files import parse_json
from .schedule import SCHEDULES

_KEYS = ("devices", "stages", "microbatches", "schedule")
MAX_MICROBATCHES = 4096


@dataclass(frozen=True)
class MpmdOptions:
    devices: tuple[int, ...]
    stages: int
    microbatches: int
    schedule: str

    @property
    def virtual_stages(self) -> int:
        """Stages per device (1 for gpipe)."""
        return self.stages // len(self.devices)

    def device_of(self, stage: int) -> int:
        return self.devices[stage % len(self.devices)]

    def to_json(self) -> dict:
        return {
            "devices": list(self.devices),
            "stages": self.stages,
            "microbatches": self.microbatches,
            "schedule": self.schedule,
        }


def _loaded(value: Any, what: str) -> Any:
    """A mapping, or the JSON text of one (as an option_json file's args give it)."""
    if isinstance(value, str):
        try:
            value = parse_json(value)
        except ValueError as e:
            raise InvalidArgumentError(f"{what}: not valid JSON ({e})") from None
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(f"{what} takes a dict (or its JSON text), not {value!r}")
    return value


def _count(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgumentError(f"{what}={value!r}: give an integer from {low} to {high}")
    return value


def parse_mpmd(value: Any, what: str = "option mpmd") -> MpmdOptions:
    value = _loaded(value, what)
    unknown = sorted(set(value) - set(_KEYS))
    if unknown:
        raise InvalidArgumentError(
            f"{what}: unknown key(s) {', '.join(unknown)}; the keys are {', '.join(_KEYS)}"
        )
    devices = value.get("devices")
    if not isinstance(devices, (list, tuple)) or not devices:
        raise InvalidArgumentError(f"{what}: 'devices' is a non-empty list of device indices")
    devices = tuple(_count(d, f"{what} device", 0, 1 << 16) for d in devices)
    if len(set(devices)) != len(devices):
        raise InvalidArgumentError(f"{what}: 'devices' {list(devices)} names a device twice")
    schedule = value.get("schedule", "gpipe")
    if schedule == "1f1b":
        raise InvalidArgumentError(
            f"{what}: schedule '1f1b' interleaves backward passes with forward ones, and the "
            "compiler makes no backward pass yet; use 'gpipe' or 'circular'"
        )
    if schedule not in SCHEDULES:
        raise InvalidArgumentError(
            f"{what}: schedule {schedule!r} is unknown; valid: {', '.join(SCHEDULES)}, 1f1b"
        )
    p = len(devices)
    stages = _count(value.get("stages", p), f"{what} stages", 1, 1 << 12)
    microbatches = _count(value.get("microbatches", p), f"{what} microbatches", 1, MAX_MICROBATCHES)
    if schedule == "gpipe" and stages != p:
        raise InvalidArgumentError(
            f"{what}: gpipe runs one stage per device, so stages ({stages}) must equal the "
            f"number of devices ({p}); for several stages per device use 'circular'"
        )
    if stages % p:
        raise InvalidArgumentError(
            f"{what}: circular runs stages/devices virtual stages per device, so stages "
            f"({stages}) must be a multiple of the number of devices ({p})"
        )
    return MpmdOptions(devices, stages, microbatches, schedule)


def parse_assignment(value: Any, what: str = "option stage_assignment") -> dict[str, int]:
    value = _loaded(value, what)
    out = {}
    for prefix, stage in value.items():
        if not isinstance(prefix, str) or not prefix:
            raise InvalidArgumentError(f"{what}: keys are node-name prefixes, got {prefix!r}")
        out[prefix] = _count(stage, f"{what}[{prefix!r}]", 0, 1 << 12)
    return out
