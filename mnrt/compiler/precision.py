"""Where mixed precision's half pays for its casts.

float_dtype=mixed runs every GEMM and conv in half, with a cast to half before each float
operand and a cast back after the result (passes.apply_float_dtype); the round trips
between two half kernels cancel, and a widening moves past the kernels that only move
values (widen_after_moving). On a large product the MAU's half rate pays for the casts
many times over. On a small one (a transformer's projections at a short sequence) a kernel
costs little more than its launch, and the casts around it cost more than half saves: the
HF GPT-2 at O2 ran 27 cast kernels, a third of its modelled time, and O2 was slower than
O1. TensorRT chooses each layer's precision by timing it, reformatting included; here the
timing model prices both.

A region is half values joined by the kernels that read or write them (casts excepted):
the products, the half parameters they read and the moves between them. Its entries are
the casts into it, its exits the casts out of it. Run in float, the region's kernels read
the entries' float operands and write the exits' float results themselves, and neither
cast runs; `half_where_it_pays` makes the region float where the timing model prices
its kernels in float as no slower and no more energy than its kernels and casts in half.

Then `products_write_float`: a half product whose result only a widening reads stores its
float accumulator itself (the matrix kernels' half in, float out), with no rounding to
half and no cast kernel after it.

Before both, `narrow_where_it_pays` decides how far the widenings move: past the kernels
that only move values, or on into the concatenations they feed as well. Which pays
depends on who reads a concatenation (an Inception block's next convs and pooling, in
half; DenseNet's next norm, in float), so it prices the two graphs whole, each as the
passes after it will leave it.
"""

from __future__ import annotations

from ..device import dtypes as dt
from .cast_motion import MOVES_VALUES, cancel_round_trip_casts, narrow_moves, widen_after_moving
from .ir import MATRIX_OPS, PARAM, Graph, Node
from .map_graph import mapped
from .node_cost import node_cost
from .passes import dead_code, uses_of

# What mixed precision puts in half: the products, and the moves a widening passed.
_HALF_OPS = frozenset(MATRIX_OPS) | frozenset(MOVES_VALUES)


# How far apart two whole graphs' prices must be for narrow_where_it_pays to believe
# them: the prices are taken before scheduling and layout, and ShuffleNet v2's graph with
# its concatenations narrow, priced 0.25% faster, ran 0.06% slower once laid out.
_PRICE_MARGIN = 0.005


def narrow_where_it_pays(graph: Graph, effort: int) -> tuple[Graph, dict]:
    """Where O2 leaves mixed precision's widenings: after the kernels that only move
    values (widen_after_moving), or also after the concatenations they feed and past the
    moves that then read them (narrow_moves with max pooling), whichever the timing model
    prices lower, mapped at `effort`, once the passes after this one (`half_where_it_pays`,
    `products_write_float`) have run on it; the cast round trips either leaves are dropped.
    An Inception block's concatenation then stays half and its max pooling, between two
    half convs, with it (torchvision's GoogLeNet at O2 mixed: 201.2 -> 179.6 us modelled,
    light SqueezeNet 108.9 -> 87.7 us); DenseNet's would then be widened once per layer,
    each widening a kernel of its own (64.5% slower), and stays float. The account: which
    was kept, and the time and energy it saves as priced here."""
    moved = cancel_round_trip_casts(widen_after_moving(graph))
    joined = cancel_round_trip_casts(narrow_moves(graph, MOVES_VALUES))
    if joined.dump() == moved.dump():
        return moved, {"concatenations_narrow": False, "time_saved_s": 0.0, "energy_saved_j": 0.0}
    (time_moved, energy_moved), (time_joined, energy_joined) = (
        _priced(g, g.nodes, effort)
        for g in (products_write_float(half_where_it_pays(h, effort)[0]) for h in (moved, joined))
    )
    pays = time_joined < time_moved * (1 - _PRICE_MARGIN) and energy_joined <= energy_moved
    saved = (time_moved - time_joined, energy_moved - energy_joined) if pays else (0.0, 0.0)
    account = {"concatenations_narrow": pays, "time_saved_s": saved[0], "energy_saved_j": saved[1]}
    return (joined if pays else moved), account


def _priced(g: Graph, nodes: list[Node], effort: int) -> tuple[float, float]:
    """The time and energy of `nodes` of `g`, mapped as the mapper will at `effort`."""
    prices = [node_cost(g, mapped(g, n, effort)) for n in nodes]
    return sum(m.time_s for m in prices), sum(m.energy_j for m in prices)


def half_where_it_pays(graph: Graph, effort: int) -> tuple[Graph, dict]:
    """The graph with each region (see the module's doc) made float where the timing model
    prices its kernels, mapped as the mapper will map them at `effort`, as no slower and
    no more energy in float than in half with its casts; and the account report.json
    shows of it: the regions kept in half and made float, the casts dropped, and the time
    and energy the kernels of the regions made float save as priced here (before
    scheduling: every operand in DRAM)."""
    g = graph.copy()
    rename: dict[str, str] = {}
    account = {"regions_in_half": 0, "regions_in_float": 0, "casts_dropped": 0}
    time_saved = energy_saved = 0.0
    for values, members, entries, exits in _regions(g):
        casts = entries + exits
        if not _revertible(g, values, members, entries, exits):
            account["regions_in_half"] += 1
            continue
        half, wide = _prices(g, values, members, casts, effort)
        if wide[0] > half[0] or wide[1] > half[1]:
            account["regions_in_half"] += 1
            continue
        _revert(g, values, entries, exits, rename)
        account["regions_in_float"] += 1
        account["casts_dropped"] += len(casts)
        time_saved, energy_saved = time_saved + half[0] - wide[0], energy_saved + half[1] - wide[1]
    account.update(time_saved_s=time_saved, energy_saved_j=energy_saved)
    if not account["regions_in_float"]:
        return graph, account
    g.nodes = [n for n in g.nodes if not (n.op == "cast" and n.outputs[0] in rename)]
    for node in g.nodes:
        node.inputs = [_resolved(rename, n) for n in node.inputs]
        node.outputs = [_resolved(rename, n) for n in node.outputs]
    g.verify()
    return dead_code(g), account


