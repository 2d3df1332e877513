"""What one graph node will cost on the device once lowered: the device's own price
(`device.mapping.model_kernel_call`) for the kernel lowering makes of it, with the operands
placement keeps on chip. Schedulers and layout planners compare their choices by it, so
what they optimise is what a replay reports."""

from __future__ import annotations

from ..device.cost import Modelled
from ..device.kernels import TensorSpec, lookup
from ..device.mapping import model_kernel_call
from ..device.spec import MNCORE2, DeviceSpec
from .ir import Graph, Node
from .lower import kernel_attrs


def node_cost(graph: Graph, node: Node, spec: DeviceSpec = MNCORE2) -> Modelled:
    """The modelled time and energy of `node` with the graph's current placement."""
    values = graph.values
    ins = [TensorSpec(tuple(values[n].shape), values[n].dtype) for n in node.inputs]
    outs = [TensorSpec(tuple(values[n].shape), values[n].dtype) for n in node.outputs]
    return model_kernel_call(spec, lookup(node.op), ins, outs, kernel_attrs(graph, node))


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
