"""Fusing runs of vector kernels into `chain` kernels (O3, O4): one launch for a run whose
intermediates stay on chip, a result that is read after the chain as well written out as
its tap, and narrow inputs widened as the chain loads them."""

from __future__ import annotations

from ..device import dtypes as dt
from ..device.kernels import TensorSpec, chain, lookup
from ..device.kernels.registry import COMMON_ATTRS
from ..errors import MnrtError
from .ir import MATRIX_OPS, PARAM, Graph, Node
from .liveness import value_nbytes
from .node_cost import node_cost
from .passes import dead_code, drop_unused_values, uses_of, widens
from .placement import ON_CHIP


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
        widen = _widen_of(node)
        for k, name in enumerate(node.inputs):
            if name in casts:
                widen[k] = g.values[name].dtype.name
        node.inputs = [casts.get(n, n) for n in node.inputs]
        node.attrs["x_dtype"] = g.values[node.inputs[0]].dtype.name
        node.attrs["operand_dtypes"] = ",".join(g.values[n].dtype.name for n in node.inputs[1:])
        node.attrs["widen"] = ",".join(widen)
    return dead_code(g) if casts else g


def _lone_widening(g: Graph, run: _Run) -> bool:
    """Whether a run is one cast to a float type that holds every value of its input's."""
    if len(run) != 1:
        return False
    node = g.nodes[run[0][0]]
    narrow, wide = g.values[node.inputs[0]].dtype, g.values[node.outputs[0]].dtype
    return node.op == "cast" and widens(narrow, wide)


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
        joinable = []
        for j, source in enumerate(node.inputs):
            if source not in ending or node.inputs.count(source) != 1:
                continue
            alone = uses.get(source) == 1 and source not in outputs
            # read elsewhere too: the chain writes it out, where it reads nothing of its own
            # before this node reads it (its readers come after, in node order)
            tapped = ending[source].tap is None and min(read_at[source]) == i
            # A run that is one widening cast, left behind, costs no launch: the chains
            # reading it widen it as they load it (_widen_on_load). So a node continues
            # another run where it can (a transformer's mask, added to the scores a half
            # product widened: softmax joins the mask's run), and never takes a widening
            # in as a tap (its run's one tap: a hardswish's result, which the pooling
            # after it reads and the excite scaling too, could then not be).
            lone = _lone_widening(g, ending[source])
            if alone or (tapped and not lone):
                joinable.append((lone, j, source, alone))
        if joinable:
            _, at, source, alone = min(joinable)
            run = ending.pop(source)
            if not alone:
                run.tap = len(run) - 1
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


def _widen_of(node: Node) -> list[str]:
    """A chain's `widen`, an entry an input ('' for one loaded as given)."""
    return (node.attrs.get("widen") or ",".join([""] * len(node.inputs))).split(",")


def _step_dict(op: str, attrs, at: int, takes) -> dict:
    """A step of a chain's attribute, of a kernel's own attributes."""
    own = {k: v for k, v in attrs.items() if k not in COMMON_ATTRS}
    return {"op": op, "attrs": own, "with": list(takes), "at": at}


def _prologue(g: Graph, i: int, made: dict[str, int], uses: dict[str, int]) -> tuple | None:
    """(position of the node it replaces, the chain) of matrix node i and the pointwise
    kernel, or chain of them without a tap, that makes its input x and nothing else reads
    (squeeze-excite's scaling of the activation the projection conv reads), applied as the
    kernel loads x, where it computes what the two did and the device prices it below them;
    else None. The chain stands at node i: where the kernel before runs earlier, what it
    reads must not be kept on chip for longer than scheduling planned."""
    node = g.nodes[i]
    x = node.inputs[0]
    p = made.get(x)
    if p is None or x in g.outputs or uses.get(x) != 1 or node.inputs.count(x) != 1:
        return None
    before = g.nodes[p]
    shape = g.values[x].shape  # the activation the steps transform, not a gate
    if before.op == chain.NAME:
        rebased = next(
            (r for k, n in enumerate(before.inputs)
             if g.values[n].shape == shape and (r := _rebased(g, before, k)) is not None),
            None,
        )  # fmt: skip
        if before.outputs != [x] or rebased is None:
            return None
        order, parsed, loaded, _ = rebased
        if not all(lookup(s[0]).pointwise for s in parsed):
            return None
        inputs = [before.inputs[j] for j in order]
    elif _chainable(before) and lookup(before.op).pointwise:
        at = next((j for j, n in enumerate(before.inputs) if g.values[n].shape == shape), 0)
        inputs = [before.inputs[at], *(n for j, n in enumerate(before.inputs) if j != at)]
        parsed = [(before.op, before.attrs, at, tuple(range(1, len(inputs))))]
        loaded = [""] * len(inputs)
    else:
        return None
    last = g.last_uses()
    if p != i - 1 and any(g.values[n].location == ON_CHIP and last[n] < i for n in inputs):
        return None
    first = len(inputs)
    steps = [_step_dict(*s) for s in parsed]
    steps.append(_step_dict(node.op, node.attrs, 0, range(first, first + len(node.inputs) - 1)))
    operands = [*inputs[1:], *node.inputs[1:]]
    widen = [*loaded, *[""] * (len(node.inputs) - 1)]
    attrs = {
        "steps": chain.dumps(steps),
        "x_dtype": g.values[inputs[0]].dtype.name,
        "operand_dtypes": ",".join(g.values[n].dtype.name for n in operands),
        "widen": ",".join(widen) if any(widen) else "",
        "mapping": node.attrs["mapping"],
    }
    fused = Node(chain.NAME, [inputs[0], *operands], list(node.outputs), attrs,
                 f"{before.name}+{node.name}")  # fmt: skip
    try:
        fused.attrs = lookup(chain.NAME).check_attrs(fused.attrs)
        specs = [TensorSpec(g.values[n].shape, g.values[n].dtype) for n in fused.inputs]
        plan = chain.plan(fused.attrs, specs)
    except MnrtError:
        return None
    made_specs = [plan[len(parsed) - 1].y, plan[-1].y]
    values = [g.values[x], g.values[node.outputs[0]]]
    if [(t.shape, t.dtype) for t in made_specs] != [(v.shape, v.dtype) for v in values]:
        return None
    if node_cost(g, fused).time_s >= node_cost(g, before).time_s + node_cost(g, node).time_s:
        return None
    return p, fused


