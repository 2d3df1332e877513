"""Fusing runs of vector kernels into `chain` kernels (O3, O4): one launch for a run whose
intermediates stay on chip, a result that is read after the chain as well written out as
its tap, and narrow inputs widened as the chain loads them."""

from __future__ import annotations

from ..device.kernels import TensorSpec, chain, lookup
from ..device.kernels.registry import COMMON_ATTRS
from ..errors import MnrtError
from .ir import MATRIX_OPS, PARAM, Graph, Node
from .node_cost import node_cost
from .passes import dead_code, drop_unused_values, uses_of, widens


def _chainable(node: Node) -> bool:
    """Whether a node can be a step of a chain: one output, a vector kernel (not a matrix
    kernel, nor a chain)."""
    return (
        len(node.outputs) == 1
        and bool(node.inputs)
        and node.op != chain.NAME
        and node.op not in MATRIX_OPS
        and "mapping" not in node.attrs
    )


def _chain_node(g: Graph, run: list[tuple[Node, int]], tap: int = chain.NO_TAP) -> Node:
    """The chain of a run of (node, position of the input it takes from the node before,
    or of the chain's own input for the first), writing out step `tap`'s result too."""
    x = run[0][0].inputs[run[0][1]]
    operands: list[str] = []
    steps = []
    for node, at in run:
        takes = []
        for j, name in enumerate(node.inputs):
            if j == at:
                continue
            if name != x and name not in operands:
                operands.append(name)
            takes.append(0 if name == x else 1 + operands.index(name))
        own = {k: v for k, v in node.attrs.items() if k not in COMMON_ATTRS}
        steps.append({"op": node.op, "attrs": own, **({"with": takes} if takes else {}), "at": at})
    attrs = {
        "steps": chain.dumps(steps),
        "x_dtype": g.values[x].dtype.name,
        "operand_dtypes": ",".join(g.values[n].dtype.name for n in operands),
        **({"tap": tap} if tap != chain.NO_TAP else {}),
    }
    outputs = [run[-1][0].outputs[0]] + ([run[tap][0].outputs[0]] if tap != chain.NO_TAP else [])
    name = "+".join(n.name or n.op for n, _ in run)
    return Node(chain.NAME, [x, *operands], outputs, attrs, name)


def _chain_input(g: Graph, node: Node) -> int:
    """Where a chain starting at `node` takes its input: its first operand that is not a
    parameter (the activation a BatchNormalization's mul scales), else its first."""
    return next((j for j, n in enumerate(node.inputs) if g.values[n].role != PARAM), 0)


class _Run(list):
    """A run of (node index, position of the input it takes) to fuse, and the position in
    it of the step whose result the chain also writes out (its tap), if one is."""

    tap: int | None = None


