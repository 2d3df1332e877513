"""The compile step that gives every matrix node of a graph its mapping.

Each gemm/conv2d node is mapped by the Pareto mapper (mapper.py) at the options'
`mapping_effort` for lowest latency, with the operands placement keeps on chip, and the
chosen mapping is recorded in the node's `mapping` attribute: lowering carries it into the
program, so the binary holds it and a replay prices what was chosen. Nodes of the same
signature are mapped once per compile. Mapping never changes what a kernel computes.
"""

from __future__ import annotations

from ..device.kernels.registry import TensorSpec
from ..device.mapping import PROBLEMS
from ..device.spec import MNCORE2, DeviceSpec
from ..host import Kernel
from .ir import Graph
from .mapper import Metrics, map_kernel
from .placement import ON_CHIP


def map_graph(graph: Graph, effort: int, spec: DeviceSpec = MNCORE2) -> Graph:
    g = graph.copy()
    chosen: dict[tuple, tuple[int, ...]] = {}
    for node in g.nodes:
        if node.op not in PROBLEMS:
            continue
        names = [*node.inputs, *node.outputs]
        onchip = tuple(i for i, n in enumerate(names) if g.values[n].location == ON_CHIP)
        attrs = {k: v for k, v in node.attrs.items() if k not in ("mapping", "onchip")}
        if onchip:
            attrs["onchip"] = onchip
        specs = {n: TensorSpec(tuple(g.values[n].shape), g.values[n].dtype) for n in names}
        key = (node.op, tuple((specs[n].shape, specs[n].dtype.name) for n in names),
               tuple(sorted(attrs.items())))  # fmt: skip
        if key not in chosen:
            kernel = Kernel(node.op, node.inputs, node.outputs, attrs)
            front = map_kernel(kernel, spec, Metrics.LATENCY, operands=specs, effort=effort)
            chosen[key] = front.best.mapping.to_attr()
        node.attrs = {**node.attrs, "mapping": chosen[key]}
    return g
