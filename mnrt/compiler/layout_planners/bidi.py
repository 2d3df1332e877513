"""bidi: lpz, with layouts also chosen backwards from the consumers.

Two moves, each kept only when it lowers the whole graph's modelled time (graph_cost, the
device's own price), so bidi is never worse than lpz on the same graph:

- A layout-preserving chain between a producer and a consumer that needs another layout
  (gemm -> relu -> add -> gemm) may switch anywhere along it; lpz switches last, just
  before the consumer. bidi tries switching each value upstream along the chain instead
  (the whole rest of the chain then carries the consumer's layout), which pays when an
  earlier value is smaller or feeds other consumers wanting that layout.
- A matrix kernel next to a switch or a DRAM detour may take another point of its mapper
  front (the mapper's points within `FRONT_TOLERANCE` of its fastest, map_kernel) whose
  layouts agree with its neighbours', when the kernel's own slowdown is less than the
  switches saved.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from ...device.kernels import TensorSpec
from ...device.mapping import PROBLEMS
from ...device.spec import DeviceSpec
from ...host import Kernel
from ..ir import Graph, Node
from ..mapper import Metrics, map_kernel
from ..node_cost import graph_cost
from ..placement import ON_CHIP
from . import lpz
from .common import ARRANGED, Built

FRONT_TOLERANCE = 0.25  # slowest front point tried, relative to the kernel's fastest
ALTERNATIVES = 4  # front points tried per matrix kernel
MAX_TRIES = 96  # plans priced at most (compile time stays bounded on large graphs)


def _cost(built: Built, spec: DeviceSpec) -> float:
    return graph_cost(built.graph, spec).time_s


def _chain(graph: Graph, value: str) -> list[str]:
    """Values upstream of `value` whose layout it inherits through layout-preserving
    kernels, nearest first."""
    producer = {o: n for n in graph.nodes for o in n.outputs}
    out = []
    while value in producer:
        node = producer[value]
        shape = graph.values[value].shape
        same = [i for i in node.inputs if graph.values[i].shape == shape]
        if node.op in ARRANGED or not same or graph.values[same[0]].location != ON_CHIP:
            break
        value = same[0]
        out.append(value)
    return out


@functools.lru_cache(maxsize=1024)
def _front(op: str, names: tuple, specs: tuple, attrs: tuple, n_in: int, effort: int, spec):
    kernel = Kernel(op, list(names[:n_in]), list(names[n_in:]), dict(attrs))
    front = map_kernel(
        kernel, spec, Metrics.LATENCY | Metrics.ENERGY, operands=dict(zip(names, specs)),
        effort=effort,
    )  # fmt: skip
    fastest = min(p.time_s for p in front.points)
    points = [p for p in front.points if p.time_s <= fastest * (1 + FRONT_TOLERANCE)]
    return tuple(p.mapping.to_attr() for p in points[: ALTERNATIVES + 1])


def _alternatives(graph: Graph, node: Node, effort: int, spec: DeviceSpec) -> list[tuple]:
    names = tuple([*node.inputs, *node.outputs])
    onchip = tuple(i for i, n in enumerate(names) if graph.values[n].location == ON_CHIP)
    attrs = {k: v for k, v in node.attrs.items() if k not in ("mapping", "onchip")}
    if onchip:
        attrs["onchip"] = onchip
    specs = tuple(TensorSpec(tuple(graph.values[n].shape), graph.values[n].dtype) for n in names)
    found = _front(
        node.op, names, specs, tuple(sorted(attrs.items())), len(node.inputs), effort, spec
    )
    return [m for m in found if m != tuple(node.attrs.get("mapping", ()))]


def plan(
    graph: Graph, fixed: Mapping[str, str], effort: int, spec: DeviceSpec
) -> tuple[Built, list]:
    best = lpz.plan(graph, fixed, effort, spec)
    best_s, tries = _cost(best[0], spec), 0
    prefer: dict[str, str] = {}
    for s in list(best[0].switches):
        if not s.where.startswith("before"):
            continue
        for upstream in _chain(graph, s.value):
            if tries >= MAX_TRIES or upstream in fixed:
                break
            tries += 1
            trial = {**prefer, upstream: s.dst}
            got = lpz.plan(graph, fixed, effort, spec, trial)
            if (cost := _cost(got[0], spec)) < best_s:
                best, best_s, prefer = got, cost, trial
    touched = {s.value for s in best[0].switches} | {d["value"] for d in best[1]}
    g = graph
    for i, node in enumerate(graph.nodes):
        if node.op not in PROBLEMS or not node.attrs.get("mapping"):
            continue
        if not touched & {*node.inputs, *node.outputs}:
            continue
        for mapping in _alternatives(g, node, effort, spec):
            if tries >= MAX_TRIES:
                break
            tries += 1
            trial_graph = g.copy()
            trial_graph.nodes[i].attrs["mapping"] = mapping
            got = lpz.plan(trial_graph, fixed, effort, spec, prefer)
            if (cost := _cost(got[0], spec)) < best_s:
                best, best_s, g = got, cost, trial_graph
    return best
