"""auto_recompute_sa: simulated annealing over node order, spills and recomputation.

It starts from spill_opt's answer and, for the request's steps, proposes one of
  - a swap of two adjacent independent nodes (changing which values overlap in time);
  - a flip of a temporary between local memory and DRAM (taken only where it fits);
  - a recomputation: the writer of a temporary with several readers, if it is cheap (not a
    matrix-unit kernel) and has one result, is duplicated right before a late reader, which
    (and every reader after it) reads the copy: the original value then dies early, and the
    copy lives only from its writer to those readers, so neither needs to hold local memory
    across the gap or round-trip DRAM; or the undoing of such a copy;
accepting a worse program with the usual falling probability, never one that holds more
than the budget on chip. The objective is modelled program time by node_cost (energy
breaks ties); the best program seen is kept, so the answer is never worse than
spill_opt's. A copy is the same kernel, attributes and inputs as its original, so it
computes bitwise the same result.

Chains are seeded: `CODEGEN_NUM_SA_THREADS` (an option_json env or the environment;
default 1) runs that many independent chains, seeds 0..n-1, on a thread pool and keeps the
best (ties: the lowest seed), so the result never depends on the threads' timing.
`CODEGEN_SA_STEPS` overrides the `sa_expected_run_iters` option's step count.
"""

from __future__ import annotations

import math
import os
from collections import ChainMap
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ...device.kernels import chain
from ...errors import InvalidArgumentError
from ..ir import MATRIX_OPS, TEMP, Graph, Node, Value
from ..liveness import live_ranges, temporaries, value_nbytes
from ..placement import ON_CHIP
from . import spill_opt
from .common import (
    Price,
    Pricer,
    Request,
    Scheduled,
    account,
    finish,
    occupancy,
    peak_on_chip,
    total,
)

MAX_STEPS = 1_000_000  # each step walks the whole program once
MAX_THREADS = 64
HEAT = 0.01  # early on, a move costing 1% of the program's time is taken ~1/e of the time


class SAOptionError(InvalidArgumentError):
    """CODEGEN_SA_STEPS or CODEGEN_NUM_SA_THREADS is not a usable count."""


def env_count(envs: Mapping[str, str], name: str, default: int, most: int) -> int:
    """The count an option_json env (else the environment) gives, else `default`."""
    text = envs.get(name, os.environ.get(name, ""))
    if text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= most:
        raise SAOptionError(
            f"{name}={text!r}: give a whole number from 1 to {most} in the option_json envs "
            f"or the environment (or leave it unset for {default})"
        )
    return value


@dataclass
class _State:
    nodes: list[Node]
    lm: set[str]
    prices: list[Price]
    extra: dict[str, Value] = field(default_factory=dict)  # the copies' results
    copies: dict[str, str] = field(default_factory=dict)  # copy's result -> original's

    def clone(self) -> _State:
        return _State(list(self.nodes), set(self.lm), list(self.prices), dict(self.extra),
                      dict(self.copies))  # fmt: skip


