"""What one graph node will cost on the device once lowered: the device's own price
(`device.mapping.model_kernel_call`) for the kernel lowering makes of it, with the operands
placement keeps on chip. Schedulers and layout planners compare their choices by it, so
what they optimise is what a replay reports."""

from __future__ import annotations

from ..device.cost import Modelled
from ..device.kernels import KernelDef, TensorSpec, lookup
from ..device.mapping import model_kernel_call
from ..device.spec import MNCORE2, DeviceSpec
from .ir import Graph, Node
from .lower import kernel_attrs

# Prices already worked out, by what decides them: a layout planner prices the same few
# thousand kernels tens of thousands of times over (MaxViT-T at O3: 48072 prices, 1917
# different), and a chain's price alone walks all its steps.
_PRICES: dict[tuple, tuple[KernelDef, Modelled]] = {}
_PRICES_LIMIT = 1 << 16
NOTHING = Modelled(0.0, 0.0)


def node_cost(graph: Graph, node: Node, spec: DeviceSpec = MNCORE2) -> Modelled:
    """The modelled time and energy of `node` with the graph's current placement (nothing
    for a node that runs no kernel: see views.py)."""
    if graph.elided(node):
        return NOTHING
    values = graph.values
    ins = tuple(TensorSpec(tuple(values[n].shape), values[n].dtype) for n in node.inputs)
    outs = tuple(TensorSpec(tuple(values[n].shape), values[n].dtype) for n in node.outputs)
    kdef, attrs = lookup(node.op), kernel_attrs(graph, node)
    try:
        key = (spec, node.op, ins, outs, tuple(sorted(attrs.items())))
        kept = _PRICES.get(key)
    except TypeError:  # an attribute value that is not hashable (a list): priced afresh
        key = kept = None
    if kept is not None and kept[0] is kdef:
        return kept[1]
    price = model_kernel_call(spec, kdef, ins, outs, attrs)
    if key is not None:
        if len(_PRICES) >= _PRICES_LIMIT:
            _PRICES.clear()
        _PRICES[key] = (kdef, price)
    return price


def graph_cost(graph: Graph, spec: DeviceSpec = MNCORE2) -> Modelled:
    """The modelled cost of running every node in order (one queue: times add up)."""
    time_s = energy_j = flops = dram = 0.0
    for node in graph.nodes:
        m = node_cost(graph, node, spec)
        time_s += m.time_s
        energy_j += m.energy_j
        flops += m.flops
        dram += m.dram_bytes
    return Modelled(time_s, energy_j, flops, dram, "compute")
