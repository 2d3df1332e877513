"""Replay: run a light binary on emulated devices and verify it against its goldens.

    report = mnrt.replay("model.mnlb", device="auto", verify=True, loops=1)
    report.passed, report.checks, report.outputs, report.timings, report.to_json()
    mnrt.replay("model.mnlb", profile=True).profile.save("trace.json")   # ui.perfetto.dev

The binary is verified before anything runs (structure, version and schema at load; ids,
sizes, memory and blob checksums here). A malformed binary raises InvalidBinaryError; a
golden mismatch does not raise: it makes `passed` False.

Commands are issued in the order they were captured, each to its queue; queues run
independently, as they did live. So replay keeps each queue's order and every wait the
program made (finish, blocking calls), not the timing between queues: a program that used
data of another queue without waiting for it raced live and races again on replay.
"""

from __future__ import annotations

import math
import numbers
import os
import time
from collections.abc import Callable, Mapping

import numpy as np

from ..device.boards import ENV_DEVICE_COUNT, check_index, device_count
from ..errors import DeviceBusyError, InvalidArgumentError, MnrtError, OutOfMemoryError
from ..format import LightBinary
from ..format.fb.CommandUnion import CommandUnion
from ..host.device import open_indices, release_dropped
from . import io
from .executor import Executor, Placement
from .locate import Locator
from .plan import Plan, validate
from .profile import Profile
from .report import ReplayReport

__all__ = ["Profile", "ReplayReport", "replay", "verify_capture"]


def _free_indices(chosen: set[int]) -> list[int]:
    """The device indices neither open in this process nor chosen by the caller, in order."""
    taken = chosen | open_indices()
    return [i for i in range(device_count()) if i not in taken]


def _device_map(plan: Plan, device: int | str | Mapping[int, int | str]) -> Placement:
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
    free = _free_indices(set(chosen.values()))
    if len(free) < wanted:
        release_dropped()  # devices dropped without close() may hold the rest
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
                    f"close devices or set {ENV_DEVICE_COUNT}"
                )
            assignment[index] = runner
    return Placement(lambda index: chosen.get(index, "auto"), frozenset(chosen.values()))


def host_memory_bytes() -> int | None:
    """This machine's physical memory, which backs every emulated device's DRAM (None where
    the platform does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _touched_bytes(plan: Plan, binary: LightBinary) -> int:
    """Bytes of the buffers some command writes, reads or binds to a program: only those
    get host memory (device DRAM is backed on first touch, see device/memory.py)."""
    touched: set[int] = set()
    for command in binary.commands:
        if command.cmdType in _ALLOCATION_ONLY:
            continue
        ids = getattr(command.cmd, "bufferIds", None)
        if ids is not None:
            touched.update(int(i) for i in ids)
        touched.add(getattr(command.cmd, "bufferId", 0))
    return sum(plan.buffers[g].nbytes for g in touched if g in plan.buffers)


_ALLOCATION_ONLY = (CommandUnion.CreateBuffer, CommandUnion.DeallocateBuffer)


def _check_host_memory(plan: Plan, binary: LightBinary) -> None:
    """A binary whose buffers need more memory than this machine has is refused before it
    runs, rather than left to the kernel's out-of-memory killer. What it needs is at most
    its peak of live buffers and at most what its commands touch: buffers it creates and
    never uses cost nothing, so a binary may fill every device's DRAM and still run."""
    needed = min(sum(plan.peak_bytes.values()), _touched_bytes(plan, binary))
    ram = host_memory_bytes()
    if ram is not None and needed > ram:
        raise OutOfMemoryError(
            f"the binary's buffers need {needed} bytes of device memory (at their peak, of "
            f"those its commands use), more than this machine's {ram} bytes of RAM, which "
            "the emulated devices live in; replay it on a machine with more memory"
        )


# A run of more loops would not end in any useful time (even a one-command binary takes
# tens of microseconds a loop); `mnrt run --loops 1e23` used to run until killed.
MAX_LOOPS = 10_000_000


