"""Where mixed precision's casts go once float_dtype has put them in (O2 and up): a
round trip back to a value's own type cancels, and a widening moves after the kernels
that only move values and into the concatenations it feeds, so that they move the narrow
values and the widening meets the narrowing before the next product. Every rewrite here
gives the same bits: widening is exact, and moving values does not round them."""

from __future__ import annotations

import itertools

from ..device import dtypes as dt
from .ir import Graph, Node
from .passes import dead_code, fresh_value, widens


def cancel_round_trip_casts(graph: Graph) -> Graph:
    """Read x itself where the graph reads cast(cast(x, wider), x's dtype): widening is exact,
    so narrowing back gives x's own values (mixed precision makes these between a GEMM's
    half result and the next GEMM's half operand)."""
    g = graph.copy()
    producer = {out: n for n in g.nodes for out in n.outputs}
    rename: dict[str, str] = {}
    for node in g.nodes:
        node.inputs = [rename.get(n, n) for n in node.inputs]
        if node.op != "cast" or node.outputs[0] in g.outputs:
            continue
        inner = producer.get(node.inputs[0])
        if inner is None or inner.op != "cast":
            continue
        source = g.values[inner.inputs[0]]
        middle = g.values[inner.outputs[0]]
        if g.values[node.outputs[0]].dtype is source.dtype and widens(source.dtype, middle.dtype):
            rename[node.outputs[0]] = source.name
    return dead_code(g)


# Kernels whose output holds only values of their one input, moved or selected (a max
# selects): on a widened input they give the widened output, exactly. REARRANGING: those
# that compute nothing, not even a comparison.
REARRANGING = ("reshape", "transpose", "slice", "depth_to_space", "space_to_depth")
MOVES_VALUES = (*REARRANGING, "max_pool2d")


def widen_after_moving(graph: Graph, moves: tuple[str, ...] = MOVES_VALUES) -> Graph:
    """move(cast(x, wide)) as cast(move(x), wide) where every reader of the cast only
    moves or selects values (`moves`, of one input each): both give the same bits, and the
    second moves the narrow ones. Mixed precision widens each half conv result for the
    float kernels after it; where those only move values on to the next conv (ShuffleNet's
    channel shuffle: a reshape, a transpose and a reshape; a max pooling), the widening
    then meets the narrowing before that conv, and the round trip cancels
    (cancel_round_trip_casts): two cast kernels fewer, and half the bytes moved. A
    widening that several moves read (the shuffle's two slices) moves after each; one
    that a rounding back to half reads too moves as well (see `_widen_later`)."""
    return _widen_later(graph, moves, concats=False)


def narrow_moves(graph: Graph, moves: tuple[str, ...] = REARRANGING) -> Graph:
    """widen_after_moving over `moves` (by default the kernels that compute nothing), and
    concatenations of widened values made narrow (`_concatenated_narrow`), in one sweep: a
    widening goes on through a channel shuffle's reshapes, transpose and slices, into the
    next block's concatenation, and so on, block after block. At O3 mixed, ShuffleNet v2's
    blocks read each half conv result widened, and every slice that fed a conv was a chain
    of its own that rounded the channels back to half: narrow, the slices are views that
    run nothing (torchvision's ShuffleNet v2: 88 kernels, 183.4 us modelled; now 75, 157.5
    us, below O3 float's 163.3). A max pooling keeps its widening: the chains take a
    pooling's casts in, and moving them changed which value an Inception block's
    concatenation is made of, measured slower (O2 weighs both: precision.py)."""
    return _widen_later(graph, moves, concats=True)


