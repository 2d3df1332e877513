"""Shrinking a failing binary to a minimal one that fails the same way (`mnrt reduce`).

"The same way" is a failure's signature: a device error of the same type and message in a
kernel of the same op and operand specs; or, for a binary with fingerprints, the same first
divergent kernel (op, program, operand specs) computing the same wrong bits; or, without
fingerprints, the same golden checks failing with the same mismatch counts and the same
worst elements (where they are and what they hold, to the bit): a candidate whose check
reads values computed otherwise (a softmax never run leaves zeros, as far from
probabilities of about 0.001 as the wrong ones were) does not fail the same way.

Steps, each kept only if the result still fails the same way:
1. isolate: where the failure names a kernel (a device error, or the first divergent kernel
   of a binary with fingerprints), a binary of that kernel alone, its operands written with
   what they held just before it ran in the failing replay (isolate.py);
2. slice: where only golden checks fail and nothing names a kernel (a binary without
   fingerprints) on one queue (no traces, copies or events), the commands and kernels the
   failing checks' values flow from, found by following what each reads back from the
   checks (a kernel or a write replaces all of what it writes; a kernel in place that
   wrote, in every run of its program, the bits its outputs already held changed nothing,
   and goes as if it were not there: a relu of values none of which is negative, say).
   Everything left feeds a
   failing check, so dropping any of it changes what the check reads, and with it the
   worst elements "the same way" holds to: ddmin, which replays
   candidates by the thousand to learn that (ResNet-50 compiled at O1: 2,242 replays in
   669 s, past the 600 s limit, and nothing dropped), is skipped;
3. commands: delta debugging (ddmin) over the commands that do work (writes, reads,
   program enqueues, trace replays, finishes, copies), buffers and programs nothing uses
   dropped; events stay (a candidate without them could race and fail by chance);
4. kernels: ddmin over each remaining program's kernels, enqueues rebound to the slots left.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import DeviceError, InvalidArgumentError, MnrtError
from ..format import LightBinary
from ..format.edit import Editor
from ..format.fb.Command import CommandT
from ..format.fb.CommandUnion import CommandUnion as U
from ..format.fb.ProgramDesc import ProgramDescT
from ..format.fingerprints import Fingerprint
from ..format.text import decoded
from ..host import SlotView
from ..host.commands import KernelWatch
from ..host.program import bound_slots
from ..user_warning import warn
from .executor import Executor
from .hazards import race_text, races
from .isolate import isolate
from .locate import KernelSite
from .placement import place
from .plan import program_buffers, validate
from .trim import referenced_ids

# Commands that do work (ddmin's units): any other command only defines what these use.
_WORK = (U.WriteBuffer, U.ReadBuffer, U.GoldenCheck, U.EnqueueProgram, U.ReplayTrace, U.Finish,
         U.CopyBuffer)  # fmt: skip
# Commands that order queues: always kept (without them a candidate may race and fail by
# chance), and what they name stays defined.
_ORDER = (U.RecordEvent, U.WaitEvent)


class NotFailingError(InvalidArgumentError):
    """`mnrt reduce` was given a binary that does not fail."""


@dataclass(frozen=True)
class Failure:
    """How a binary fails: its kind ("device error", "divergent kernel", "golden mismatch")
    and what must stay the same; `site` is the kernel it names, if any."""

    kind: str
    detail: tuple
    site: KernelSite | None = field(default=None, compare=False)

    def describe(self) -> str:
        where = f" in {self.site.describe()}" if self.site is not None else ""
        if self.kind == "golden mismatch":  # (name, mismatches, worst elements) each
            what = ", ".join(_mismatch_text(*d) for d in self.detail)
        elif self.kind == "divergent kernel":  # (program, op, specs, output hashes)
            what = f"{self.site.verdict}, its outputs hash to {', '.join(self.detail[-1])}"
        else:  # (error type, message, op, specs): the site names the op and operands
            what = f"{self.detail[0]}: {self.detail[1]}"
        return f"{self.kind}{where}: {what}"

    @property
    def reproduce(self) -> str:
        """The `mnrt run` option that shows this failure: a divergent kernel is a
        difference from the capture's fingerprints, which only --locate compares."""
        return " --locate" if self.kind == "divergent kernel" else ""


