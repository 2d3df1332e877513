"""How long each value lives in a node order, and how many bytes that holds at once.

A result lives from the node that writes it to its last reader (graph outputs to the end);
a node's inputs and outputs are alive together while it runs. Schedulers, placement, time
slicing and report.json all measure memory this one way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from .ir import TEMP, Graph, Node


def value_nbytes(graph: Graph, name: str) -> int:
    v = graph.values[name]
    return math.prod(v.shape) * v.dtype.itemsize


def peak_live_bytes(graph: Graph) -> int:
    """The most bytes of node results alive at once in this order."""
    last = graph.last_uses()
    live = peak = 0
    for i, node in enumerate(graph.nodes):
        live += sum(value_nbytes(graph, o) for o in node.outputs)
        peak = max(peak, live)
        live -= sum(value_nbytes(graph, o) for o in node.outputs if o not in last)
        live -= sum(
            value_nbytes(graph, name)
            for name in set(node.inputs)
            if graph.values[name].role == TEMP and last.get(name) == i
        )
    return peak


def temporaries(graph: Graph) -> list[str]:
    """The values placement decides about: node results that are not graph outputs (inputs,
    outputs and parameters live in DRAM, where the host writes and reads them)."""
    outputs = set(graph.outputs)
    return [n for n, v in graph.values.items() if v.role == TEMP and n not in outputs]


def live_ranges(nodes: Sequence[Node], outputs: Iterable[str]) -> dict[str, tuple[int, int]]:
    """Node result -> (index of its writer, index of its last reader) in this order: the
    nodes during which it occupies memory (a result nobody reads occupies only its
    writer's; graph `outputs` live to the end). Takes nodes, not a graph, so that a
    search can ask it of orders it only considers."""
    last = {name: i for i, node in enumerate(nodes) for name in node.inputs}
    for name in outputs:
        last[name] = len(nodes)
    return {
        name: (i, max(i, last.get(name, i)))
        for i, node in enumerate(nodes)
        for name in node.outputs
    }
