"""What every scheduler shares: its request, its result, the device's price of a node under
a choice of on-chip operands, and a spill plan that keeps on-chip occupancy and prices up to
date as values move between local memory and DRAM.

A chain's price depends on more than its own operands: its intermediates take only the
local memory the budget leaves beside what else is on chip while it runs (its `lm_room`,
placement.chain_room), so a value kept on chip across a chain can cost the chain DRAM
round trips. Schedulers price chains with that room, as the compiled program will be."""

from __future__ import annotations

import copy
import itertools
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ...device.kernels import chain
from ...device.spec import MNCORE2, DeviceSpec
from .. import placement
from ..ir import TEMP, Graph, Node, Value
from ..liveness import live_ranges, temporaries, value_nbytes
from ..node_cost import node_cost
from ..placement import DRAM, ON_CHIP, on_chip_bytes

Price = tuple[float, float]  # (modelled seconds, joules): compared in that order


@dataclass(frozen=True)
class Request:
    """What a compile asks of its scheduler: `budget` bytes of PE local memory the on-chip
    temporaries may hold at once (0: the whole chip's), `steps` of annealing, `threads`
    independent annealing chains."""

    budget: int = 0
    steps: int = 1000
    threads: int = 1
    spec: DeviceSpec = MNCORE2

    @property
    def budget_bytes(self) -> int:
        return self.budget or on_chip_bytes(self.spec)


@dataclass
class Scheduled:
    """A scheduler's answer: the graph in its order with every value's location set, and
    its own account for report.json."""

    graph: Graph
    account: dict = field(default_factory=dict)


class Pricer:
    """node_cost of a node with some of its operands on chip, remembered per (kernel,
    operand shapes, attributes, on-chip positions): the repeated blocks of a model and a
    search's repeated questions are priced once. Safe to share between threads: pricing
    builds a graph of its own and never changes the caller's."""

    def __init__(self, spec: DeviceSpec = MNCORE2) -> None:
        self.spec = spec
        self._prices: dict[tuple, Price] = {}

    def price(
        self, values: Mapping[str, Value], node: Node, lm: Collection[str], room: int | None = None
    ) -> Price:
        """The price of `node` with the operands in `lm` on chip; a chain's with `room` bytes
        of local memory for its intermediates (None: what its attributes say)."""
        if room is not None and node.op == chain.NAME:
            room = min(max(0, room), on_chip_bytes(self.spec))
            attrs = {**node.attrs, "lm_room": room}
            node = Node(node.op, node.inputs, node.outputs, attrs, node.name)
        operands = [*node.inputs, *node.outputs]
        onchip = tuple(i for i, n in enumerate(operands) if n in lm)
        key = (
            node.op,
            tuple((values[n].shape, values[n].dtype.name) for n in operands),
            repr(sorted(node.attrs.items())),
            onchip,
        )
        hit = self._prices.get(key)
        if hit is None:
            where = {n: ON_CHIP if n in lm else DRAM for n in operands}
            own = {n: Value(n, values[n].shape, values[n].dtype, TEMP, where[n]) for n in operands}
            m = node_cost(Graph("price", own, [node]), node, self.spec)
            hit = self._prices[key] = (m.time_s, m.energy_j)
        return hit


def total(prices: Sequence[Price]) -> Price:
    return (sum(p[0] for p in prices), sum(p[1] for p in prices))


def occupancy(
    count: int, ranges: Mapping[str, tuple[int, int]], lm: Iterable[str], size: Mapping[str, int]
) -> list[int]:
    """Bytes the values in `lm` hold on chip at each of `count` nodes (a value from its
    writer to its last reader, both included)."""
    delta = [0] * (count + 1)
    for name in lm:
        first, last = ranges[name]
        delta[first] += size[name]
        delta[last + 1] -= size[name]
    return list(itertools.accumulate(delta))[:count]


def peak_on_chip(
    nodes: Sequence[Node], outputs: Iterable[str], lm: Iterable[str], size: Mapping[str, int]
) -> int:
    """The most bytes the values in `lm` hold in local memory at once in this order."""
    return max(occupancy(len(nodes), live_ranges(nodes, outputs), lm, size), default=0)


