"""always_from_dram: the built order with every temporary in DRAM, so every kernel reads
its operands from DRAM and writes its results back (O0: no on-chip reuse). The baseline
the other schedulers are measured against."""

from __future__ import annotations

from ..ir import Graph
from ..liveness import temporaries
from .common import Pricer, Request, Scheduled, account, finish


def run(graph: Graph, request: Request, pricer: Pricer) -> Scheduled:
    g = finish(graph, graph.nodes, ())
    return Scheduled(g, account(g, request, pricer, spilled_values=len(temporaries(g))))