def _pieces(g: Graph, run: _Run, read_at: dict[str, list[int]]) -> list[tuple[list, int]]:
    """A run in chains of at most chain.MAX_STEPS steps, each with its tap (NO_TAP for
    none). A chain stands where its last step stood, so a tapped result that something
    reads before that (a step of the same chain included) is no tap: the run is cut after
    the step that makes it, which then ends a chain of its own."""
    cuts = [run]
    if run.tap is not None:
        t = run.tap
        end = min((t // chain.MAX_STEPS + 1) * chain.MAX_STEPS, len(run)) - 1
        value = g.nodes[run[t][0]].outputs[0]
        if any(at <= run[end][0] for at in read_at[value] if at != run[t + 1][0]):
            cuts = [run[: t + 1], run[t + 1 :]]
    pieces = []
    for cut in cuts:
        for start in range(0, len(cut), chain.MAX_STEPS):
            piece = cut[start : start + chain.MAX_STEPS]
            t = run.tap - start if len(cuts) == 1 and run.tap is not None else chain.NO_TAP
            pieces.append((piece, t if 0 <= t < len(piece) - 1 else chain.NO_TAP))
    return pieces


def _fused(g: Graph, run: list[tuple[int, int]], tap: int = chain.NO_TAP) -> Node | None:
    """The chain of a run of (node index, position of the input it takes), writing out step
    `tap`'s result too, where it computes what the steps did and the device prices it below
    them run one by one; else None."""
    if len(run) < 2:
        return None
    steps = [(g.nodes[i], at) for i, at in run]
    fused = _chain_node(g, steps, tap)
    try:
        fused.attrs = lookup(chain.NAME).check_attrs(fused.attrs)
        specs = [TensorSpec(g.values[n].shape, g.values[n].dtype) for n in fused.inputs]
        plan = chain.plan(fused.attrs, specs)
    except MnrtError:  # steps too long to list, or an intermediate too large to hold
        return None
    planned = [(s.y.shape, s.y.dtype) for s in plan]
    made = [(g.values[n.outputs[0]].shape, g.values[n.outputs[0]].dtype) for n, _ in steps]
    if planned != made:
        return None  # a value of another dtype than its kernel's natural one: keep it
    if node_cost(g, fused).time_s >= sum(node_cost(g, n).time_s for n, _ in steps):
        return None
    return fused


def fuse_chains(graph: Graph) -> Graph:
    """Merge each maximal run of vector kernels, where every result but the last is read
    only by the next kernel (once) and is not a graph output, into one `chain` kernel: one
    launch instead of one per kernel, the intermediates kept on chip (the casts mixed
    precision puts around a GEMM, pooling, reshapes, softmax; an inference
    BatchNormalization's scale and shift and the activation after them; a residual add).
    A step's other operands (parameters, a skip connection) become the chain's. One result
    in a run may be read elsewhere too (after the chain) where the chain writes it out as
    its tap: a residual block's result, which the next block's skip connection reads in
    float and its convolutions, after a rounding to half the chain goes on to compute. The
    chain computes bitwise what its steps did, and stands where its last step stood, so the
    graph's outputs keep their names and every operand is computed before it; a run is
    fused only where the device prices the chain below its steps run one by one
    (node_cost). A matrix kernel's output cast stays a step of the chain rather than being
    absorbed into the kernel: writing float instead of rounding to half and widening gives
    other bits. A tap cut short (read before its chain would end) may leave a kernel that
    another of its readers' chains takes in: fusing again until nothing changes finds it."""
    g = graph.copy()
    while True:
        fused = _fuse_chains_once(g)
        if len(fused.nodes) == len(g.nodes):
            return _widen_on_load(fused)
        g = fused


def _widen_on_load(g: Graph) -> Graph:
    """Chains read the narrow value where a widening cast's result is read only by chains:
    each widens it as it loads it (its `widen`), which is exact, and the cast's launch and
    its wide copy in DRAM go (the half result of an inverted residual block's projection,
    which the next block's skip add reads in float; a conv's half result that a hardswish
    reads twice, so that no chain could start with its widening)."""
    readers: dict[str, list[Node]] = {}
    for node in g.nodes:
        for name in node.inputs:
            readers.setdefault(name, []).append(node)
    casts = {}
    for node in g.nodes:
        if node.op != "cast" or node.outputs[0] in g.outputs:
            continue
        narrow, wide = g.values[node.inputs[0]].dtype, g.values[node.outputs[0]].dtype
        takers = readers.get(node.outputs[0], [])
        if widens(narrow, wide) and takers and all(r.op == chain.NAME for r in takers):
            casts[node.outputs[0]] = node.inputs[0]
    for node in g.nodes:
        if node.op != chain.NAME or casts.keys().isdisjoint(node.inputs):
            continue
        widen = (node.attrs.get("widen") or ",".join([""] * len(node.inputs))).split(",")
        for k, name in enumerate(node.inputs):
            if name in casts:
                widen[k] = g.values[name].dtype.name
        node.inputs = [casts.get(n, n) for n in node.inputs]
        node.attrs["x_dtype"] = g.values[node.inputs[0]].dtype.name
        node.attrs["operand_dtypes"] = ",".join(g.values[n].dtype.name for n in node.inputs[1:])
        node.attrs["widen"] = ",".join(widen)
    return dead_code(g) if casts else g


def _fuse_chains_once(graph: Graph) -> Graph:
    """One round of fuse_chains: each run starting from the graph's kernels as they are."""
    g = graph.copy()
    uses = uses_of(g)
    outputs = set(g.outputs)
    read_at: dict[str, list[int]] = {}
    for i, node in enumerate(g.nodes):
        for name in node.inputs:
            read_at.setdefault(name, []).append(i)
    runs: list[_Run] = []
    ending: dict[str, _Run] = {}  # the result of a run's last node -> that run
    for i, node in enumerate(g.nodes):
        if not _chainable(node):
            continue
        run, at = None, 0
        for j, source in enumerate(node.inputs):
            if source not in ending or node.inputs.count(source) != 1:
                continue
            alone = uses.get(source) == 1 and source not in outputs
            # read elsewhere too: the chain writes it out, where it reads nothing of its own
            # before this node reads it (its readers come after, in node order)
            tapped = ending[source].tap is None and min(read_at[source]) == i
            if alone or tapped:
                run, at = ending.pop(source), j
                if not alone:
                    run.tap = len(run) - 1
                break
        if run is None:
            run, at = _Run(), _chain_input(g, node)
            runs.append(run)
        run.append((i, at))
        ending[node.outputs[0]] = run
    replaced: dict[int, Node | None] = {}
    for run in runs:
        for piece, tap in _pieces(g, run, read_at):
            made = [(piece, _fused(g, piece, tap))]
            if made[0][1] is None and tap != chain.NO_TAP:  # the tap does not pay: as if none
                made = [(half, _fused(g, half)) for half in (piece[: tap + 1], piece[tap + 1 :])]
            for part, fused in made:
                if fused is not None:
                    replaced.update(dict.fromkeys(i for i, _ in part[:-1]))
                    replaced[part[-1][0]] = fused
    g.nodes = [replaced.get(i, n) for i, n in enumerate(g.nodes) if replaced.get(i, n)]
    drop_unused_values(g)
    g.verify()
    return g
