"""What every layout planner shares: which layout each kernel needs and gives, building the
planned graph with explicit layout switches, and pricing a switch against DRAM.

Values in DRAM are row-major there and need no switch: the consuming kernel's DRAM loads
distribute them (its price already counts them). A value kept on chip ("lm") has the layout
its producer leaves it in; a consumer that needs another gets an explicit `relayout` node
before it (one per value and layout, shared by every consumer needing that layout). A value
whose layout is kept fixed (the user's layout_spec / gemm_layout_spec, or the legacy
planner's canonical layout) gets a switch right after its producer when the producer leaves
it in another. Nodes are never reordered; switches only go between them.

Which arrangement a kernel needs is said in one place, `ARRANGED`: a matrix kernel needs and
gives the layouts its mapping implies (device/mapped_layout.py); a relayout needs its source
and gives its destination. Every other kernel preserves layouts: its result takes the layout
of its first on-chip input of the result's shape, and its other inputs of that shape must be
in it too (an elementwise add of two differently laid-out values needs one switched); a
result of another shape than all inputs (a reshape, a pooling, a reduction) is written in
the canonical row-major layout.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ...device.kernels import TensorSpec
from ...device.kernels.relayout import level
from ...device.layout import LayoutError
from ...device.mapped_layout import mapping_layouts, row_major
from ...device.spec import MNCORE2, DeviceSpec
from ..ir import TEMP, Graph, Node, Value
from ..liveness import value_nbytes
from ..node_cost import node_cost
from ..placement import DRAM, ON_CHIP


@functools.lru_cache(maxsize=4096)
def canonical(shape: tuple[int, ...], itemsize: int, spec: DeviceSpec = MNCORE2) -> str | None:
    """The canonical row-major layout of a tensor, as text; None for one without elements."""
    if not shape or 0 in shape:
        return None
    return str(row_major(shape, itemsize, spec))


def canonical_of(graph: Graph, name: str, spec: DeviceSpec = MNCORE2) -> str | None:
    v = graph.values[name]
    return canonical(tuple(v.shape), v.dtype.itemsize, spec)


def _specs(graph: Graph, names: list[str]) -> list[TensorSpec]:
    return [TensorSpec(tuple(graph.values[n].shape), graph.values[n].dtype) for n in names]


@functools.lru_cache(maxsize=4096)
def _mapped(op: str, ins: tuple, outs: tuple, attrs: tuple, spec: DeviceSpec) -> tuple:
    try:
        layouts = mapping_layouts(op, list(ins), list(outs), dict(attrs), spec)
    except (LayoutError, ValueError):
        return (None,) * (len(ins) + len(outs))  # no layout: the kernel arranges its own
    return tuple(None if lay is None else str(lay) for lay in layouts)


def _matrix(graph: Graph, node: Node, spec: DeviceSpec) -> tuple[list, list]:
    if not node.attrs.get("mapping"):
        return [None] * len(node.inputs), [None] * len(node.outputs)
    attrs = tuple(sorted((k, v) for k, v in node.attrs.items() if k != "onchip"))
    ins, outs = _specs(graph, node.inputs), _specs(graph, node.outputs)
    layouts = _mapped(node.op, tuple(ins), tuple(outs), attrs, spec)
    return list(layouts[: len(ins)]), list(layouts[len(ins) :])


def _relayout(graph: Graph, node: Node, spec: DeviceSpec) -> tuple[list, list]:
    return [node.attrs["src"]], [node.attrs["dst"]]


# op -> (graph, node, spec) -> (layout needed per input, layout given per output); None
# where the kernel takes or gives any. Kernels not listed preserve layouts.
ARRANGED: dict[str, Callable[[Graph, Node, DeviceSpec], tuple[list, list]]] = {
    "gemm": _matrix,
    "conv2d": _matrix,
    "conv_transpose2d": _matrix,
    "relayout": _relayout,
}


@dataclass
class Switch:
    """One layout switch the plan inserted."""

    value: str  # the value switched
    src: str
    dst: str
    output: str  # the value it writes
    where: str  # "before <consumer>" or "after <producer>"
    node: Node | None = None


@dataclass
class Built:
    """A planned graph and what went into it."""

    graph: Graph
    switches: list[Switch] = field(default_factory=list)
    produced: dict[str, str | None] = field(default_factory=dict)  # producer's layout
    needed: dict[str, list[dict]] = field(default_factory=dict)  # consumers' needs
    producer: dict[str, Node] = field(default_factory=dict)  # node writing each value
    _indexed: tuple | None = field(default=None, init=False, repr=False, compare=False)

    def switches_of(self, value: str) -> list[Switch]:
        """The switches of `value`, in the order the plan inserted them."""
        return self._index()[0].get(value, [])

    def readers(self, names: set[str]) -> list[Node]:
        """The graph's nodes reading any of `names`, in graph order. `decide` asks for each
        switched value's: scanning every node each time made a plan quadratic in the nodes
        (an unrolled 200-step LSTM: half a minute)."""
        by_name = self._index()[1]
        found = {id(n): (at, n) for name in names for at, n in by_name.get(name, ())}
        return [n for _, n in sorted(found.values(), key=lambda p: p[0])]

    def _index(self) -> tuple[dict[str, list[Switch]], dict[str, list[tuple[int, Node]]]]:
        """Switches by value and readers by value name, made at the first question (a
        Built is complete by then: `build` returns it finished)."""
        if self._indexed is not None:
            return self._indexed
        by_value: dict[str, list[Switch]] = {}
        for s in self.switches:
            by_value.setdefault(s.value, []).append(s)
        by_name: dict[str, list[tuple[int, Node]]] = {}
        for at, n in enumerate(self.graph.nodes):
            for name in dict.fromkeys(n.inputs):
                by_name.setdefault(name, []).append((at, n))
        self._indexed = by_value, by_name
        return self._indexed


def build(
    g0: Graph,
    keep: Mapping[str, str],
    to_dram: frozenset[str] | set[str] = frozenset(),
    spec: DeviceSpec = MNCORE2,
) -> Built:
    """`g0` with switches inserted: on-chip values in the layout their producer leaves them
    in, or in `keep[value]` (a switch after the producer when that differs), a switch before
    every consumer that needs another layout; the values in `to_dram` moved to DRAM."""
    g = g0.copy(nodes=False)
    out = Built(g)
    layout_of: dict[str, str | None] = {}
    switched: dict[tuple[str, str], str] = {}

    def on_chip(name: str) -> bool:
        v = g.values[name]
        return v.location == ON_CHIP and canonical_of(g, name, spec) is not None

    def switch(name: str, src: str, dst: str, where: str, output: str | None = None) -> str:
        v = g.values[name]
        output = output or g.unused_name(f"{name}_as{len(out.switches)}")
        g.values[output] = Value(output, v.shape, v.dtype, TEMP, ON_CHIP, dst)
        node = Node("relayout", [name], [output], {"src": src, "dst": dst}, f"relayout_{output}")
        g.nodes.append(node)
        out.switches.append(Switch(name, src, dst, output, where, node))
        return output

    for name in to_dram:
        g.values[name].location = DRAM
    for name in g.values:
        if not on_chip(name):
            layout_of[name] = keep.get(name) or canonical_of(g, name, spec)
    for node0 in g0.nodes:
        node = Node(
            node0.op, list(node0.inputs), list(node0.outputs), dict(node0.attrs), node0.name
        )
        needs, gives = _arrangement(g, node, layout_of, on_chip, spec)
        for i, name in enumerate(node.inputs):
            want = needs[i]
            if want is None or not on_chip(name):
                continue
            out.needed.setdefault(name, []).append({"consumer": node.name, "layout": want})
            have = layout_of[name]
            if have != want:
                key = (name, want)
                if key not in switched:
                    switched[key] = switch(name, have, want, f"before {node.name}")
                node.inputs[i] = switched[key]
        g.nodes.append(node)
        for i, name in enumerate(node.outputs):
            out.producer[name] = node
            if not on_chip(name):
                out.produced[name] = gives[i]
                continue
            given = gives[i] or canonical_of(g, name, spec)
            out.produced[name] = given
            fixed = keep.get(name)
            if fixed is not None and fixed != given:
                raw = g.unused_name(f"{name}_produced")
                v = g.values[name]
                g.values[raw] = Value(raw, v.shape, v.dtype, TEMP, ON_CHIP, given)
                node.outputs[i] = raw
                out.producer[name] = node
                switch(raw, given, fixed, f"after {node.name}", output=name)
                out.switches[-1].value = name
                layout_of[raw] = given
                layout_of[name] = fixed
            else:
                layout_of[name] = given
    for name, lay in layout_of.items():
        g.values[name].layout = lay
    return out


def _arrangement(graph, node, layout_of, on_chip, spec) -> tuple[list, list]:
    """The layout `node` needs of each input and gives each output (None: any / none)."""
    if node.op in ARRANGED:
        return ARRANGED[node.op](graph, node, spec)
    shape = graph.values[node.outputs[0]].shape if node.outputs else None
    same = [n for n in node.inputs if graph.values[n].shape == shape and on_chip(n)]
    lead = layout_of.get(same[0]) if same else None
    needs = [lead if n in same else None for n in node.inputs]
    gives = [lead if graph.values[o].shape == shape else None for o in node.outputs]
    return needs, gives


def price(graph: Graph, nodes: list[Node], spec: DeviceSpec) -> float:
    return sum(node_cost(graph, n, spec).time_s for n in nodes)


def decide(built: Built, value: str, spec: DeviceSpec) -> dict:
    """Keeping `value` on chip with its switches against sending it through DRAM (its
    producer writing it there, every consumer reading it there, no switch): both modelled
    prices by node_cost, the device's own."""
    g = built.graph
    mine = built.switches_of(value)
    outputs = {s.output for s in mine} | {value}
    raw = {s.node.inputs[0] for s in mine if s.where.startswith("after")}
    producer = built.producer.get(value)
    ids = {id(s.node) for s in mine}
    readers = [n for n in built.readers(outputs) if id(n) not in ids]
    keep_nodes = [s.node for s in mine] + readers + ([producer] if producer else [])
    on_chip_s = price(g, keep_nodes, spec)
    direct = [
        Node(n.op, [value if i in outputs else i for i in n.inputs], list(n.outputs), n.attrs)
        for n in readers
    ]
    if producer is not None:
        outs = [value if o in raw else o for o in producer.outputs]
        direct.append(Node(producer.op, list(producer.inputs), outs, producer.attrs))
    v = g.values[value]
    was, v.location = v.location, DRAM
    try:
        dram_s = price(g, direct, spec)
    finally:
        v.location = was
    return {
        "value": value,
        "switches": len(mine),
        "on_chip_with_switches_s": on_chip_s,
        "through_dram_s": dram_s,
        "chosen": "dram" if dram_s < on_chip_s else "switch",
    }


def record(built: Built, planner: str, decisions: list[dict], spec: DeviceSpec) -> dict:
    """layout_plan.json: every value's place and layout, the switches with their modelled
    cost, and each switch-or-DRAM decision with both prices."""
    g = built.graph
    switches = []
    for s in built.switches:
        m = node_cost(g, s.node, spec)
        v = g.values[s.output]
        switches.append(
            {
                "value": s.value,
                "output": s.output,
                "where": s.where,
                "src": s.src,
                "dst": s.dst,
                "bytes": value_nbytes(g, s.output),
                "level": level(s.src, s.dst, tuple(v.shape)),
                "time_s": m.time_s,
                "energy_j": m.energy_j,
            }
        )
    values = {
        name: {
            "location": v.location,
            "layout": v.layout,
            "producer_layout": built.produced.get(name),
            "consumer_layouts": built.needed.get(name, []),
        }
        for name, v in g.values.items()
    }
    return {
        "planner": planner,
        "switch_count": len(switches),
        "switch_time_s": sum(s["time_s"] for s in switches),
        "switches": switches,
        "decisions": decisions,
        "values": values,
    }
