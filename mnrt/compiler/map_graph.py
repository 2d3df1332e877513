"""The compile step that gives every matrix node of a graph its mapping.

Each gemm/conv2d node is mapped by the Pareto mapper (mapper.py) at the options'
`mapping_effort` for lowest latency, with the operands placement keeps on chip, and the
chosen mapping is recorded in the node's `mapping` attribute: lowering carries it into the
program, so the binary holds it and a replay prices what was chosen. Nodes of the same
signature are mapped once per process. Mapping never changes what a kernel computes.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..device.kernels.registry import TensorSpec
from ..device.mapping import PROBLEMS
from ..device.spec import MNCORE2, DeviceSpec
from ..host import Kernel
from .ir import Graph, Node
from .mapper import Front, Metrics, map_kernel
from .placement import ON_CHIP

_FRONTS: dict[tuple, Front] = {}
_FRONTS_LIMIT = 1024


def _fronts(graph: Graph, effort: int, spec: DeviceSpec) -> Iterator[tuple[Node, Front]]:
    """Each matrix node with its front: nodes of one signature share one search, in this
    compile and the next (a model compiled again at another preset maps only what changed)."""
    for node in graph.nodes:
        if node.op not in PROBLEMS:
            continue
        names = [*node.inputs, *node.outputs]
        onchip = tuple(i for i, n in enumerate(names) if graph.values[n].location == ON_CHIP)
        attrs = {k: v for k, v in node.attrs.items() if k not in ("mapping", "onchip")}
        if onchip:
            attrs["onchip"] = onchip
        values = graph.values
        specs = {n: TensorSpec(tuple(values[n].shape), values[n].dtype) for n in names}
        key = (node.op, tuple((specs[n].shape, specs[n].dtype.name) for n in names),
               tuple(sorted(attrs.items())))  # fmt: skip
        key = (*key, effort, spec)
        if key not in _FRONTS:
            kernel = Kernel(node.op, node.inputs, node.outputs, attrs)
            if len(_FRONTS) >= _FRONTS_LIMIT:
                _FRONTS.clear()
            _FRONTS[key] = map_kernel(kernel, spec, Metrics.LATENCY, operands=specs, effort=effort)
        yield node, _FRONTS[key]


def map_graph(graph: Graph, effort: int, spec: DeviceSpec = MNCORE2) -> Graph:
    g = graph.copy()
    for node, front in list(_fronts(g, effort, spec)):
        node.attrs = {**node.attrs, "mapping": front.best.mapping.to_attr()}
    return g


def explain(graph: Graph, effort: int, spec: DeviceSpec = MNCORE2) -> str:
    """For every matrix node: the mapping chosen, and the best alternatives turned down with
    the resource or metric that ruled each out (`mnrt compile --explain`)."""
    return "\n".join(
        f"{node.name} ({node.op}):\n{front.explain()}"
        for node, front in _fronts(graph, effort, spec)
    )