def _mismatch_text(name: str, mismatches: int, worst: tuple) -> str:
    if not worst:
        return f"{name} ({mismatches} mismatches)"
    (index, actual), *_ = worst
    return f"{name} ({mismatches} mismatches, worst {actual} at {list(index)})"


def _specs(site: KernelSite) -> tuple:
    return (site.op, tuple((o["dtype"], tuple(o["shape"])) for o in site.inputs + site.outputs))


def failure_of(binary: LightBinary) -> Failure | None:
    """The binary's failure (None when it passes, or is not a valid binary at all): where
    the binary has fingerprints and fails (a golden, or a kernel whose output is wrong),
    its first divergent kernel is it."""
    from . import replay

    try:
        report = replay(binary, locate=True)
    except DeviceError as e:
        located = getattr(getattr(e, "report", None), "locate", None)
        site = located.failed if located is not None else None
        spec = _specs(site) if site is not None else ()
        # What went wrong, without where (command numbers change as the binary shrinks).
        what = str(e).split(" failed: ", 1)[-1]
        return Failure("device error", (type(e).__name__, what, *spec), site)
    except MnrtError:
        return None
    first = report.locate.first_divergent if report.locate is not None else None
    failed = [c for c in report.checks if not c.passed]
    # Kernels that differ from the capture by rounding alone, in a replay whose goldens all
    # pass, are no failure (`mnrt run --locate` exits 0 for them too): another host's BLAS
    # sums in another order, and a binary replayed there is not broken.
    if first is not None and (failed or report.locate.first_wrong is not None):
        # The bits it computed too: inputs that differ from the failing run's change them.
        computed = tuple(f"{r.hash:016x}" for r in first.replayed)
        return Failure("divergent kernel", (first.program, *_specs(first), computed), first)
    if not failed:
        return None
    detail = tuple(
        (c.name, c.mismatches, tuple((tuple(w["index"]), repr(w["actual"])) for w in c.worst))
        for c in failed
    )
    return Failure("golden mismatch", detail)


@dataclass
class ReduceResult:
    binary: LightBinary
    failure: Failure
    steps: list[dict]
    seconds: float

    def to_dict(self) -> dict:
        return {
            "failure": self.failure.describe(),
            "steps": self.steps,
            "seconds": self.seconds,
            "commands": len(self.binary),
            "kernels": kernel_count(self.binary),
        }


def kernel_count(binary: LightBinary) -> int:
    """Kernels the binary's programs hold."""
    return sum(
        len(c.cmd.program.kernels or ()) for c in binary.commands if c.cmdType == U.CreateProgram
    )


class _Tester:
    """Runs candidates, counting them, and says which fail the same way."""

    def __init__(self, failure: Failure, deadline: float) -> None:
        self.failure, self.deadline, self.tests = failure, deadline, 0

    def __call__(self, candidate: LightBinary | None) -> bool:
        if candidate is None or time.monotonic() > self.deadline:
            return False
        self.tests += 1
        return failure_of(candidate) == self.failure


def ddmin(units: Sequence[Any], fails: Callable[[list], bool]) -> list:
    """Zeller's ddmin: a 1-minimal subset of `units` for which `fails` holds (it holds
    for all of them)."""
    units, n = list(units), 2
    while len(units) >= 2:
        size = math.ceil(len(units) / n)
        parts = [units[i : i + size] for i in range(0, len(units), size)]
        for part in parts:
            if fails(part):
                units, n = part, 2
                break
        else:
            for part in parts:
                rest = [u for u in units if u not in part]
                if fails(rest):
                    units, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(units):
                    break
                n = min(len(units), 2 * n)
    return units