class _Chain:
    """One seeded annealing chain over a start state."""

    def __init__(self, graph: Graph, budget: int, pricer: Pricer, start: _State) -> None:
        self.graph, self.budget, self.pricer, self.start = graph, budget, pricer, start
        self.size = {n: value_nbytes(graph, n) for n in temporaries(graph)}
        writers = {o: n for n in graph.nodes for o in n.outputs}
        self.recomputable = sorted(
            name
            for name in self.size
            if len(writers[name].outputs) == 1 and writers[name].op not in MATRIX_OPS
        )

    def values(self, state: _State) -> Mapping[str, Value]:
        return ChainMap(state.extra, self.graph.values)

    def feasible(self, state: _State) -> bool:
        nodes, outputs = state.nodes, self.graph.outputs
        return peak_on_chip(nodes, outputs, state.lm, self.sizes(state)) <= self.budget

    def occupancy(self, state: _State) -> list[int]:
        ranges = live_ranges(state.nodes, self.graph.outputs)
        return occupancy(len(state.nodes), ranges, state.lm, self.sizes(state))

    def reprice(self, state: _State, names: set[str]) -> None:
        """Price again the nodes that read or write `names`, and every chain (what is on
        chip beside it, which its price depends on, may have changed)."""
        values, occupied = self.values(state), self.occupancy(state)
        for i, node in enumerate(state.nodes):
            if node.op == chain.NAME or not names.isdisjoint([*node.inputs, *node.outputs]):
                room = self.budget - occupied[i]
                state.prices[i] = self.pricer.price(values, node, state.lm, room)

    def propose(self, state: _State, rng: np.random.Generator, serial: int) -> _State | None:
        """A neighbour of `state` within the budget, or None; every move is followed by
        `fill` over the nodes it touched, so room a move makes is used in the same step."""
        kind = rng.random()
        if kind < 0.4:
            i = int(rng.integers(max(1, len(state.nodes) - 1)))
            new, window = self.swap(state, i), (i, i + 1)
        elif kind < 0.8:
            names = [n for n in (*self.size, *state.extra) if self._fits_alone(state, n)]
            if not names:
                return None
            name = names[int(rng.integers(len(names)))]
            new, window = self.flip(state, name), self._range(state, name)
        elif state.copies and rng.random() < 0.3:
            copies = sorted(state.copies)
            new, window = self.undo(state, copies[int(rng.integers(len(copies)))])
        elif self.recomputable:
            name = self.recomputable[int(rng.integers(len(self.recomputable)))]
            new, window = self.recompute(state, name, rng, serial)
        else:
            return None
        if new is None or not self.feasible(new):
            return None
        self.fill(new, *window)
        return new

    def _range(self, state: _State, name: str) -> tuple[int, int]:
        return live_ranges(state.nodes, self.graph.outputs)[name]

    def fill(self, state: _State, lo: int, hi: int) -> None:
        """Bring into local memory, in name order, each spilled value live somewhere in
        nodes lo..hi that fits beside what is there and makes the program cheaper."""
        ranges = live_ranges(state.nodes, self.graph.outputs)
        size = self.sizes(state)
        occupied = occupancy(len(state.nodes), ranges, state.lm, size)
        values = self.values(state)
        for name in sorted(size):
            first, last = ranges[name]
            if name in state.lm or last < lo or first > hi:
                continue
            if max(occupied[first : last + 1]) + size[name] > self.budget:
                continue
            touched = [
                i
                for i in range(first, last + 1)
                if name in state.nodes[i].inputs
                or name in state.nodes[i].outputs
                or state.nodes[i].op == chain.NAME
            ]
            lm, room = state.lm | {name}, self.budget - size[name]
            new = [
                self.pricer.price(values, state.nodes[i], lm, room - occupied[i]) for i in touched
            ]
            if total(new) >= total([state.prices[i] for i in touched]):
                continue
            state.lm.add(name)
            for i, price in zip(touched, new):
                state.prices[i] = price
            for i in range(first, last + 1):
                occupied[i] += size[name]

    def sizes(self, state: _State) -> dict[str, int]:
        return {**self.size, **{n: _nbytes(v) for n, v in state.extra.items()}}

    def _fits_alone(self, state: _State, name: str) -> bool:
        v = state.extra.get(name)
        return (self.size[name] if v is None else _nbytes(v)) <= self.budget

    def swap(self, state: _State, i: int) -> _State | None:
        if i + 1 >= len(state.nodes):
            return None
        first, second = state.nodes[i], state.nodes[i + 1]
        if set(first.outputs) & set(second.inputs):
            return None
        new = state.clone()
        new.nodes[i], new.nodes[i + 1] = second, first
        new.prices[i], new.prices[i + 1] = state.prices[i + 1], state.prices[i]
        if chain.NAME in (first.op, second.op):
            self.reprice(new, set())  # what is on chip beside the chain changed
        return new

    def flip(self, state: _State, name: str) -> _State:
        new = state.clone()
        new.lm.symmetric_difference_update({name})
        self.reprice(new, {name})
        return new

    def recompute(
        self, state: _State, name: str, rng: np.random.Generator, serial: int
    ) -> tuple[_State | None, tuple[int, int]]:
        readers = [i for i, n in enumerate(state.nodes) if name in n.inputs]
        late = [j for j in range(1, len(readers)) if readers[j] - readers[j - 1] > 1]
        if not late:
            return None, (0, 0)
        j = late[int(rng.integers(len(late)))]
        at = readers[j]
        writer = next(n for n in state.nodes if name in n.outputs)
        copy = f"{name}_rc{serial}"
        while copy in self.graph.values or copy in state.extra:
            copy += "_"
        new = state.clone()
        v = self.graph.values[name]
        new.extra[copy] = Value(copy, v.shape, v.dtype, TEMP)
        new.copies[copy] = name
        for i in range(at, len(new.nodes)):
            node = new.nodes[i]
            if name in node.inputs:
                inputs = [copy if n == name else n for n in node.inputs]
                new.nodes[i] = Node(node.op, inputs, list(node.outputs), node.attrs, node.name)
        twin = Node(writer.op, list(writer.inputs), [copy], writer.attrs,
                    f"{writer.name or writer.op}.recompute{serial}")  # fmt: skip
        new.nodes.insert(at, twin)
        new.prices.insert(at, (0.0, 0.0))
        if _nbytes(new.extra[copy]) <= self.budget:
            new.lm.add(copy)
        self.reprice(new, {name, copy, *writer.inputs})
        if not self.feasible(new):
            new.lm.discard(copy)
            self.reprice(new, {copy})
        return new, (readers[j - 1], at + 1)

    def undo(self, state: _State, copy: str) -> tuple[_State | None, tuple[int, int]]:
        name = state.copies[copy]
        at = next(i for i, n in enumerate(state.nodes) if copy in n.outputs)
        made = next(i for i, n in enumerate(state.nodes) if name in n.outputs)
        new = state.clone()
        del new.nodes[at], new.prices[at], new.extra[copy], new.copies[copy]
        new.lm.discard(copy)
        for i, node in enumerate(new.nodes):
            if copy in node.inputs:
                if i < made:  # swaps moved a reader of the copy before the original's writer
                    return None, (0, 0)
                inputs = [name if n == copy else n for n in node.inputs]
                new.nodes[i] = Node(node.op, inputs, list(node.outputs), node.attrs, node.name)
        self.reprice(new, {name, *state.nodes[at].inputs})
        return new, (made, at)

    def run(self, seed: int, steps: int) -> tuple[Price, _State, int]:
        """(best price, best state, accepted moves) of `steps` steps from the start."""
        rng = np.random.default_rng(seed)
        state = self.start.clone()
        price = best = total(state.prices)
        best_state, accepted = state, 0
        scale = HEAT * max(price[0], 1e-12)
        for step in range(steps):
            new = self.propose(state, rng, step)
            if new is None:
                continue
            new_price = total(new.prices)
            heat = scale * (1 - step / steps)
            worse = new_price[0] - price[0]
            if new_price <= price or (heat > 0 and rng.random() < math.exp(-worse / heat)):
                state, price = new, new_price
                accepted += 1
                if price < best:
                    best, best_state = price, state
        return best, best_state, accepted


