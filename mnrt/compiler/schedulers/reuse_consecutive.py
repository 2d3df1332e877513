"""reuse_consecutive (the default): the built order; a temporary stays on chip when it is
consumed right after it is produced, that is when its readers are exactly the nodes that
follow its writer (one or several in a row, none in between reading something else
instead), so no other node's result has to displace it. Walking the nodes in order, such a
value stays on chip if it fits the budget beside those already there; every other temporary
goes to DRAM. It is the cheap, predictable reuse a streaming pipeline gets: a result handed
straight to the next kernel never round-trips DRAM."""

from __future__ import annotations

from ..ir import Graph
from .common import Plan, Pricer, Request, Scheduled, account, finish


def consecutive(graph: Graph) -> list[str]:
    """Temporaries whose readers are the nodes right after their writer, in writing order."""
    readers: dict[str, set[int]] = {}
    for i, node in enumerate(graph.nodes):
        for name in node.inputs:
            readers.setdefault(name, set()).add(i)
    chosen = []
    for i, node in enumerate(graph.nodes):
        for name in node.outputs:
            read = readers.get(name)
            if read and read == set(range(i + 1, i + 1 + len(read))):
                chosen.append(name)
    return chosen


def plan(graph: Graph, request: Request, pricer: Pricer) -> Plan:
    p = Plan(graph, request.budget_bytes, pricer)
    for name in consecutive(graph):
        if name in p.size and p.fits(name):
            p.flip(name)
    return p


def run(graph: Graph, request: Request, pricer: Pricer) -> Scheduled:
    p = plan(graph, request, pricer)
    g = finish(graph, graph.nodes, p.lm)
    return Scheduled(g, account(g, request, pricer, spilled_values=len(p.size) - len(p.lm)))
