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

from ..errors import InvalidArgumentError, MnrtError, OutOfMemoryError
from ..format import LightBinary
from ..format.fb.CommandUnion import CommandUnion
from . import io
from .executor import Executor
from .hazards import race_text, races
from .locate import Locator
from .modelled import ran
from .modelled import spans as span_list
from .placement import Placement, place
from .plan import Plan, validate
from .profile import Profile
from .report import ReplayReport
from .transport.base import Transport
from .transport.local import LocalTransport

__all__ = ["Profile", "ReplayReport", "replay", "verify_capture"]


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
        for name in ("bufferId", "srcId", "dstId"):
            touched.add(getattr(command.cmd, name, 0))
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
    device_map: Mapping[int, int] | None = None,
    devices: int | None = None,
    transport: Transport | None = None,
    locate: bool = False,
    locate_dir: str | os.PathLike | None = None,
) -> ReplayReport:
    """Replay a binary `loops` times; goldens are checked on every loop with `verify`.
    `device` places the binary's devices: "auto", an index for its first device, or a
    mapping from captured index to index or "auto"; the others go to the lowest-numbered
    devices neither chosen nor open in this process, one each. Instead, `device_map`
    ({logical device: runner device}, every logical device placed) or `devices` (a count)
    fold the binary's logical devices onto fewer runner devices: copies between devices
    that land on one become local copies, and the goldens stay the same. The report's
    `modelled` is the modelled timeline of the captured topology, `modelled_as_run` that
    of the placement that ran.
    With a `transport` of several ranks (see replay/transport), each rank replays the
    devices it owns and rank 0's report holds every rank's checks, outputs and spans;
    another rank's holds its own only (`report.rank`). A rank whose replay raises must end
    every rank (`transport.abort`): the others may be waiting for it.
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
    if locate_dir is not None:
        _check_locate_dir(locate_dir)
    if transport is not None and not isinstance(transport, Transport):
        raise InvalidArgumentError(
            f"transport must be a replay Transport (mnrt.replay.transport) or None, got "
            f"{type(transport).__name__}"
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
    transport = transport if transport is not None else LocalTransport()
    placement = place(plan, device, device_map, devices, transport)
    report = ReplayReport(binary=binary, load_s=load_s, verified=verify)
    report.rank, report.ranks = transport.rank, transport.size
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
    locator = Locator(plan, locate_dir) if locate else None
    if locator is not None:
        report.locate = locator.result
    _run_loops(report, plan, placement, transport, loops, verify, rtol, atol, profile,
               new_inputs, wanted, progress, locator)  # fmt: skip
    wrong = report.locate is not None and report.locate.first_wrong is not None
    if not report.passed or wrong:
        found = races(plan, limit=2)
        report.race = race_text(plan, found, "the binary's") if found else None
    if report.rank != 0:
        report.verified = False  # rank 0 verifies every rank's reads
    elif report.verified and not report.checks:  # a PASS needs evidence
        report.verified, report.no_goldens = False, True
    return report


def _check_locate_dir(path: object) -> None:
    """Where locate will save a kernel's arrays, checked before the replay rather than when
    it has found one."""
    if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
        raise InvalidArgumentError(
            f"locate_dir must be a folder path (a str or os.PathLike), got {type(path).__name__}"
        )
    text = os.fspath(path)
    why = (
        "is empty" if not text
        else "holds a NUL character" if "\0" in text
        else "is a file" if os.path.exists(text) and not os.path.isdir(text)
        else None
    )  # fmt: skip
    if why is not None:
        raise InvalidArgumentError(f"locate_dir {text!r} {why}; give a folder path")


def _run_loops(
    report: ReplayReport,
    plan: Plan,
    placement: Placement,
    transport: Transport,
    loops: int,
    verify: bool,
    rtol: float | None,
    atol: float | None,
    profile: bool,
    new_inputs: dict,
    wanted: dict,
    progress: Callable[[int, int], None] | None,
    locator: Locator | None,
) -> None:
    """Replay the plan `loops` times into `report`; `locator` watches the first loop's
    kernels."""
    for loop in range(loops):
        last = loop == loops - 1
        watching = locator if loop == 0 else None
        executor = Executor(
            plan,
            placement,
            verify,
            rtol,
            atol,
            profile,
            inputs=new_inputs,
            expected=wanted,
            transport=transport,
            timeline=last or profile,
            watch=None if watching is None else watching.watch,
        )
        t0 = time.perf_counter()
        try:
            executor.run()
            t1 = time.perf_counter()
            if watching is not None:
                watching.finish(transport)
            wall = t1 - t0
            queues = {id(q): q for q in executor.tables["queue"].values()}.values()
            device_time = sum(q.device_time_s for q in queues) + executor.remote_copies_s
            energy = sum(q.energy_j for q in queues) + executor.remote_copies_j
            checks = executor.checks()
            if report.profile is not None:
                report.profile.add_loop(executor, t0, t1, checks, time.perf_counter())
            outputs = executor.outputs
            if transport.size > 1:
                device_time, energy, checks, outputs = gather_loop(
                    transport, executor, device_time, energy, checks, outputs
                )
            if last:
                _add_timelines(report, plan, executor, transport)
        except MnrtError as e:
            if watching is not None:
                try:  # what it found before the error, saved all the same
                    watching.finish()
                except MnrtError as saving:
                    e.add_note(f"and locate could not save what it found: {saving}")
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
        report.add_loop(wall, device_time, energy, checks, outputs, executor.host_s)
        if progress is not None:
            progress(loop + 1, loops)


def gather_loop(
    transport: Transport,
    executor: Executor,
    device_time: float,
    energy: float,
    checks: list,
    outputs: dict[str, np.ndarray],
) -> tuple[float, float, list, dict[str, np.ndarray]]:
    """One loop's results of every rank, on rank 0, in command order; another rank keeps
    its own."""
    gathered = transport.gather((device_time, energy, checks, outputs))
    if gathered is None:
        return device_time, energy, checks, outputs
    return (
        sum(g[0] for g in gathered),
        sum(g[1] for g in gathered),
        sorted((check for g in gathered for check in g[2]), key=lambda c: c.command),
        {name: array for g in gathered for name, array in g[3].items()},
    )


def _add_timelines(
    report: ReplayReport, plan: Plan, executor: Executor, transport: Transport
) -> None:
    """What the modelled timelines of the captured topology and of the placement that ran
    are scheduled from (on first use): every rank's spans and placement, on rank 0."""
    submitted = executor.submitted or []
    if transport.size == 1:
        kept = ran(submitted)
        report.keep_spans(lambda: span_list(plan, kept), executor.placed)
        return
    gathered = transport.gather((span_list(plan, submitted), dict(executor.placed)))
    if gathered is None:
        return
    # Runner devices of different ranks are different devices (each rank opens its own,
    # from index 0): as run, they are numbered across ranks in rank order.
    runner: dict[tuple[int, int], int] = {}
    placed: dict[int, int] = {}
    for rank, (_, p) in enumerate(gathered):
        for logical, index in sorted(p.items()):
            placed[logical] = runner.setdefault((rank, index), len(runner))
    report.keep_spans([s for spans, _ in gathered for s in spans], placed)


def verify_capture(binary: LightBinary) -> str | None:
    """None when a fresh capture can be trusted to replay to its own goldens; else why
    not: its queues race (a replay may then pass or not by chance), or its replay fails,
    naming the first divergent kernel when the capture has fingerprints
    (`capture(..., verify=True)`)."""
    try:
        plan = validate(binary, blobs=False)
        found = races(plan, limit=2)
        if found:
            return race_text(plan, found)
        report = replay(binary, locate=True)
    except MnrtError as e:
        return f"its replay failed: {e}"
    if report.passed:
        return None
    failed = [c.name for c in report.checks if not c.passed]
    located = report.locate.located if report.locate is not None else None
    where = (
        f"first divergent kernel: {located.describe()} ({located.verdict})"
        if located is not None
        else "every kernel matched its fingerprint (a read or write differed)"
    )
    return (
        f"it does not reproduce its own goldens on replay: golden(s) {', '.join(failed)} did "
        f"not match; {where}; capture again (a kernel that is not deterministic is the usual "
        "cause)"
    )
