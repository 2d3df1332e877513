"""Node order: which topological order of the graph the program runs in.

The order decides how many temporaries are alive at once, and so how many buffers the
lowering's reuse plan needs. `in_order` keeps the order the graph was built in;
`min_memory` is a greedy list scheduler (as in classic register-pressure scheduling): of
the nodes whose inputs are ready, run the one that adds the fewest live bytes, counting
the temporaries it frees, ties going to the earliest node. `anneal` starts from that order
and runs `sa_expected_run_iters` steps of simulated annealing over swaps of adjacent
independent nodes, keeping the order with the lowest peak; it is seeded, so a compile is
reproducible.
"""

from __future__ import annotations

import math

import numpy as np

from .ir import TEMP, Graph


def value_nbytes(graph: Graph, name: str) -> int:
    v = graph.values[name]
    return math.prod(v.shape) * v.dtype.itemsize


def peak_live_bytes(graph: Graph) -> int:
    """The most bytes of node results alive at once in this order: a result lives from the
    node that writes it to its last reader (graph outputs to the end), and a node's inputs
    and outputs are alive together while it runs."""
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


def min_memory(graph: Graph) -> Graph:
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
    order: list[int] = []
    while ready:
        best = min(ready, key=lambda i: (growth(i), i))
        ready.remove(best)
        order.append(best)
        for name in set(nodes[best].inputs):
            readers[name].discard(best)
        for j in dependents.get(best, ()):
            waiting[j].discard(best)
            if not waiting[j]:
                ready.add(j)
    g.nodes = [nodes[i] for i in order]
    g.verify()
    return g


def anneal(graph: Graph, steps: int) -> Graph:
    g = min_memory(graph)
    order = list(g.nodes)
    cost = best_cost = peak_live_bytes(g)
    best = list(order)
    if len(order) < 2:
        return g
    rng = np.random.default_rng(0)
    scale = max(cost, 1) / 10  # a swap costing a tenth of the peak is taken early on
    for step in range(steps):
        i = int(rng.integers(len(order) - 1))
        first, second = order[i], order[i + 1]
        if set(first.outputs) & set(second.inputs):
            continue
        order[i], order[i + 1] = second, first
        g.nodes = order
        new = peak_live_bytes(g)
        heat = scale * (1 - step / steps)
        if new <= cost or (heat > 0 and rng.random() < math.exp((cost - new) / heat)):
            cost = new
            if cost < best_cost:
                best_cost, best = cost, list(order)
        else:
            order[i], order[i + 1] = first, second
    g.nodes = best
    g.verify()
    return g


def schedule(graph: Graph, scheduler: str, steps: int) -> Graph:
    """The graph in the order `scheduler` picks (`steps`: annealing steps for anneal)."""
    if scheduler == "min_memory":
        return min_memory(graph)
    if scheduler == "anneal":
        return anneal(graph, steps)
    return graph


SCHEDULERS = ("in_order", "min_memory", "anneal")
