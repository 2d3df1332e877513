"""Lowering a graph to a device program and a buffer plan.

Every graph value becomes a program slot of the same name. Inputs, parameters and outputs
get buffers of their own; a temporary takes a buffer that an earlier temporary of the same
shape and dtype no longer needs (its last reader has run), else a new one. A buffer freed
by node i is reused from node i+1 on, so no kernel reads and writes one buffer unless the
graph says so. Kernels whose operands placement kept in PE local memory say so in their
`onchip` attribute.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..device.dtypes import DType
from ..host import Buffer, Device, Kernel, Program
from . import release
from .ir import INPUT, PARAM, Graph, Node
from .placement import ON_CHIP


@dataclass
class Lowered:
    """A graph on a device: its program and the buffer bound to each slot."""

    graph: Graph
    program: Program
    bindings: dict[str, Buffer]

    @property
    def distinct_buffers(self) -> int:
        return len({id(b) for b in self.bindings.values()})


def plan_buffers(graph: Graph, dev: Device) -> dict[str, Buffer]:
    """Value name -> buffer, reusing dead temporaries' buffers."""
    graph.verify()
    last = graph.last_uses()
    keep = set(graph.outputs) | {n for n, v in graph.values.items() if v.role in (INPUT, PARAM)}
    bindings: dict[str, Buffer] = {}
    free: dict[tuple[tuple[int, ...], DType], list[Buffer]] = {}

    def new(name: str) -> Buffer:
        v = graph.values[name]
        return dev.create_buffer(v.shape, v.dtype, name=f"{graph.name}.{name}")

    try:
        for name in keep:
            bindings[name] = new(name)
        for i, node in enumerate(graph.nodes):
            for name in node.outputs:
                if name in keep:
                    continue
                v = graph.values[name]
                pool = free.setdefault((v.shape, v.dtype), [])
                bindings[name] = pool.pop() if pool else new(name)
                if name not in last:  # never read: free again at once
                    pool.append(bindings[name])
            for name in dict.fromkeys(node.inputs):
                if name not in keep and last.get(name) == i:
                    v = graph.values[name]
                    free.setdefault((v.shape, v.dtype), []).append(bindings[name])
    except BaseException:  # the device ran out of memory at a buffer: none of them kept
        release.free_quietly(bindings.values())
        raise
    return bindings


def lower(graph: Graph, dev: Device) -> Lowered:
    """The graph's program on `dev`, and its buffers: those of the program's slots only (a
    parameter or input no kernel reads gets none)."""
    bindings = plan_buffers(graph, dev)
    try:
        kernels = [Kernel(n.op, n.inputs, n.outputs, kernel_attrs(graph, n)) for n in graph.nodes]
        program = dev.create_program(kernels, name=graph.name)
    except BaseException:
        release.free_quietly(bindings.values())
        raise
    slots = {slot: bindings[slot] for slot in program.slots}
    bound = {id(b) for b in slots.values()}
    release.free(b for b in bindings.values() if id(b) not in bound)
    return Lowered(graph, program, slots)


def kernel_attrs(graph: Graph, node: Node) -> dict:
    """The node's attributes, with `onchip` the operands placement kept in local memory
    (so the timing model prices them as on-chip traffic): placement alone decides it, so
    an `onchip` the node was built with is replaced, or dropped when nothing is on chip."""
    operands = [*node.inputs, *node.outputs]
    onchip = tuple(i for i, name in enumerate(operands) if graph.values[name].location == ON_CHIP)
    attrs = {k: v for k, v in node.attrs.items() if k != "onchip"}
    return {**attrs, "onchip": onchip} if onchip else attrs