def _regions(g: Graph) -> list[tuple[set[str], list[Node], list[Node], list[Node]]]:
    """Each region: its half values, its kernels (graph order), its entry and exit casts."""
    half = {n for n, v in g.values.items() if v.dtype is dt.HALF}
    parent = {n: n for n in half}

    def find(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for node in g.nodes:
        if node.op == "cast":
            continue
        touched = [find(n) for n in (*node.inputs, *node.outputs) if n in half]
        for other in touched[1:]:
            parent[other] = touched[0]
    groups: dict[str, tuple[set[str], list[Node], list[Node], list[Node]]] = {}
    for n in half:
        groups.setdefault(find(n), (set(), [], [], []))[0].add(n)
    for node in g.nodes:
        if node.op == "cast":
            out, source = node.outputs[0], node.inputs[0]
            if out in half and source not in half:
                groups[find(out)][2].append(node)
            elif source in half and out not in half:
                groups[find(source)][3].append(node)
            continue
        touched = [n for n in (*node.inputs, *node.outputs) if n in half]
        if touched:
            groups[find(touched[0])][1].append(node)
    return list(groups.values())


def _revertible(
    g: Graph, values: set[str], members: list[Node], entries: list[Node], exits: list[Node]
) -> bool:
    """Whether the region can run in float as it stands: kernels of the ops mixed precision
    makes half (one at least: a cast to half and back with none between rounds, and stays),
    no half value the host reads or writes, entries from and exits to float, and at most
    one exit per value into the graph's outputs (whose name it then takes)."""
    if not members or any(n.op not in _HALF_OPS for n in members):
        return False
    if values & {*g.inputs, *g.outputs}:
        return False
    floats = [g.values[c.inputs[0]] for c in entries] + [g.values[c.outputs[0]] for c in exits]
    if any(v.dtype is not dt.FLOAT for v in floats):
        return False
    named = [c.inputs[0] for c in exits if c.outputs[0] in g.outputs]
    return len(named) == len(set(named))


def _prices(
    g: Graph, values: set[str], members: list[Node], casts: list[Node], effort: int
) -> tuple[tuple[float, float], tuple[float, float]]:
    """(time, energy) of the region's kernels in half with its casts, and of its kernels
    in float."""

    half = _priced(g, [*members, *casts], effort)
    for n in values:
        g.values[n].dtype = dt.FLOAT
    wide = _priced(g, members, effort)
    for n in values:
        g.values[n].dtype = dt.HALF
    return half, wide


def _revert(
    g: Graph, values: set[str], entries: list[Node], exits: list[Node], rename: dict[str, str]
) -> None:
    """Make the region float: each entry's readers read its float operand, each exit's read
    the region's value (which takes the exit's name where that is a graph output), and a
    half copy of a float parameter is the parameter again."""
    floats = {id(v.data): n for n, v in g.values.items() if v.role == PARAM and v.dtype is dt.FLOAT}
    for n in values:
        v = g.values[n]
        v.dtype = dt.FLOAT
        twin = floats.get(id(v.data)) if v.role == PARAM and v.data is not None else None
        if twin is not None and g.values[twin].shape == v.shape:
            rename[n] = twin
    for cast in entries:
        rename[cast.outputs[0]] = cast.inputs[0]
    for cast in exits:
        out, source = cast.outputs[0], cast.inputs[0]
        if out in g.outputs:
            rename[source], rename[out] = out, out
        else:
            rename[out] = source


def _resolved(rename: dict[str, str], name: str) -> str:
    seen = set()
    while name in rename and rename[name] != name and name not in seen:
        seen.add(name)
        name = rename[name]
    return name


def products_write_float(graph: Graph) -> Graph:
    """The graph with each half product (gemm, conv) whose result a widening to float alone
    reads writing the float result itself. The MAU accumulates in float, and the matrix
    kernels may store the accumulator as it is (half in, float out: MLSDK's "mixed"):
    the result skips a rounding to half, and the cast kernel that widened it (half of
    ResNet-50's casts at O2) does not run. Results change only in that rounding: they come
    nearer the float ones. After `half_where_it_pays`, which weighs each region with the
    casts mixed precision gives it: deciding after this pass would keep a region in half
    whose casts it still pays on the way in."""
    g = graph.copy()
    uses = uses_of(g)
    producer = {out: n for n in g.nodes for out in n.outputs}
    widened = set()
    for cast in g.nodes:
        if cast.op != "cast" or g.values[cast.outputs[0]].dtype is not dt.FLOAT:
            continue
        (result,) = cast.inputs
        product = producer.get(result)
        if product is None or product.op not in MATRIX_OPS or uses.get(result) != 1:
            continue
        if g.values[result].dtype is not dt.HALF:
            continue
        product.outputs = [cast.outputs[0]]
        widened.add(id(cast))
    if not widened:
        return graph
    g.nodes = [n for n in g.nodes if id(n) not in widened]
    g.verify()
    return dead_code(g)
