"""Schedulers: each decides the order nodes run in and where every value lives (PE local
memory, "lm", or DRAM), and some whether a value is recomputed rather than kept. Where a
kernel's operands live decides its modelled time (node_cost: the device's own price), so
the scheduler is what makes on-chip reuse pay, within `sram_budget` bytes of local memory
at every point of the program. Graph inputs, outputs and parameters always live in DRAM,
where the host writes and reads them.

  always_from_dram   the built order, every temporary in DRAM: no on-chip reuse (O0), the
                     baseline.
  reuse_consecutive  (default) the built order; a temporary whose readers are the nodes
                     right after its writer stays on chip (when it fits): the streaming
                     reuse a kernel-to-kernel hand-off gets, cheap and predictable (O1).
  spill_opt          the built order; the on-chip set that minimises modelled time under
                     the budget at every node (capacity-constrained interval selection:
                     exact up to a dozen candidates, else greedy plus local improvement),
                     never worse than reuse_consecutive (O2, O3).
  auto_recompute_sa  simulated annealing from spill_opt's answer over order, spills and
                     recomputation of cheap producers before late readers; seeded chains
                     (CODEGEN_SA_STEPS, CODEGEN_NUM_SA_THREADS), never worse than
                     spill_opt (O4).
  in_order, min_memory, anneal
                     an order only (as built; fewest live bytes, greedily; annealed for the
                     lowest peak), then the greedy placement of placement.place: kept for
                     option files that name them.

Those that price placements price a chain with the local memory its placement leaves its
intermediates (see common.py), as the compiled program is priced. Every scheduler is
deterministic, gives a topological order, never holds more than the budget on chip, and
gives its own account (`Scheduled.account`), which report.json shows
in the "schedule" phase. Adding one: a module with `run(graph, request, pricer)` and a line
in SCHEDULERS.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ...device.spec import MNCORE2, DeviceSpec
from ..ir import Graph
from . import (
    always_from_dram,
    anneal,
    auto_recompute_sa,
    in_order,
    min_memory,
    reuse_consecutive,
    spill_opt,
)
from .auto_recompute_sa import MAX_STEPS, MAX_THREADS, SAOptionError, env_count
from .common import Pricer, Request, Scheduled

Scheduler = Callable[[Graph, Request, Pricer], Scheduled]

SCHEDULERS: dict[str, Scheduler] = {
    "always_from_dram": always_from_dram.run,
    "reuse_consecutive": reuse_consecutive.run,
    "spill_opt": spill_opt.run,
    "auto_recompute_sa": auto_recompute_sa.run,
    "in_order": in_order.run,
    "min_memory": min_memory.run,
    "anneal": anneal.run,
}
DEFAULT = "reuse_consecutive"


def request(
    sram_budget: int, steps: int, envs: Mapping[str, str], spec: DeviceSpec = MNCORE2
) -> Request:
    """The request the options and envs make: CODEGEN_SA_STEPS overrides `steps`
    (sa_expected_run_iters); CODEGEN_NUM_SA_THREADS chains (default 1). Bad env values
    raise SAOptionError naming the env and what to give."""
    steps = env_count(envs, "CODEGEN_SA_STEPS", steps, MAX_STEPS)
    threads = env_count(envs, "CODEGEN_NUM_SA_THREADS", 1, MAX_THREADS)
    return Request(sram_budget, steps, threads, spec)


def schedule(graph: Graph, scheduler: str, req: Request) -> Scheduled:
    """`graph` as `scheduler` orders and places it."""
    result = SCHEDULERS[scheduler](graph, req, Pricer(req.spec))
    result.account = {"scheduler": scheduler, **result.account}
    return result


__all__ = ["DEFAULT", "SCHEDULERS", "Request", "SAOptionError", "Scheduled", "request", "schedule"]