def without(binary: LightBinary, drop: set[int]) -> LightBinary | None:
    """`binary` less the commands at `drop`, and the buffers and programs no command left
    uses; None when what is left is not a valid binary."""
    commands = binary.commands
    rest = [i for i in range(len(commands)) if i not in drop]
    used = set().union(*(referenced_ids(commands[i].cmd) for i in rest
                         if commands[i].cmdType in (*_WORK, *_ORDER)))  # fmt: skip
    keep = [i for i in rest if _still_defined(commands[i], used)]
    index = {old: new for new, old in enumerate(keep)}
    prints = [
        Fingerprint(index[f.command], f.kernel, f.output, f.stats)
        for f in binary.fingerprints
        if f.command in index
    ]
    try:
        result = Editor(binary).build([commands[i] for i in keep], fingerprints=prints)
        validate(result)
    except MnrtError:
        return None
    return result


def _still_defined(c: CommandT, used: set[int]) -> bool:
    if c.cmdType in (U.CreateBuffer, U.DeallocateBuffer):
        return c.cmd.bufferId in used
    if c.cmdType == U.CreateProgram:
        return c.cmd.programId in used
    return True


def with_kernels(binary: LightBinary, program: int, kept: list[int]) -> LightBinary | None:
    """`binary` with program `program` reduced to its kernels at positions `kept`, every
    enqueue of it bound to the slots left; None when that is not a valid binary."""
    commands = list(binary.commands)
    slots_before: tuple[str, ...] = ()
    slots_after: list[str] = []
    for i, c in enumerate(commands):
        if c.cmdType == U.CreateProgram and c.cmd.programId == program:
            desc = c.cmd.program
            kernels = [desc.kernels[k] for k in kept]
            views = {decoded(v.slot): v for v in desc.views or ()}
            slots_before = _slots(desc.kernels, views)
            slots_after = list(_slots(kernels, views))
            # the views the kept kernels name, and those they are views of in turn
            named = set()
            for s in _operands(kernels):
                while s in views and s not in named:
                    named.add(s)
                    s = decoded(views[s].of)
            body = copy.copy(c.cmd)
            body.program = ProgramDescT(
                name=desc.name,
                kernels=kernels,
                views=[v for v in desc.views or () if decoded(v.slot) in named] or None,
            )
            commands[i] = CommandT(c.cmdType, body)
        elif c.cmdType == U.EnqueueProgram and c.cmd.programId == program:
            bound = dict(zip(slots_before, (int(b) for b in c.cmd.bufferIds)))
            body = copy.copy(c.cmd)
            body.bufferIds = [bound[s] for s in slots_after]
            commands[i] = CommandT(c.cmdType, body)
    try:
        result = Editor(binary).build(commands, fingerprints=binary.fingerprints)
        validate(result)
    except MnrtError:
        return None
    return result


def _operands(kernels: Sequence[Any]) -> list[str]:
    return [s for k in kernels for s in (*_texts(k.inputs), *_texts(k.outputs))]


def _slots(kernels: Sequence[Any], views: dict[str, Any]) -> tuple[str, ...]:
    """A program's bound slots, as the validator orders them (see host.program)."""
    of = {slot: SlotView(decoded(v.of), 0, ()) for slot, v in views.items()}
    return bound_slots(_operands(kernels), of)


_SLICED = (
    "every command and kernel left feeds a failing check; without fingerprints the first "
    "kernel that went wrong cannot be told from those after it: capture with "
    "fingerprints=True (compiled binaries have them) to reduce to that kernel"
)
# What a binary may hold for the slice (step 2) to follow its data: one queue in order.
_SLICEABLE = (U.OpenDevice, U.OpenQueue, U.CreateBuffer, U.DeallocateBuffer, U.CreateProgram,
              U.WriteBuffer, U.ReadBuffer, U.GoldenCheck, U.EnqueueProgram, U.Finish)  # fmt: skip


