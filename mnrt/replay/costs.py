"""The modelled figures a performance gate compares (`mnrt bench`): makespan and energy of
a binary's replay (the report's `modelled` timeline, see modelled.py) and each kernel's
modelled cost, and the comparison with a baseline. The timing model is deterministic, so
two runs of one binary give the same figures on any machine: a gate that needs no hardware.
"""

from __future__ import annotations

from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

from ..errors import MnrtError
from ..format import LightBinary
from ..host.commands import KernelWatch
from .executor import Executor
from .placement import place
from .plan import program_kernel, validate
from .report import ReplayReport


def modelled_totals(report: ReplayReport) -> dict[str, float]:
    """The replay's modelled `makespan_s` and `energy_j` (DESIGN.md section 11's names), as
    the report's `modelled` timeline of the captured topology gives them (one loop's)."""
    m = report.modelled
    if m is None:
        raise MnrtError(
            "the replay kept no modelled timeline (a rank other than 0 of a distributed "
            "replay holds none); bench a replay in one process"
        )
    return {"makespan_s": float(m["makespan_s"]), "energy_j": float(m["energy_j"])}


@dataclass
class KernelCost:
    """One kernel execution's modelled cost, where it ran: command index, position among
    the kernels the command ran, program, position in it, op."""

    command: int
    kernel: int
    program: str
    program_kernel: int
    op: str
    time_s: float
    energy_j: float

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


class _Costs:
    """KernelWatch factory collecting each kernel's modelled cost as it runs."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, Any]] = []  # (command, kernel, Modelled)

    def __call__(self, command: int) -> _CostWatch:
        return _CostWatch(self, command)


class _CostWatch(KernelWatch):
    def __init__(self, owner: _Costs, command: int) -> None:
        self.owner, self.command, self.kernel = owner, command, 0

    def after(self, step: Any, results: Any) -> None:
        self.owner.rows.append((self.command, self.kernel, step.modelled))
        self.kernel += 1


def kernel_costs(binary: LightBinary) -> list[KernelCost]:
    """Every kernel execution of one replay of `binary` (goldens not compared), in command
    order (the queues of several devices run at once)."""
    plan = validate(binary)
    costs = _Costs()
    executor = Executor(plan, place(plan, "auto", None, None), verify=False, watch=costs)
    try:
        executor.run()
    finally:
        executor.close()
    out = []
    for command, kernel, m in sorted(costs.rows, key=lambda row: row[:2]):
        program, position = program_kernel(plan, command, kernel)
        if program is None:
            raise MnrtError(f"command {command} ran a kernel its programs do not hold")
        op = program.kernels[position].op
        out.append(KernelCost(command, kernel, program.name, position, op, m.time_s, m.energy_j))
    return out


def regressions(
    current: dict[str, Any], baseline: dict[str, Any], tolerance: float
) -> tuple[list[str], list[dict], list[dict]]:
    """(totals that regressed beyond `tolerance` as lines, kernels that got slower, kernels
    with no counterpart in the baseline) of two `mnrt bench --json` documents' `modelled`
    parts. The totals are the makespan, the energy and the kernels' summed time and
    energy. Kernels are matched program by program, their ops aligned as lines of a text
    diff (`kernel_pairs`): a kernel added, dropped or fused elsewhere (another compile of
    the model, another preset) does not shift the others onto kernels they are not, and is
    itself named as added, as a regression may be all its own."""
    totals = [
        (name, unit, float(baseline[name]), float(current[name]))
        for name, unit in (("makespan_s", "s"), ("energy_j", "J"))
    ]
    kernels = current.get("kernels", [])
    if baseline.get("kernels") and kernels:
        # The makespan and the energy count the weights' upload too, which dwarfs the
        # kernels of a small batch (ResNet-50 compiled at O3: 296 us of kernels in a
        # 2363 us makespan, 28 of 154 mJ, so kernels 15% slower move the makespan by 2%):
        # the kernels' own time and energy are totals of their own (the energy where the
        # baseline lists it for every kernel, as `mnrt bench --json` does).
        for field, unit in (("time_s", "s"), ("energy_j", "J")):
            if all(field in k for k in baseline["kernels"]):
                was, now = (sum(k[field] for k in ks) for ks in (baseline["kernels"], kernels))
                totals.append((f"kernels' {field}", unit, was, now))
    lines = []
    for name, unit, old, new in totals:
        if new > old * (1 + tolerance):
            change = (new - old) / old if old else float("inf")
            lines.append(f"{name} {old:.6g} {unit} -> {new:.6g} {unit} ({change:+.1%})")
    pairs = kernel_pairs(baseline.get("kernels", []), kernels)
    slower = [
        {**new, "baseline_time_s": old["time_s"]}
        for old, new in pairs
        if new["time_s"] > old["time_s"] * (1 + tolerance)
    ]
    paired = {id(new) for _, new in pairs}
    added = [k for k in kernels if id(k) not in paired]
    for found in (slower, added):
        found.sort(key=lambda k: (k["command"], k["kernel"]))
    return lines, slower, added


def kernel_pairs(old: list[dict], new: list[dict]) -> list[tuple[dict, dict]]:
    """The kernels of two runs that correspond: of each program (by name), the kernels it
    ran in order (every enqueue of it, one after another), their ops aligned by
    difflib's longest matching blocks."""

    def by_program(kernels: list[dict]) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for k in kernels:
            out.setdefault(k["program"], []).append(k)
        return out

    before, pairs = by_program(old), []
    for program, ran in by_program(new).items():
        was = before.get(program, [])
        matcher = SequenceMatcher(None, [k["op"] for k in was], [k["op"] for k in ran], False)
        for block in matcher.get_matching_blocks():
            pairs.extend(
                zip(was[block.a : block.a + block.size], ran[block.b : block.b + block.size])
            )
    return pairs
