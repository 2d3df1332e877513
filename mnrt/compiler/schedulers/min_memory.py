"""min_memory: a greedy list scheduler (as in classic register-pressure scheduling): of the
nodes whose inputs are ready, run the one that adds the fewest live bytes, counting the
temporaries it frees, ties going to the earliest node; then the greedy placement."""

from __future__ import annotations

from ..ir import TEMP, Graph
from ..liveness import value_nbytes
from .common import Pricer, Request, Scheduled
from .in_order import greedy


def order(graph: Graph) -> Graph:
    g = graph.copy()
    nodes = g.nodes
    producer = {out: i for i, n in enumerate(nodes) for out in n.outputs}
    waiting = [{producer[name] for name in node.inputs if name in producer} for node in nodes]
    readers: dict[str, set[int]] = {}
    for i, node in enumerate(nodes):
        for name in node.inputs:
            readers.setdefault(name, set()).add(i)
    dependents: dict[int, list[int]] = {}
    for i, deps in enumerate(waiting):
        for d in deps:
            dependents.setdefault(d, []).append(i)
    kept = set(g.outputs)

    def growth(i: int) -> int:
        added = sum(value_nbytes(g, o) for o in nodes[i].outputs)
        freed = sum(
            value_nbytes(g, name)
            for name in set(nodes[i].inputs)
            if g.values[name].role == TEMP and name not in kept and readers[name] == {i}
        )
        return added - freed

    ready = {i for i, deps in enumerate(waiting) if not deps}
    chosen: list[int] = []
    while ready:
        best = min(ready, key=lambda i: (growth(i), i))
        ready.remove(best)
        chosen.append(best)
        for name in set(nodes[best].inputs):
            readers[name].discard(best)
        for j in dependents.get(best, ()):
            waiting[j].discard(best)
            if not waiting[j]:
                ready.add(j)
    g.nodes = [nodes[i] for i in chosen]
    g.verify()
    return g


def run(graph: Graph, request: Request, pricer: Pricer) -> Scheduled:
    return greedy(order(graph), request, pricer)
