"""lpz (lazy): a value keeps the layout its producer leaves it in; a switch goes only before
a consumer that needs another, one per (value, layout) however many consumers share it.
Where a value's switches cost more than sending it through DRAM (both priced by
node_cost: its producer and consumers as they would run, and the switches), it goes to
DRAM instead; values so moved can change what later kernels are given, so the plan is
redone until no further value moves.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...device.spec import DeviceSpec
from ..ir import Graph
from .common import Built, build, decide


def plan(
    graph: Graph,
    fixed: Mapping[str, str],
    effort: int,
    spec: DeviceSpec,
    prefer: Mapping[str, str] | None = None,
) -> tuple[Built, list]:
    """The lazy plan; `prefer` names layouts to switch values into right after their
    producer (bidi's backward choices), below the user's fixed layouts."""
    keep = {**(prefer or {}), **fixed}
    to_dram: set[str] = set()
    decisions: dict[str, dict] = {}
    while True:
        built = build(graph, keep, frozenset(to_dram), spec)
        moved = set()
        for value in dict.fromkeys(s.value for s in built.switches):
            d = decide(built, value, spec)
            decisions[value] = d
            if d["chosen"] == "dram":
                moved.add(value)
        if not moved:
            return built, list(decisions.values())
        to_dram |= moved
