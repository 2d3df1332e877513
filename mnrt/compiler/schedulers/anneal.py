"""anneal: starts from min_memory's order and runs the request's steps of simulated
annealing over swaps of adjacent independent nodes, keeping the order with the lowest peak
of live bytes; then the greedy placement. Seeded, so a compile is reproducible."""

from __future__ import annotations

import math

import numpy as np

from ..ir import Graph
from ..liveness import peak_live_bytes
from . import min_memory
from .common import Pricer, Request, Scheduled
from .in_order import greedy


def order(graph: Graph, steps: int) -> Graph:
    g = min_memory.order(graph)
    nodes = list(g.nodes)
    cost = best_cost = peak_live_bytes(g)
    best = list(nodes)
    if len(nodes) < 2:
        return g
    rng = np.random.default_rng(0)
    scale = max(cost, 1) / 10  # a swap costing a tenth of the peak is taken early on
    for step in range(steps):
        i = int(rng.integers(len(nodes) - 1))
        first, second = nodes[i], nodes[i + 1]
        if set(first.outputs) & set(second.inputs):
            continue
        nodes[i], nodes[i + 1] = second, first
        g.nodes = nodes
        new = peak_live_bytes(g)
        heat = scale * (1 - step / steps)
        if new <= cost or (heat > 0 and rng.random() < math.exp((cost - new) / heat)):
            cost = new
            if cost < best_cost:
                best_cost, best = cost, list(nodes)
        else:
            nodes[i], nodes[i + 1] = first, second
    g.nodes = best
    g.verify()
    return g


def run(graph: Graph, request: Request, pricer: Pricer) -> Scheduled:
    return greedy(order(graph, request.steps), request, pricer)