def _epilogue_kernel(op: str) -> bool:
    kdef = lookup(op)
    return kdef.pointwise or kdef.rearranges


def _widens_x(g: Graph, after: Node, step, widen: list[str]) -> bool:
    """Whether a chain's `step` (its first) is a cast of its x, loaded as given, to a float
    type that holds every value of x's (exact, as widening on load is)."""
    return (
        step.op == "cast"
        and not step.takes
        and not widen[0]
        and widens(g.values[after.inputs[0]].dtype, dt.dtype(step.attrs["to"]))
    )


def _rebased(g: Graph, node: Node, k: int) -> tuple | None:
    """(order of its inputs, steps, widen, tap) of chain `node` taking its input k as x,
    which it reads once (see `_on`), or None. A first step that widens x (the skip, ahead of
    the add that reads the product) becomes loading x widened, the same bits, so that the
    step reading input k can come first."""
    widen = _widen_of(node)
    parsed, tap = list(chain.listed(node.attrs)), node.attrs.get("tap", chain.NO_TAP)
    if k and _widens_x(g, node, parsed[0], widen) and tap != 0 and len(parsed) > 1:
        widen[0], parsed = parsed[0].attrs["to"], parsed[1:]
        tap -= tap != chain.NO_TAP
    rebased = _on(k, len(node.inputs), parsed)
    if rebased is None or any(0 in takes for *_, takes in rebased[1]):
        return None  # input k read by another step, or again
    order, parsed = rebased
    return order, parsed, [widen[j] for j in order], tap


def _on(k: int, n: int, parsed: list) -> tuple[list[int], list] | None:
    """A chain's steps (as `chain.listed` gives them) rewritten to take its input `k` of `n`
    as their x, with the order of the chain's inputs that goes with it (new position -> old),
    where its first step is the one step reading it: `x + f(x)` written with the skip
    first. None where another step reads it."""
    if not k:
        return list(range(n)), parsed
    first = parsed[0]
    if list(first.takes).count(k) != 1 or any(k in p.takes for p in parsed[1:]):
        return None
    order = [k, *(j for j in range(n) if j != k)]
    new = {old: i for i, old in enumerate(order)}
    read = [*first.takes[: first.at], 0, *first.takes[first.at :]]  # 0: the result before
    at = read.index(k)
    takes = tuple(new[j] for i, j in enumerate(read) if i != at)
    rest = [(op, attrs, a, tuple(new[j] for j in t)) for op, attrs, a, t in parsed[1:]]
    return order, [(first.op, first.attrs, at, takes), *rest]


