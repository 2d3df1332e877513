"""in_order: the order the graph was built in, with the greedy placement (placement.place):
each temporary stays on chip while it fits the budget, in the order nodes write them."""

from __future__ import annotations

from .. import placement
from ..ir import Graph
from .common import Pricer, Request, Scheduled, account


def greedy(ordered: Graph, request: Request, pricer: Pricer) -> Scheduled:
    """`ordered` placed greedily: what in_order, min_memory and anneal share."""
    g = placement.place(ordered, request.budget, request.spec)
    return Scheduled(g, account(g, request, pricer))


def run(graph: Graph, request: Request, pricer: Pricer) -> Scheduled:
    return greedy(graph, request, pricer)