class Plan:
    """A fixed node order with a choice of on-chip temporaries (`lm`): the bytes on chip at
    every node and every node's price, kept up to date by `flip`."""

    def __init__(self, graph: Graph, budget: int, pricer: Pricer, lm: Iterable[str] = ()) -> None:
        self.graph, self.budget, self.pricer = graph, budget, pricer
        self.ranges = live_ranges(graph.nodes, graph.outputs)
        self.size = {n: value_nbytes(graph, n) for n in temporaries(graph)}
        self.touches: dict[str, list[int]] = {}
        for i, node in enumerate(graph.nodes):
            for name in dict.fromkeys([*node.inputs, *node.outputs]):
                if name in self.size:
                    self.touches.setdefault(name, []).append(i)
        self.chains = [i for i, node in enumerate(graph.nodes) if node.op == chain.NAME]
        self.occupied = [0] * len(graph.nodes)
        self.over = 0  # nodes at which more than the budget is on chip
        self.lm: set[str] = set()
        self.prices = [self._price(i, (), 0) for i in range(len(graph.nodes))]
        for name in lm:
            self.flip(name)

    def _price(self, i: int, lm: Collection[str], occupied: int) -> Price:
        """Node i's price with `lm` on chip and `occupied` bytes there while it runs."""
        values, node = self.graph.values, self.graph.nodes[i]
        return self.pricer.price(values, node, lm, self.budget - occupied)

    def _chains_in(self, name: str) -> list[int]:
        """The chains that run while `name` is live (their room depends on where it is)."""
        first, last = self.ranges[name]
        return self.chains[bisect_left(self.chains, first) : bisect_right(self.chains, last)]

    def candidates(self) -> list[str]:
        """Temporaries that could be on chip on their own (not larger than the budget)."""
        return [n for n in self.size if self.size[n] <= self.budget]

    def fits(self, name: str) -> bool:
        """Whether `name` can join local memory as things stand."""
        first, last = self.ranges[name]
        room = self.budget - self.size[name]
        return all(self.occupied[i] <= room for i in range(first, last + 1))

    def flip(self, name: str) -> None:
        """Move `name` into local memory, or out of it if it is there."""
        sign = -1 if name in self.lm else 1
        self.lm.symmetric_difference_update({name})
        first, last = self.ranges[name]
        for i in range(first, last + 1):
            before = self.occupied[i] > self.budget
            self.occupied[i] += sign * self.size[name]
            self.over += (self.occupied[i] > self.budget) - before
        for i in {*self.touches.get(name, ()), *self._chains_in(name)}:
            self.prices[i] = self._price(i, self.lm, self.occupied[i])

    def delta(self, names: Iterable[str]) -> Price:
        """How the program's price would change if `names` flipped (nothing is changed)."""
        names = set(names)
        lm = self.lm.symmetric_difference(names)
        moved: dict[int, int] = {}  # chain -> bytes the flips add on chip while it runs
        for name in names:
            sign = -1 if name in self.lm else 1
            for i in self._chains_in(name):
                moved[i] = moved.get(i, 0) + sign * self.size[name]
        touched = sorted({*moved, *(i for n in names for i in self.touches.get(n, ()))})
        new = total([self._price(i, lm, self.occupied[i] + moved.get(i, 0)) for i in touched])
        old = total([self.prices[i] for i in touched])
        return (new[0] - old[0], new[1] - old[1])

    def price(self) -> Price:
        return total(self.prices)


def finish(graph: Graph, nodes: Sequence[Node], lm: Iterable[str]) -> Graph:
    """`graph` with `nodes` in this order, the values in `lm` in local memory and the rest
    in DRAM (placement alone says which operands are on chip: a node's own `onchip` goes)."""
    g = graph.copy()
    g.nodes = [
        Node(n.op, list(n.inputs), list(n.outputs), copy.deepcopy(n.attrs), n.name) for n in nodes
    ]
    lm = set(lm)
    for name, v in g.values.items():
        v.location = ON_CHIP if name in lm else DRAM
    for node in g.nodes:
        node.attrs.pop("onchip", None)
    g.verify()
    return g


def account(graph: Graph, request: Request, pricer: Pricer, **extra: object) -> dict:
    """report.json's account common to every scheduler: the modelled program it chose (its
    chains with the room placement leaves them)."""
    graph = placement.chain_room(graph, request.budget, request.spec)
    lm = {n for n, v in graph.values.items() if v.location == ON_CHIP}
    time_s, energy_j = total([pricer.price(graph.values, n, lm) for n in graph.nodes])
    return {**extra, "modelled_time_s": time_s, "modelled_energy_j": energy_j}