def _widen_later(graph: Graph, moves: tuple[str, ...], concats: bool) -> Graph:
    """One sweep in order: each kernel of `moves` (of one input) that reads a widening
    which only such kernels read, or casts back to the narrow type (a round trip that
    cancel_round_trip_casts then drops: the conv beside an Inception block's pooling),
    moves the narrow values and widens after; with `concats`, each concatenation of
    widened values concatenates them narrow. A kernel sees the widenings the sweep moved
    before it, so a widening goes on through any number."""
    g = graph.copy()
    readers: dict[str, list[Node]] = {}
    for node in g.nodes:
        for name in node.inputs:
            readers.setdefault(name, []).append(node)
    outputs = set(g.outputs)
    producer = {out: n for n in g.nodes for out in n.outputs}

    def moving(node: Node) -> bool:
        return node.op in moves and len(node.inputs) == 1

    def moved(node: Node) -> list[Node]:
        cast = producer.get(node.inputs[0]) if moving(node) else None
        if cast is None or cast.op != "cast" or cast.outputs[0] in outputs:
            return [node]
        narrow, wide = g.values[cast.inputs[0]].dtype, g.values[cast.outputs[0]].dtype

        def undone(reader: Node) -> bool:
            """Narrowed back (cancel_round_trip_casts drops it), into no graph output's name
            (which it keeps)."""
            if reader.op != "cast":
                return False
            result = reader.outputs[0]
            return g.values[result].dtype is narrow and result not in outputs

        takers = readers[cast.outputs[0]]
        if not widens(narrow, wide) or not all(moving(r) or undone(r) for r in takers):
            return [node]
        (out,) = node.outputs
        values = fresh_value(g, f"{out}_{narrow.name}", narrow)
        return [
            Node(node.op, [cast.inputs[0]], [values], dict(node.attrs), node.name),
            Node("cast", [values], [out], {"to": wide.name}, f"{node.name}_widen"),
        ]

    nodes: list[Node] = []
    for node in g.nodes:
        made = _concatenated_narrow(g, node, producer) if concats else None
        for new in made or moved(node):
            producer.update(dict.fromkeys(new.outputs, new))
            nodes.append(new)
    g.nodes = nodes
    g.verify()
    return dead_code(g)


def _concatenated_narrow(g: Graph, node: Node, producer: dict[str, Node]) -> list[Node] | None:
    """concat(cast(a, wide), cast(b, wide)) as cast(concat(a, b), wide) for each run of
    inputs that are widening casts from one narrower float type (where other inputs sit
    between, concat(x, cast(concat(a, b)))), adding its values to `g`; None for a kernel
    that is no such concatenation. A concatenation copies values, so both give the same
    bits, and the second copies the narrow ones and widens once. Mixed precision widens
    each half GEMM result for the float ops that read it; in DenseNet every layer's result
    is read by the concatenations of all the layers after it, so each kept its own widening
    kernel (21% of the modelled kernel time of torchvision's DenseNet-121 at O3), which no
    chain could take in, having several readers. Concatenated narrow, the one widening left
    is a step of the chain that reads it (or cancels against a narrowing after it, see
    cancel_round_trip_casts), and the copies move half the bytes."""
    if node.op != "concat":
        return None

    def narrow_of(name: str, wide: dt.DType) -> dt.DType | None:
        cast = producer.get(name)
        if cast is None or cast.op != "cast":
            return None
        narrow = g.values[cast.inputs[0]].dtype
        return narrow if widens(narrow, wide) else None

    wide = g.values[node.outputs[0]].dtype
    runs = [list(run) for _, run in itertools.groupby(
        node.inputs, key=lambda name: narrow_of(name, wide) or name)]  # fmt: skip
    joined = [len(run) > 1 and narrow_of(run[0], wide) is not None for run in runs]
    if not any(joined):
        return None
    axis, inputs, made = int(node.attrs.get("axis", 0)), [], []
    for run, join in zip(runs, joined):
        if not join:
            inputs += run
            continue
        shape = list(g.values[run[0]].shape)
        shape[axis] = sum(g.values[name].shape[axis] for name in run)
        narrow = fresh_value(g, f"{node.outputs[0]}_narrow", narrow_of(run[0], wide))
        g.values[narrow].shape = tuple(shape)
        parts = [producer[name].inputs[0] for name in run]
        made.append(Node("concat", parts, [narrow], dict(node.attrs), f"{node.name}_narrow"))
        # the whole concatenation widened into its own result, or a part of it
        widened = node.outputs[0] if len(runs) == 1 else fresh_value(g, f"{narrow}_wide", wide)
        g.values[widened].shape = tuple(shape)
        made.append(Node("cast", [narrow], [widened], {"to": wide.name}, f"{node.name}_widen"))
        inputs.append(widened)
    if len(runs) > 1:
        made.append(Node("concat", inputs, list(node.outputs), dict(node.attrs), node.name))
    return made