def replay(
    binary: LightBinary | str | os.PathLike,
    device: int | str | Mapping[int, int | str] = "auto",
    verify: bool = True,
    loops: int = 1,
    rtol: float | None = None,
    atol: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    profile: bool = False,
    inputs: Mapping[str, np.ndarray] | None = None,
    expected: Mapping[str, np.ndarray] | None = None,
    locate: bool = False,
    locate_dir: str | os.PathLike | None = None,
) -> ReplayReport:
    """Replay a binary `loops` times; goldens are checked on every loop with `verify`.
    `device` places the binary's devices: "auto", an index for its first device, or a
    mapping from captured index to index or "auto"; the others go to the lowest-numbered
    devices neither chosen nor open in this process, one each.
    `rtol`/`atol` override every check's tolerances for this run. With `profile`, the
    report's `profile` holds a Perfetto trace of every loop (timestamps cost a little).
    `inputs` (arrays by input name, see `binary.inputs`) replace what the binary wrote to
    those buffers; the recorded goldens then no longer apply and only `expected` (arrays
    by output name) is compared, with each output's last read, at the recorded check's
    tolerances (or rtol/atol). `report.outputs` holds every output's last read by name.

    With `locate` (or a `locate_dir`), the first loop compares every kernel's output with
    the fingerprints the capture recorded: `report.locate` names the first divergent and
    the first wrong kernel, whose inputs and outputs go to `locate_dir` as .npy.

    An MnrtError raised once the replay has begun carries the report so far as `.report`
    (with `.error` set), for a runner to write anyway."""
    if isinstance(loops, bool) or not isinstance(loops, int) or not 1 <= loops <= MAX_LOOPS:
        raise InvalidArgumentError(f"loops must be an integer from 1 to {MAX_LOOPS}, got {loops!r}")
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is not None and not (
            isinstance(value, numbers.Real)
            and not isinstance(value, bool)
            and 0 <= value < math.inf
        ):
            raise InvalidArgumentError(f"{name} must be a finite number >= 0, got {value!r}")
    for name, flag in (("verify", verify), ("profile", profile), ("locate", locate)):
        if not isinstance(flag, bool):
            raise InvalidArgumentError(f"{name} must be True or False, got {flag!r}")
    if progress is not None and not callable(progress):
        raise InvalidArgumentError(
            f"progress must be a function of (loops done, loops) or None, got {progress!r}"
        )
    start = time.perf_counter()
    if isinstance(binary, (bytes, bytearray, memoryview)):
        binary = LightBinary(bytes(binary))
    elif isinstance(binary, (str, os.PathLike)):
        binary = LightBinary.load(binary)
    elif not isinstance(binary, LightBinary):
        raise InvalidArgumentError(
            f"replay takes a LightBinary, a path to one or its bytes, not {type(binary).__name__}"
        )
    plan = validate(binary)
    if expected is not None and not verify:
        raise InvalidArgumentError("expected outputs are compared only with verify=True")
    new_inputs = {} if inputs is None else io.new_inputs(plan, inputs)
    wanted = {} if expected is None else io.expected_outputs(plan, expected)
    _check_host_memory(plan, binary)
    load_s = time.perf_counter() - start
    device_map = _device_map(plan, device)
    report = ReplayReport(binary=binary, load_s=load_s, verified=verify)
    if new_inputs:  # the recorded goldens no longer apply (see Executor)
        report.new_inputs = list(inputs)
        report.verified = verify and bool(wanted)
    if profile:
        report.profile = Profile(plan)
    locate = locate or locate_dir is not None
    if locate and new_inputs:
        raise InvalidArgumentError(
            "locate compares kernels with the fingerprints the capture recorded, which hold "
            "for the recorded inputs only; replay without new inputs to locate"
        )
    for loop in range(loops):
        locator = Locator(plan, locate_dir) if locate and loop == 0 else None
        if locator is not None:
            report.locate = locator.result
        executor = Executor(
            plan,
            device_map,
            verify,
            rtol,
            atol,
            profile,
            inputs=new_inputs,
            expected=wanted,
            watch=None if locator is None else locator.watch,
        )
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
            if locator is not None:
                locator.stopped()  # the kernel that was running, if any, failed
            if report.profile is not None:
                # What ran up to the failure, for `mnrt run --profile` to save anyway.
                end = time.perf_counter()
                report.profile.add_loop(executor, t0, end, [], end, error=str(e))
                e.profile = report.profile
            report.error = e
            e.report = report
            raise
        finally:
            executor.close()
        report.add_loop(wall, device_time, energy, checks, executor.outputs, executor.host_s)
        if progress is not None:
            progress(loop + 1, loops)
    if report.verified and not report.checks:  # a PASS needs evidence
        report.verified, report.no_goldens = False, True
    return report


def verify_capture(binary: LightBinary) -> str | None:
    """None when a fresh capture replays to its own goldens; else why not, naming the first
    divergent kernel when the capture has fingerprints (`capture(..., verify=True)`)."""
    try:
        report = replay(binary, locate=True)
    except MnrtError as e:
        return f"replay failed: {e}"
    if report.passed:
        return None
    failed = [c.name for c in report.checks if not c.passed]
    located = report.locate.located if report.locate is not None else None
    where = (
        f"first divergent kernel: {located.describe()} ({located.verdict})"
        if located is not None
        else "every kernel matched its fingerprint (a read or write differed)"
    )
    return f"golden(s) {', '.join(failed)} did not match; {where}"
