"""The modelled figures a performance gate compares (`mnrt bench`): makespan and energy of
a binary's replay (the report's `modelled` timeline, see modelled.py) and each kernel's
modelled cost, and the comparison with a baseline. The timing model is deterministic, so
two runs of one binary give the same figures on any machine: a gate that needs no hardware.
"""

from __future__ import annotations

from dataclasses import dataclass
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
) -> tuple[list[str], list[dict]]:
    """(totals that regressed beyond `tolerance` as lines, kernels that got slower) of two
    `mnrt bench --json` documents' `modelled` parts. Kernels are matched by program, op
    and occurrence (the n-th 'gemm' of program 'mlp'), so commands added elsewhere do not
    misalign them."""
    lines = []
    for name, unit in (("makespan_s", "s"), ("energy_j", "J")):
        old, new = float(baseline[name]), float(current[name])
        if new > old * (1 + tolerance):
            change = (new - old) / old if old else float("inf")
            lines.append(f"{name} {old:.6g} {unit} -> {new:.6g} {unit} ({change:+.1%})")

    def keyed(kernels: list[dict]) -> dict[tuple, dict]:
        seen: dict[tuple, int] = {}
        out = {}
        for k in kernels:
            base = (k["program"], k["program_kernel"], k["op"])
            n = seen[base] = seen.get(base, 0) + 1
            out[(*base, n)] = k
        return out

    old_k, new_k = keyed(baseline.get("kernels", [])), keyed(current.get("kernels", []))
    slower = [
        {**new_k[key], "baseline_time_s": old_k[key]["time_s"]}
        for key in new_k
        if key in old_k and new_k[key]["time_s"] > old_k[key]["time_s"] * (1 + tolerance)
    ]
    return lines, slower