def _nbytes(v: Value) -> int:
    return math.prod(v.shape) * v.dtype.itemsize


def run(graph: Graph, request: Request, pricer: Pricer) -> Scheduled:
    plan, how = spill_opt.plan(graph, request, pricer)
    start = _State(list(graph.nodes), set(plan.lm), list(plan.prices))
    chain = _Chain(graph, request.budget_bytes, pricer, start)
    seeds = range(request.threads)
    with ThreadPoolExecutor(request.threads, thread_name_prefix="mnrt-sa") as pool:
        results = list(pool.map(lambda s: chain.run(s, request.steps), seeds))
    (_, best, accepted), seed = min(zip(results, seeds), key=lambda r: (r[0][0], r[1]))
    g = graph.copy()
    g.values.update({n: Value(n, v.shape, v.dtype, TEMP) for n, v in best.extra.items()})
    g = finish(g, best.nodes, best.lm)
    return Scheduled(
        g,
        account(
            g,
            request,
            pricer,
            steps=request.steps,
            threads=request.threads,
            best_seed=seed,
            accepted_moves=accepted,
            start_time_s=plan.price()[0],
            spill_opt_method=how["method"],
            recomputed_nodes=len(best.copies),
            spilled_values=sum(g.values[n].location != ON_CHIP for n in temporaries(g)),
        ),
    )