class _NoOps:
    """The KernelWatch factory of a replay that finds the kernels that changed nothing:
    (program id, kernel position) of each kernel run in place (every output one of its
    inputs) whose outputs held the same bits after it as before (`same`), and of every
    other (`changed`). Only in place: what an output that is not also an input holds
    before its kernel runs is whatever its memory held (a kernel writes all of it, so
    nothing puts the fill in first), not a value anything computed."""

    def __init__(self, binary: LightBinary) -> None:
        self.programs = {
            i: c.cmd.programId
            for i, c in enumerate(binary.commands)
            if c.cmdType == U.EnqueueProgram
        }
        self.same: set[tuple[int, int]] = set()
        self.changed: set[tuple[int, int]] = set()

    def __call__(self, command: int) -> _NoOpWatch | None:
        pid = self.programs.get(command)
        return None if pid is None else _NoOpWatch(self, pid)

    @property
    def kernels(self) -> set[tuple[int, int]]:
        """The kernels that changed nothing in every run."""
        return self.same - self.changed


class _NoOpWatch(KernelWatch):
    def __init__(self, owner: _NoOps, program: int) -> None:
        self.owner, self.program, self.kernel = owner, program, 0
        self.held: list[bytes] | None = None

    def before(self, step: Any) -> None:
        in_place = all(any(o is i for i in step.ins) for o in step.outs)
        self.held = [bytes(b.peek()) for b in step.outs] if in_place else None

    def after(self, step: Any, results: Any) -> None:
        held = self.held
        same = held is not None and all(bytes(b.peek()) == h for b, h in zip(step.outs, held))
        (self.owner.same if same else self.owner.changed).add((self.program, self.kernel))
        self.kernel += 1


def slice_facts(binary: LightBinary) -> tuple[set[int], set[tuple[int, int]]] | None:
    """What the slice (step 2) follows, from one replay of `binary`: the indices of the
    commands whose golden checks fail, and (program id, kernel position) of the kernels
    that, in every run the replay made of them, wrote the bits their outputs already held.
    None where the replay does not complete (the slice follows failing goldens, which a
    complete run gives)."""
    plan = validate(binary, blobs=False)
    found = _NoOps(binary)
    executor = Executor(plan, place(plan, "auto", None, None), watch=found)
    try:
        executor.run()
        checks = executor.checks()
    except MnrtError:
        return None
    finally:
        executor.close()
    failing = {check.command for check in checks if not check.passed}
    return failing, found.kernels


def sliceable(binary: LightBinary) -> bool:
    """Whether the slice (step 2) can follow the binary's data: one queue in order."""
    commands = binary.commands
    queues = sum(c.cmdType == U.OpenQueue for c in commands)
    return queues == 1 and all(c.cmdType in _SLICEABLE for c in commands)


def data_slice(
    binary: LightBinary, sinks: set[int], no_ops: set[tuple[int, int]]
) -> LightBinary | None:
    """`binary` (`sliceable`) less every work command and kernel that no value the
    commands at `sinks` read flows from (step 2 of the module doc), the kernels `no_ops`
    (see slice_facts) as if they were not there: `binary` itself where everything feeds
    them."""
    commands = binary.commands
    plan = validate(binary, blobs=False)
    needed: set[int] = set()  # buffers whose current value a kept command reads later
    kept_kernels: dict[int, set[int]] = {}
    drop: set[int] = set()
    for i in range(len(commands) - 1, -1, -1):
        c = commands[i]
        kind, body = c.cmdType, c.cmd
        if kind in (U.GoldenCheck, U.ReadBuffer):
            if i in sinks:
                needed.add(body.bufferId)
            else:
                drop.add(i)
        elif kind == U.WriteBuffer:
            if body.bufferId in needed:
                needed.discard(body.bufferId)  # written whole
            else:
                drop.add(i)
        elif kind == U.Finish:
            drop.add(i)  # one queue: its order is the order of the commands
        elif kind == U.EnqueueProgram:
            kernels = program_buffers(plan, body.programId, body.bufferIds)
            kept = kept_kernels.setdefault(body.programId, set())
            feeds = False
            for k in range(len(kernels) - 1, -1, -1):
                reads, writes = kernels[k]
                if not writes & needed or (body.programId, k) in no_ops:
                    continue
                feeds = True
                kept.add(k)
                # what it writes whole no earlier command need give (program_buffers)
                needed = (needed - writes) | reads
            if not feeds:
                drop.add(i)
    sliced = without(binary, drop) if drop else binary
    for pid, kept in kept_kernels.items():
        n = len(plan.programs[pid].kernels)
        if sliced is not None and kept and len(kept) < n:
            sliced = with_kernels(sliced, pid, sorted(kept))
    return sliced


