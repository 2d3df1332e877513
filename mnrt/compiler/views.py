"""Values that share a buffer, so that concatenations, reshapes and slices need not copy.

The kernels before a concatenation write its parts straight into the buffer of the whole
(DenseNet's dense blocks grow one buffer, layer by layer, as its memory-efficient
implementation does), a reshape is the buffer it reshapes, and a slice that is one run of
its input (a split along the outermost axis, ShuffleNet v2's channel split at batch 1) is
that run: XLA and TensorRT elide all three.
A value with `Value.view = (root, offset)` is elements `offset`... of value `root`'s buffer;
lowering makes it a program's SlotView (mnrt.SlotView) and runs no kernel for a node whose
operands all lie in one buffer (`Graph.elided`), which the timing model prices at nothing.

`elide_copies` decides, after placement and layout planning, and only where the timing
model says the program gets no slower. The values that share a buffer are in DRAM, where
every value is row-major (layout_planners/common.py): there the parts of a concatenation
along its outermost axis of more than one element lie one after another in the whole, a
reshape is the same bytes, and such a slice a run of them. On chip a value is spread over
the PEs in its own layout, and a part's is no slice of the whole's, so a value a scheduler
kept on chip goes to DRAM to share (its writer stores it, its readers load it: what the
timing model weighs against the copy saved). A value a host reads or writes (an input, a
parameter, an output) keeps a buffer of its own.
"""

from __future__ import annotations

import itertools
import math

from ..device.kernels.shape import run_start
from .ir import ELIDABLE, INPUT, PARAM, Graph, Node
from .node_cost import node_cost
from .placement import DRAM


def elide_copies(graph: Graph) -> Graph:
    """The graph with each concatenation, reshape and slice that can be (and is no slower
    as) views of one buffer laid out so: see the module's doc."""
    g = graph.copy()
    keep = {n for n, v in g.values.items() if v.role in (INPUT, PARAM)} | set(g.outputs)
    readers: dict[str, list[int]] = {}
    for i, node in enumerate(g.nodes):
        for name in node.inputs:
            readers.setdefault(name, []).append(i)
    producers = g.producers()
    switched = {n for node in g.nodes if node.op == "relayout" for n in node.inputs + node.outputs}
    members: dict[str, list[str]] = {}  # root -> the values that are views of it
    for i, node in enumerate(g.nodes):
        moves = _layout(g, node, keep, members)
        if moves is None:
            continue
        new = next(iter(moves.values()))[0]
        group = {new, *members.get(new, ())}
        group |= {n for root in moves for n in (root, *members.get(root, ()))}
        if group & switched:
            continue  # its layout switch was planned and priced on chip
        old_places = {n: g.values[n].view for n in group}
        old_where = {n: g.values[n].location for n in group}
        touched = {i} | {producers[n] for n in group if n in producers}
        touched |= {j for n in group for j in readers.get(n, ())}
        before = sum(node_cost(g, g.nodes[j]).time_s for j in touched)
        _apply(g, moves, members)
        for n in group:
            g.values[n].location = DRAM
        after = sum(node_cost(g, g.nodes[j]).time_s for j in touched)
        if after > before:  # undo
            for n in group:
                g.values[n].view, g.values[n].location = old_places[n], old_where[n]
            _regroup(g, members, group)
    _note_moves(g, graph)
    return g


def _note_moves(g: Graph, before: Graph) -> None:
    """The layout plan's record (layout_plan.json) with the values moved to DRAM there."""
    plan = g.notes.get("layout_plan")
    if plan is None:
        return
    moved = [n for n, v in g.values.items() if v.location != before.values[n].location]
    values = dict(plan["values"])
    for n in moved:
        if n in values:
            values[n] = {**values[n], "location": g.values[n].location}
    g.notes["layout_plan"] = {**plan, "values": values}


def _layout(
    g: Graph, node: Node, keep: set[str], members: dict[str, list[str]]
) -> dict[str, tuple[str, int]] | None:
    """How the node's operands would be laid out in one buffer: each root that moves ->
    (its new root, the element it starts at there); None if they cannot be."""
    if node.op not in ELIDABLE or len(node.outputs) != 1:
        return None
    (out,) = node.outputs
    values = [g.values[n] for n in (*node.inputs, out)]
    if any(v.dtype != values[-1].dtype for v in values):
        return None
    if node.op in ("reshape", "slice") and out not in keep:
        start = 0 if node.op == "reshape" else run_start(g.values[node.inputs[0]].shape, node.attrs)
        if start is None:
            return None
        root, offset = g.root_of(node.inputs[0])
        return {out: (root, offset + start)}  # the output is a view of where its input lies
    if node.op == "slice":
        return None
    shape = g.values[out].shape
    axis = node.attrs.get("axis", 0) % len(shape) if node.op == "concat" else 0
    if math.prod(shape[:axis]) != 1 or len(set(node.inputs)) != len(node.inputs):
        return None  # each part must be one run of the whole, once
    shifts: dict[str, int] = {}
    at = 0
    for part in node.inputs:
        root, offset = g.root_of(part)
        if root in keep or shifts.get(root, at - offset) != at - offset:
            return None
        shifts[root] = at - offset
        at += _size(g, part)
    extents = sorted((s, s + _size(g, r)) for r, s in shifts.items())
    if extents[0][0] < 0 or extents[-1][1] > _size(g, out):
        return None
    if any(a[1] > b[0] for a, b in itertools.pairwise(extents)):
        return None  # two buffers would overlap
    return {root: (out, shift) for root, shift in shifts.items()}


def _apply(g: Graph, moves: dict[str, tuple[str, int]], members: dict[str, list[str]]) -> None:
    """Lay the moved roots (and their views) out in their new roots."""
    for root, (new, shift) in moves.items():
        for n in (root, *members.pop(root, ())):
            old = g.values[n].view
            g.values[n].view = (new, shift + (0 if old is None else old[1]))
            members.setdefault(new, []).append(n)


def _regroup(g: Graph, members: dict[str, list[str]], group: set[str]) -> None:
    """`members` again for the values of `group` after an undo."""
    for n in group:
        members.pop(n, None)
    for n in group:
        view = g.values[n].view
        if view is not None:
            members.setdefault(view[0], []).append(n)


def _size(g: Graph, name: str) -> int:
    return math.prod(g.values[name].shape)