def _headed(g: Graph, matrix: Node, after: Node) -> Node | None:
    """The chain of matrix kernel `matrix` and its epilogue `after` (a pointwise or
    rearranging kernel, or a chain of them, that reads the matrix kernel's result once), where
    it computes what the two did and the device prices it below them; else None."""
    y = matrix.outputs[0]
    if after.op == chain.NAME:
        if after.inputs.count(y) != 1 or "mapping" in after.attrs:
            return None
        rebased = _rebased(g, after, after.inputs.index(y))
        if rebased is None:
            return None
        order, parsed, widen, tap = rebased
        steps = [{"op": "cast", "attrs": {"to": widen[0]}}] if widen[0] else []
        operands = [after.inputs[j] for j in order[1:]]
    elif _chainable(after) and _epilogue_kernel(after.op) and after.inputs.count(y) == 1:
        at = after.inputs.index(y)
        operands = [n for n in after.inputs if n != y]
        parsed = [(after.op, after.attrs, at, tuple(range(1, len(operands) + 1)))]
        widen = [""] * len(after.inputs)
        steps, tap = [], chain.NO_TAP
    else:
        return None
    own = list(matrix.inputs)
    shift = len(own) - 1  # the epilogue's operand k is the fused chain's k + shift
    if matrix.op == chain.NAME:  # a matrix kernel with its prologue
        pre = [_step_dict(*s) for s in chain.listed(matrix.attrs)]
        loaded = _widen_of(matrix)
    else:
        pre, loaded = [_step_dict(matrix.op, matrix.attrs, 0, range(1, len(own)))], []
    steps = [*pre, *steps]
    lead = len(steps)  # the matrix kernel, and the widening of its result the epilogue loaded
    steps += [
        _step_dict(op, attrs, at, [k + shift for k in takes]) for op, attrs, at, takes in parsed
    ]
    inputs = [*own, *operands]
    widen = [*(loaded or [""] * len(own)), *widen[1:]]
    attrs = {
        "steps": chain.dumps(steps),
        "x_dtype": g.values[own[0]].dtype.name,
        "operand_dtypes": ",".join(g.values[n].dtype.name for n in inputs[1:]),
        "widen": ",".join(widen) if any(widen) else "",
        "mapping": matrix.attrs["mapping"],
        **({"tap": tap + lead} if tap != chain.NO_TAP else {}),
    }
    fused = Node(chain.NAME, inputs, list(after.outputs), attrs, f"{matrix.name}+{after.name}")
    try:
        fused.attrs = lookup(chain.NAME).check_attrs(fused.attrs)
        specs = [TensorSpec(g.values[n].shape, g.values[n].dtype) for n in inputs]
        plan = chain.plan(fused.attrs, specs)
    except MnrtError:  # an epilogue that changes the shape, too many steps or operands
        return None
    made = [plan[len(pre) - 1].y, plan[-1].y] + (
        [plan[tap + lead].y] if tap != chain.NO_TAP else []
    )
    values = [g.values[n] for n in [y, *after.outputs]]
    if [(t.shape, t.dtype) for t in made] != [(v.shape, v.dtype) for v in values]:
        return None  # a result of another dtype than its kernel's natural one: keep it
    if node_cost(g, fused).time_s >= node_cost(g, matrix).time_s + node_cost(g, after).time_s:
        return None
    return fused


def fuse_matrix_chains(graph: Graph) -> Graph:
    """Give each gemm and conv2d the kernels around it (O3, O4): the pointwise kernel, or
    chain of them, that makes its input x and nothing else reads, as its prologue, applied
    as it loads x (squeeze-excite's scaling ahead of the projection conv; a BatchNorm and
    ReLU before a pre-activation conv; the rounding of the graph's input to half); and the
    pointwise or rearranging kernels (reshape, transpose), or chain of them, that alone read
    its result, as its epilogue (a residual block's skip add and ReLU; an inverted residual
    block's ReLU6 and its projection's skip add; attention's heads split as a projection
    stores them). They are one chain holding the matrix kernel: one launch, x read once and
    the result finished as it leaves the accumulators, neither written to DRAM and read
    back. Runs after mapping and layout planning, so the matrix kernel keeps the mapping
    and layouts chosen for it. The chain stands where the matrix kernel stood, where that
    keeps no value on chip longer than scheduling planned (`_prologue`, `_movable`): its
    epilogue may run later (the query, key and value projections, then their heads'
    splits). It computes bitwise what the kernels did (each step rounds to its own
    dtype)."""
    g = graph.copy()
    uses, outputs, made = uses_of(g), set(g.outputs), g.producers()
    readers = {name: j for j, node in enumerate(g.nodes) for name in node.inputs}
    replaced: dict[int, Node | None] = {}
    for i, node in enumerate(g.nodes):
        if i in replaced or node.op not in MATRIX_OPS or len(node.outputs) != 1:
            continue
        if not node.attrs.get("mapping"):
            continue
        fused = _prologue(g, i, made, uses)
        if fused is not None and fused[0] not in replaced:
            replaced[fused[0]], node = None, fused[1]
            replaced[i] = node
        y = node.outputs[0]
        if y in outputs or uses.get(y) != 1:
            continue
        j = readers[y]
        after = g.nodes[j]
        if j in replaced or not (j == i + 1 or _movable(g, made, i, after)):
            continue
        fused = _headed(g, node, after)
        if fused is not None:
            replaced[i], replaced[j] = fused, None
    if not replaced:
        return g
    g.nodes = [replaced.get(i, n) for i, n in enumerate(g.nodes) if replaced.get(i, n)]
    drop_unused_values(g)
    g.verify()
    return g


def _movable(g: Graph, made: dict[str, int], i: int, after: Node) -> bool:
    """Whether `after`, the one reader of node i's result, may run at node i instead: all
    else it reads is made before, and what it makes is not kept on chip (it would be for
    longer), or is no larger than the result it replaces there."""
    y = g.nodes[i].outputs[0]
    if any(made.get(n, -1) >= i for n in after.inputs if n != y):
        return False
    kept = sum(value_nbytes(g, n) for n in after.outputs if g.values[n].location == ON_CHIP)
    return not kept or (g.values[y].location == ON_CHIP and kept <= value_nbytes(g, y))
