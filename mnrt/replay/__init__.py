"""Replay: run a light binary on emulated devices and verify it against its goldens.

    report = mnrt.replay("model.mnlb", device="auto", verify=True, loops=1)
    report.passed, report.checks, report.outputs, report.timings, report.to_json()
    mnrt.replay("model.mnlb", profile=True).profile.save("trace.json")   # ui.perfetto.dev

The binary is verified before anything runs (structure, version and schema at load; ids,
sizes, memory and blob checksums here). A malformed binary raises InvalidBinaryError; a
golden mismatch does not raise: it makes `passed` False.
"""

from __future__ import annotations

import math
import numbers
import os
import time
from collections.abc import Callable, Mapping

from ..device.boards import check_index
from ..errors import InvalidArgumentError, MnrtError
from ..format import LightBinary
from .executor import Executor
from .plan import Plan, validate
from .profile import Profile
from .report import ReplayReport

__all__ = ["Profile", "ReplayReport", "replay"]


def _device_map(
    plan: Plan, device: int | str | Mapping[int, int | str]
) -> Callable[[int], int | str]:
    """Which runner device each captured device index replays on."""
    if isinstance(device, Mapping):
        return lambda index: device.get(index, "auto")
    if device == "auto":
        return lambda index: "auto"
    if isinstance(device, bool) or not isinstance(device, int):
        raise InvalidArgumentError(f"device must be 'auto', an index or a mapping, got {device!r}")
    check_index(device)
    first = next(iter(plan.device_index.values()), None)
    return lambda index: device if index == first else "auto"


def replay(
    binary: LightBinary | str | os.PathLike,
    device: int | str | Mapping[int, int | str] = "auto",
    verify: bool = True,
    loops: int = 1,
    rtol: float | None = None,
    atol: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    profile: bool = False,
) -> ReplayReport:
    """Replay a binary `loops` times; goldens are checked on every loop with `verify`.
    `rtol`/`atol` override every check's tolerances for this run. With `profile`, the
    report's `profile` holds a Perfetto trace of every loop (timestamps cost a little)."""
    if isinstance(loops, bool) or not isinstance(loops, int) or loops < 1:
        raise InvalidArgumentError(f"loops must be a positive integer, got {loops!r}")
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is not None and not (
            isinstance(value, numbers.Real)
            and not isinstance(value, bool)
            and 0 <= value < math.inf
        ):
            raise InvalidArgumentError(f"{name} must be a finite number >= 0, got {value!r}")
    start = time.perf_counter()
    if not isinstance(binary, LightBinary):
        binary = LightBinary.load(binary)
    plan = validate(binary)
    load_s = time.perf_counter() - start
    device_map = _device_map(plan, device)
    report = ReplayReport(binary=binary, load_s=load_s)
    if profile:
        report.profile = Profile(plan)
    for loop in range(loops):
        executor = Executor(plan, device_map, verify, rtol, atol, profiling=profile)
        t0 = time.perf_counter()
        try:
            executor.run()
            t1 = time.perf_counter()
            wall = t1 - t0
            device_time = sum(q.device_time_s for q in executor.tables["queue"].values())
            energy = sum(q.energy_j for q in executor.tables["queue"].values())
            checks = executor.checks()
            if report.profile is not None:
                report.profile.add_loop(executor, t0, t1, checks, time.perf_counter())
        except MnrtError as e:
            if report.profile is not None:
                # What ran up to the failure, for `mnrt run --profile` to save anyway.
                end = time.perf_counter()
                report.profile.add_loop(executor, t0, end, [], end, error=str(e))
                e.profile = report.profile
            raise
        finally:
            executor.close()
        report.add_loop(wall, device_time, energy, checks, executor.outputs, executor.host_s)
        if progress is not None:
            progress(loop + 1, loops)
    return report
