"""Layout planners: which layout each on-chip value has, and where explicit layout switches
(`relayout` kernels) go between producers and consumers that disagree (common.py).

A planner is one module with `plan(graph, fixed, effort, spec) -> (Built, decisions)` and
one line in `PLANNERS`; the `layout_planner` option's choices are its keys (and `ALIASES`,
older names). `plan_layouts` is the compile's layout step: it runs the chosen planner with
the user's layout_spec / gemm_layout_spec as fixed layouts, and records the plan in the
graph's notes, which the codegen_dir gets as layout_plan.json.
"""

from __future__ import annotations

from ...device.spec import MNCORE2, DeviceSpec
from ..ir import Graph
from ..layout import fixed_layouts
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
) -> Graph:
    """`graph` with every value's layout recorded and the planner's switches inserted."""
    name = ALIASES.get(planner, planner)
    fixed = fixed_layouts(graph, layout_spec, gemm_layout_spec)
    built, decisions = PLANNERS[name](graph, fixed, effort, spec)
    g = built.graph
    g.notes["layout_plan"] = record(built, name, decisions, spec)
    g.verify()
    return g


__all__ = ["ALIASES", "PLANNERS", "plan_layouts"]
