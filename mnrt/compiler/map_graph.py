"""The compile step that gives every matrix node of a graph its mapping.

Each gemm/conv2d node is mapped by the Pareto mapper (mapper.py) at the options'
`mapping_effort` for lowest latency, with the operands placement keeps on chip, and the
chosen mapping is recorded in the node's `mapping` attribute: lowering carries it into the
program, so the binary holds it and a replay prices what was chosen. Nodes of the same
signature are mapped once per process. Mapping never changes what a kernel computes.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..device.kernels import chain
from ..device.kernels.registry import TensorSpec
from ..device.mapping import PROBLEMS, Mapping
from ..device.spec import MNCORE2, DeviceSpec
from ..host import Kernel
from .ir import Graph, Node
from .mapper import Front, Metrics, map_kernel
from .placement import ON_CHIP

_FRONTS: dict[tuple, Front] = {}
_FRONTS_LIMIT = 1024


def _fronts(graph: Graph, effort: int, spec: DeviceSpec) -> Iterator[tuple[Node, Front]]:
    """Each matrix node with its front (see `_front`)."""
    for node in graph.nodes:
        front = _front(graph, node, effort, spec)
        if front is not None:
            yield node, front


def _front(graph: Graph, node: Node, effort: int, spec: DeviceSpec) -> Front | None:
    """A matrix node's front, or None for another node: nodes of one signature share one
    search, in this compile and the next (a model compiled again at another preset maps
    only what changed)."""
    matrix = _matrix_kernel(graph, node)
    if matrix is None:
        return None
    op, inputs, outputs, attrs, specs, onchip = matrix
    names = [*inputs, *outputs]
    if onchip:
        attrs["onchip"] = onchip
    key = (op, tuple((specs[n].shape, specs[n].dtype.name) for n in names),
           tuple(sorted(attrs.items())))  # fmt: skip
    key = (*key, effort, spec)
    if key not in _FRONTS:
        kernel = Kernel(op, inputs, outputs, attrs)
        if len(_FRONTS) >= _FRONTS_LIMIT:
            _FRONTS.clear()
        _FRONTS[key] = map_kernel(kernel, spec, Metrics.LATENCY, operands=specs, effort=effort)
    return _FRONTS[key]


def mapped(graph: Graph, node: Node, effort: int, spec: DeviceSpec = MNCORE2) -> Node:
    """`node` as map_graph would leave it on the graph as it stands: a gemm or conv2d with
    the mapping the mapper finds at `effort`, any other node as it is. For a pass that
    weighs a choice by what the kernels will cost once mapped."""
    if node.op not in PROBLEMS:
        return node
    front = _front(graph, node, effort, spec)
    attrs = {**node.attrs, "mapping": front.best.mapping.to_attr()}
    return Node(node.op, node.inputs, node.outputs, attrs, node.name)


def _matrix_kernel(graph: Graph, node: Node) -> tuple | None:
    """(op, inputs, outputs, attributes, specs by name, operands on chip) of the matrix
    kernel a node runs: a gemm or conv2d, or the one a chain holds (its product, which
    stays on chip, and its input after a prologue named after the chain's output); None
    for any other node."""
    values = graph.values
    specs = {n: TensorSpec(tuple(values[n].shape), values[n].dtype) for n in node.inputs}
    if node.op in PROBLEMS:
        op, inputs, outputs, attrs = node.op, node.inputs, node.outputs, node.attrs
        specs.update((n, TensorSpec(tuple(values[n].shape), values[n].dtype)) for n in outputs)
        product = None
    elif node.op == chain.NAME and node.attrs.get("mapping"):
        at = chain.matrix_step(node.attrs)
        step = chain.plan(node.attrs, [specs[n] for n in node.inputs])[at]
        first = step.takes[0]
        x = node.inputs[0] if at == 0 else f"{node.outputs[0]}.input"  # after the prologue
        op, attrs, specs[x] = step.op, dict(step.attrs), step.ins[0]
        inputs = [x, *node.inputs[first : first + len(step.takes)]]
        product = f"{node.outputs[0]}.product"
        outputs, specs[product] = [product], step.y
    else:
        return None
    names = [*inputs, *outputs]
    kept = [n == product or (n in values and values[n].location == ON_CHIP) for n in names]
    attrs = {k: v for k, v in attrs.items() if k not in ("mapping", "onchip")}
    return op, inputs, outputs, attrs, specs, tuple(i for i, on in enumerate(kept) if on)


def map_graph(graph: Graph, effort: int, spec: DeviceSpec = MNCORE2) -> Graph:
    g = graph.copy()
    g.nodes = [mapped(g, node, effort, spec) for node in g.nodes]
    return g


def explain(graph: Graph, effort: int, spec: DeviceSpec = MNCORE2) -> str:
    """For every matrix node (and chain holding a matrix kernel): the mapping chosen, and
    the best alternatives turned down with the resource or metric that ruled each out
    (`mnrt compile --explain`). A chain runs the mapping its matrix kernel was given
    alone, before the chain took it (its product then in DRAM); the mapper, weighing the
    kernel as the chain holds it (its product on chip), may prefer another: then both are
    named, so that "chosen" never names a mapping the binary does not run."""

    def explained(node: Node, front: Front) -> str:
        if node.op in PROBLEMS:
            return f"{node.name} ({node.op}):\n{front.explain()}"
        op = chain.listed(node.attrs)[chain.matrix_step(node.attrs)].op
        text = front.explain()
        runs = tuple(node.attrs["mapping"])
        if runs != front.best.mapping.to_attr():
            text = (
                f"runs: {Mapping.from_attr(runs)} (chosen for the {op} alone, before the "
                f"chain took it)\n" + text.replace("chosen:", "with its product on chip:", 1)
            )
        return f"{node.name} ({node.op} with {op}):\n{text}"

    return "\n".join(explained(node, front) for node, front in _fronts(graph, effort, spec))