def _texts(values: Sequence[bytes | str] | None) -> list[str]:
    return [decoded(v) for v in values or ()]


def reduce(binary: LightBinary, time_limit_s: float = 600.0) -> ReduceResult:
    """The smallest binary the steps find that fails as `binary` does (NotFailingError if
    it does not fail), with a record of each step."""
    if not (
        type(time_limit_s) in (int, float) and math.isfinite(time_limit_s) and time_limit_s > 0
    ):
        raise InvalidArgumentError(
            f"time_limit_s must be a finite number of seconds > 0, got {time_limit_s!r}"
        )
    start = time.monotonic()
    plan = validate(binary, blobs=False)
    found = races(plan, limit=2)
    if found:
        warn(
            f"{race_text(plan, found)}: its failure may come and go "
            "with the order its queues run in, and so may each step of the reduction; order "
            "them first",
        )
    failure = failure_of(binary)
    if failure is None:
        raise NotFailingError(
            "the binary does not fail (it replays and passes, or is not a valid binary: "
            "run `mnrt run` on it); there is nothing to reduce"
        )
    test = _Tester(failure, start + time_limit_s)
    steps: list[dict] = []
    current = binary

    def record(name: str, before: LightBinary, after: LightBinary, tests: int) -> None:
        steps.append({
            "step": name,
            "tests": tests,
            "commands": [len(before), len(after)],
            "kernels": [kernel_count(before), kernel_count(after)],
        })  # fmt: skip

    if failure.site is not None:
        before, t0 = current, test.tests
        candidate = isolate(current, failure.site)
        if test(candidate):
            current = candidate
        record("isolate", before, current, test.tests - t0)

    facts = (
        slice_facts(current) if failure.kind == "golden mismatch" and sliceable(current) else None
    )
    if facts is not None and facts[0]:
        before, t0 = current, test.tests
        candidate = data_slice(current, *facts)
        if candidate is not None and (candidate is current or test(candidate)):
            record("slice", before, candidate, test.tests - t0)
            steps[-1]["note"] = _SLICED
            return ReduceResult(candidate, failure, steps, time.monotonic() - start)

    before, t0 = current, test.tests
    work = [i for i, c in enumerate(current.commands) if c.cmdType in _WORK]
    cache: dict[tuple, bool] = {}

    def commands_fail(kept: list[int]) -> bool:
        key = tuple(kept)
        if key not in cache:
            cache[key] = test(without(current, set(work) - set(kept)))
        return cache[key]

    kept = ddmin(work, commands_fail)
    if len(kept) < len(work):
        current = without(current, set(work) - set(kept))
    record("commands", before, current, test.tests - t0)

    before, t0 = current, test.tests
    for c in list(current.commands):
        if c.cmdType != U.CreateProgram:
            continue
        pid, n = c.cmd.programId, len(c.cmd.program.kernels or ())
        base = current

        def kernels_fail(kept: list[int], base=base, pid=pid) -> bool:
            return test(with_kernels(base, pid, kept))

        chosen = ddmin(list(range(n)), kernels_fail)
        if len(chosen) < n:
            current = with_kernels(base, pid, chosen)
    record("kernels", before, current, test.tests - t0)
    return ReduceResult(current, failure, steps, time.monotonic() - start)
