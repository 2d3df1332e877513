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
from ..host import Buffer, Device, Kernel, Program, SlotView
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
    """Value name -> buffer, reusing dead temporaries' buffers. A value that is a view of
    another's buffer (see views.py) gets none: its root's buffer lives from the first
    write of any value in it to the last read of any."""
    graph.verify()
    last = graph.last_uses()
    keep = set(graph.outputs) | {n for n, v in graph.values.items() if v.role in (INPUT, PARAM)}
    end: dict[str, int] = {}  # root -> the node after which its buffer is free
    for i, node in enumerate(graph.nodes):
        for name in node.outputs:
            root = graph.root_of(name)[0]
            end[root] = max(end.get(root, i), last.get(name, i))
        for name in node.inputs:
            root = graph.root_of(name)[0]
            end[root] = max(end.get(root, i), last.get(name, i))
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
                root = graph.root_of(name)[0]
                if root not in bindings:
                    v = graph.values[root]
                    pool = free.setdefault((v.shape, v.dtype), [])
                    bindings[root] = pool.pop() if pool else new(root)
            for root in dict.fromkeys(graph.root_of(n)[0] for n in (*node.inputs, *node.outputs)):
                if root not in keep and end[root] == i:
                    v = graph.values[root]
                    free.setdefault((v.shape, v.dtype), []).append(bindings[root])
    except BaseException:  # the device ran out of memory at a buffer: none of them kept
        release.free_quietly(bindings.values())
        raise
    return bindings


def lower(graph: Graph, dev: Device) -> Lowered:
    """The graph's program on `dev`, and its buffers: those of the program's slots only (a
    parameter or input no kernel reads gets none). A node whose operands share one buffer
    runs no kernel; the kernels name the values in other values' buffers as SlotViews."""
    bindings = plan_buffers(graph, dev)
    try:
        nodes = [n for n in graph.nodes if not graph.elided(n)]
        kernels = [Kernel(n.op, n.inputs, n.outputs, kernel_attrs(graph, n)) for n in nodes]
        views = {}
        for n in nodes:
            for name in (*n.inputs, *n.outputs):
                if graph.values[name].view is not None:
                    root, offset = graph.values[name].view
                    views[name] = SlotView(root, offset, graph.values[name].shape)
        program = dev.create_program(kernels, name=graph.name, views=views)
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
