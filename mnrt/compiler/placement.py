"""Where each value lives: on-chip local memory within `sram_budget`, else DRAM.

`place` is the greedy placement of the schedulers in_order, min_memory and anneal (the
others decide placement themselves, see mnrt/compiler/schedulers). Walking the scheduled
nodes in order, each temporary a node writes goes to the PEs' local memory ("lm") while the
temporaries already there plus it fit the budget, and leaves it after its last reader; the
rest spill to DRAM. Graph inputs, outputs and parameters are in
DRAM: the host writes and reads them there. A budget of 0 is the whole chip's local memory.
Lowering tells each kernel which of its operands stay on chip (its `onchip` attribute), which
the timing model prices as on-chip rather than DRAM traffic; l3ir.txt and report.json show
the placement. The emulated device computes on its buffers wherever they are placed.
`chain_room` then tells each chain what of the budget its intermediates may take.
"""

from __future__ import annotations

from collections.abc import Callable

from ..device.kernels import chain
from ..device.spec import MNCORE2, DeviceSpec
from .ir import Graph, Node
from .liveness import temporaries, value_nbytes

ON_CHIP, DRAM = "lm", "dram"


def on_chip_bytes(spec: DeviceSpec = MNCORE2) -> int:
    """Local memory of every PE on the chip: what a budget of 0 means."""
    return spec.pe_count * spec.lm_bytes_per_pe


def _walk(
    graph: Graph,
    on_chip: Callable[[str, int], bool] | None = None,
    running: Callable[[Node, int], None] | None = None,
) -> int:
    """Go through the nodes in order, asking `on_chip(value, live bytes)` of each value a
    node writes (by default: where it was placed) and telling `running(node, live bytes)`
    what is on chip while the node runs (its operands there included); a value on chip is
    freed after its last reader. Returns the peak."""
    if on_chip is None:

        def on_chip(name: str, live: int) -> bool:
            return graph.values[name].location == ON_CHIP

    last = graph.last_uses()
    live = peak = 0
    for i, node in enumerate(graph.nodes):
        for name in node.outputs:
            if on_chip(name, live):
                live += value_nbytes(graph, name)
        if running is not None:
            running(node, live)
        peak = max(peak, live)
        for name in {*node.inputs, *node.outputs}:
            if graph.values[name].location == ON_CHIP and last.get(name, i) == i:
                live -= value_nbytes(graph, name)
    return peak


def place(graph: Graph, budget: int, spec: DeviceSpec = MNCORE2) -> Graph:
    g = graph.copy()
    budget = budget or on_chip_bytes(spec)
    temps = set(temporaries(g))
    for v in g.values.values():
        v.location = DRAM
    for node in g.nodes:  # where operands live is this pass's to say, not the model's
        node.attrs.pop("onchip", None)

    def on_chip(name: str, live: int) -> bool:
        if name in temps and live + value_nbytes(g, name) <= budget:
            g.values[name].location = ON_CHIP
        return g.values[name].location == ON_CHIP

    _walk(g, on_chip)
    return g


def chain_room(graph: Graph, budget: int, spec: DeviceSpec = MNCORE2) -> Graph:
    """Give each chain the local memory its intermediates may take (its `lm_room`): the
    budget less what the program keeps on chip while the chain runs. Without it the timing
    model would keep a chain's intermediates in the chip's whole local memory whatever
    sram_budget says and whatever else is there. Runs after every step that decides where
    values live (scheduling, layout planning)."""
    g = graph.copy()
    budget = budget or on_chip_bytes(spec)

    def running(node: Node, live: int) -> None:
        if node.op == chain.NAME:
            node.attrs["lm_room"] = max(0, budget - live)

    _walk(g, running=running)
    return g


def summary(graph: Graph, budget: int, spec: DeviceSpec = MNCORE2) -> dict:
    """report.json's account: the budget, the most bytes on chip at once, and how many
    temporaries stayed on chip, share a DRAM buffer (see views.py) or spilled."""
    peak = _walk(graph)
    temps = temporaries(graph)
    on_chip = sum(graph.values[n].location == ON_CHIP for n in temps)
    roots = {v.view[0] for v in graph.values.values() if v.view is not None}
    shared = sum(
        graph.values[n].location != ON_CHIP and (graph.values[n].view is not None or n in roots)
        for n in temps
    )
    return {
        "budget_bytes": budget or on_chip_bytes(spec),
        "peak_on_chip_bytes": peak,
        "on_chip_values": on_chip,
        "shared_values": shared,
        "spilled_values": len(temps) - on_chip - shared,
    }
