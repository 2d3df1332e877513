"""legacy: every on-chip value kept in one canonical row-major-over-PEs layout.

A matrix kernel whose mapping wants its on-chip operand in another layout gets a switch
before it (canonical -> its layout), and its on-chip result a switch after it (its layout
-> canonical). No switch is ever traded for DRAM: the planner of older option files
(`row_major`), and the baseline the others improve on.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...device.spec import DeviceSpec
from ..ir import Graph
from ..placement import ON_CHIP
from .common import Built, build, canonical_of


def plan(
    graph: Graph, fixed: Mapping[str, str], effort: int, spec: DeviceSpec
) -> tuple[Built, list]:
    keep = {
        name: canonical_of(graph, name, spec)
        for name, v in graph.values.items()
        if v.location == ON_CHIP and canonical_of(graph, name, spec) is not None
    }
    return build(graph, {**keep, **fixed}, spec=spec), []
