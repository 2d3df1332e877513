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
  switches saved. Searching a front costs far more than pricing a plan, so only the
  `FRONT_NODES` kernels next to the dearest switches and detours are tried, over the space
  of effort at most `FRONT_EFFORT` (each point of it is a valid mapping; the kernel's own
  mapping, from the preset's effort, stays the one to beat).
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
FRONT_NODES = 6  # matrix kernels whose front is searched
FRONT_EFFORT = 3  # the largest mapper effort those searches use


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


def _dearest(graph: Graph, decisions: list[dict], built: Built) -> list[int]:
    """Indices of the mapped matrix nodes next to a switched or detoured value, those whose
    values' switches cost most first (at most FRONT_NODES)."""
    dear: dict[str, float] = {}
    for d in decisions:
        if "on_chip_with_switches_s" in d:
            dear[d["value"]] = max(d["on_chip_with_switches_s"], d["through_dram_s"])
    for s in built.switches:
        dear.setdefault(s.value, 0.0)
    ranked = []
    for i, node in enumerate(graph.nodes):
        if node.op in PROBLEMS and node.attrs.get("mapping"):
            near = [dear[v] for v in (*node.inputs, *node.outputs) if v in dear]
            if near:
                ranked.append((-max(near), i))
    return [i for _, i in sorted(ranked)[:FRONT_NODES]]


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
    g = graph
    for i in _dearest(graph, best[1], best[0]):
        node = graph.nodes[i]
        for mapping in _alternatives(g, node, min(effort, FRONT_EFFORT), spec):
            if tries >= MAX_TRIES:
                break
            tries += 1
            trial_graph = g.copy()
            trial_graph.nodes[i].attrs["mapping"] = mapping
            got = lpz.plan(trial_graph, fixed, effort, spec, prefer)
            if (cost := _cost(got[0], spec)) < best_s:
                best, best_s, g = got, cost, trial_graph
    return best
