"""spill_opt: the built order, with the set of on-chip temporaries that minimises modelled
program time (energy breaking ties) while the bytes on chip never exceed the budget at any
node. It is a capacity-constrained interval selection: each temporary is an interval (its
writer to its last reader) weighing its bytes, worth the time node_cost says keeping it on
chip saves.

Up to EXACT_LIMIT candidates every subset is priced (a Gray-code walk flips one value per
step, so each subset costs only its flipped value's nodes), which finds the optimum. Beyond
that: a greedy start (the cheaper of reuse_consecutive's and the greedy placement's
choice), then rounds of local improvement until none helps: add a value where it fits and
saves, else make room for it by evicting the overlapping on-chip values worth least per
byte-node, when the exchange saves. The answer is never worse than reuse_consecutive's:
the cheapest of the starts and the search is kept."""

from __future__ import annotations

from .. import placement
from ..ir import Graph
from ..placement import ON_CHIP
from . import reuse_consecutive
from .common import Plan, Price, Pricer, Request, Scheduled, account, finish

EXACT_LIMIT = 12  # 4096 subsets: milliseconds for the models of tests and benchmarks
ROUNDS = 4  # local improvement rounds; each is a pass over every candidate


def _saves(d: Price) -> bool:
    return d[0] < 0 or (d[0] == 0 and d[1] < 0)


def _exact(graph: Graph, budget: int, pricer: Pricer, candidates: list[str]) -> set[str]:
    plan = Plan(graph, budget, pricer)
    best, best_lm = _rank(plan), set()
    for k in range(1, 1 << len(candidates)):
        plan.flip(candidates[(k & -k).bit_length() - 1])
        if plan.over == 0 and _rank(plan) < best:
            best, best_lm = _rank(plan), set(plan.lm)
    return best_lm


def _rank(plan: Plan) -> tuple[float, float, int]:
    """Least time, then energy, then the most values on chip (the fewest spills)."""
    price = plan.price()
    return (price[0], price[1], -len(plan.lm))


def _density(plan: Plan, name: str, d: Price) -> float:
    first, last = plan.ranges[name]
    return -d[0] / (plan.size[name] * (last - first + 1))


def _room(plan: Plan, name: str) -> list[str] | None:
    """On-chip values to evict so that `name` fits, least valuable first; None if even
    evicting every overlapping one is not enough."""
    first, last = plan.ranges[name]
    span = range(first, last + 1)
    overlapping = [
        u for u in sorted(plan.lm) if plan.ranges[u][0] <= last and plan.ranges[u][1] >= first
    ]
    overlapping.sort(key=lambda u: (-_density(plan, u, plan.delta([u])), u))
    freed = dict.fromkeys(span, 0)
    evicted: list[str] = []

    def fits() -> bool:
        return all(plan.occupied[i] - freed[i] + plan.size[name] <= plan.budget for i in span)

    for u in overlapping:
        if fits():
            return evicted
        evicted.append(u)
        lo, hi = plan.ranges[u]
        for i in range(max(lo, first), min(hi, last) + 1):
            freed[i] += plan.size[u]
    return evicted if fits() else None


def _improve(plan: Plan) -> int:
    """Local improvement on `plan` in place; returns how many moves were taken."""
    moves = 0
    for _ in range(ROUNDS):
        taken = 0
        for name in sorted(plan.lm):
            if _saves(plan.delta([name])):  # a value whose place on chip only costs
                plan.flip(name)
                taken += 1
        outside = [n for n in plan.candidates() if n not in plan.lm]
        outside.sort(key=lambda n: (-_density(plan, n, plan.delta([n])), n))
        for name in outside:
            if name in plan.lm:
                continue
            evict = [] if plan.fits(name) else _room(plan, name)
            if evict is None or not _saves(plan.delta([name, *evict])):
                continue
            for u in evict:
                plan.flip(u)
            plan.flip(name)
            taken += 1
        moves += taken
        if not taken:
            break
    return moves


def plan(graph: Graph, request: Request, pricer: Pricer) -> tuple[Plan, dict]:
    """The chosen plan, and how it was found (for the account)."""
    budget = request.budget_bytes
    consecutive = reuse_consecutive.plan(graph, request, pricer)
    placed = placement.place(graph, request.budget, request.spec).values
    greedy = Plan(graph, budget, pricer, (n for n, v in placed.items() if v.location == ON_CHIP))
    start = min((consecutive, greedy), key=_rank)
    candidates = start.candidates()
    if len(candidates) <= EXACT_LIMIT:
        found = Plan(graph, budget, pricer, _exact(graph, budget, pricer, candidates))
        method, moves = "exact", 0
    else:
        found = Plan(graph, budget, pricer, start.lm)
        method, moves = "greedy + local improvement", _improve(found)
    chosen = min((found, consecutive, greedy), key=_rank)
    return chosen, {
        "method": method,
        "candidates": len(candidates),
        "improving_moves": moves,
        "reuse_consecutive_time_s": consecutive.price()[0],
    }


def run(graph: Graph, request: Request, pricer: Pricer) -> Scheduled:
    chosen, how = plan(graph, request, pricer)
    g = finish(graph, graph.nodes, chosen.lm)
    spilled = len(chosen.size) - len(chosen.lm)
    return Scheduled(g, account(g, request, pricer, **how, spilled_values=spilled))
