"""Layout planners: which layout each on-chip value has, and where explicit layout switches
(`relayout` kernels) go between producers and consumers that disagree (common.py).

A planner is one module with `plan(graph, fixed, effort, spec) -> (Built, decisions)` and
one line in `PLANNERS`; the `layout_planner` option's choices are its keys (and `ALIASES`,
older names). `plan_layouts` is the compile's layout step: it runs the chosen planner with
the user's layout_spec / gemm_layout_spec as fixed layouts, and records the plan in the
graph's notes, which the codegen_dir gets as layout_plan.json.

A switch holds its source and its result on chip at once; where that would take the chip's
local memory past `sram_budget` (what placement kept within it), the largest switched value
goes to DRAM instead (a decision of reason "sram_budget") and the planner runs again.
"""

from __future__ import annotations

from ...device.spec import MNCORE2, DeviceSpec
from ..ir import Graph
from ..layout import fixed_layouts
from ..liveness import value_nbytes
from ..placement import DRAM, on_chip_bytes
from ..placement import summary as placement_summary
from . import bidi, legacy, lpz
from .common import record

PLANNERS = {"lpz": lpz.plan, "bidi": bidi.plan, "legacy": legacy.plan}
ALIASES = {"row_major": "legacy"}  # the name of older option files


def plan_layouts(
    graph: Graph,
    planner: str,
    layout_spec: str = "",
    gemm_layout_spec: str = "",
    effort: int = 1,
    spec: DeviceSpec = MNCORE2,
    sram_budget: int = 0,
) -> Graph:
    """`graph` with every value's layout recorded and the planner's switches inserted,
    holding no more on chip than `sram_budget` (0: all the chip's local memory) where
    placement held no more."""
    name = ALIASES.get(planner, planner)
    fixed = fixed_layouts(graph, layout_spec, gemm_layout_spec)
    budget = sram_budget or on_chip_bytes(spec)
    within = placement_summary(graph, budget, spec)["peak_on_chip_bytes"] <= budget
    evicted: list[dict] = []
    while True:
        built, decisions = PLANNERS[name](graph, fixed, effort, spec)
        g = built.graph
        peak = placement_summary(g, budget, spec)["peak_on_chip_bytes"]
        switched = {s.value for s in built.switches}
        if not within or peak <= budget or not switched:
            break
        largest = max(switched, key=lambda v: (value_nbytes(g, v), v))
        evicted.append(
            {"value": largest, "chosen": "dram", "reason": "sram_budget", "peak_bytes": peak}
        )
        graph = graph.copy()
        graph.values[largest].location = DRAM
    g.notes["layout_plan"] = record(built, name, decisions + evicted, spec)
    g.verify()
    return g


__all__ = ["ALIASES", "PLANNERS", "plan_layouts"]
