"""Patterns exporters write for one operation, as the one kernel that computes it: SiLU
(Sigmoid and Mul), GELU (Div, Erf, Add and two Muls, or its tanh form) and torch.roll
(Slices and a Concat). The exported form takes several launches, and reads its input more
than once, so no one chain can take it; the kernel computes the same operations in the
same order (the same bits in float and double), and is one step of a chain or a matrix
kernel's epilogue (passes.fuse_epilogues). Run from O2 (pipeline.py)."""

from __future__ import annotations

import math

from ..device.kernels.shape import slice_of
from .ir import PARAM, Graph, Node, Value
from .passes import dead_code, drop_unused_values, uses_of


def fuse_silu(graph: Graph) -> Graph:
    """x * sigmoid(x) as the one `silu` kernel, which computes it in the same order: SiLU
    (Swish) as PyTorch exports it is a Sigmoid and a Mul, two kernels and a stored
    intermediate, and the Mul reads x again, so no chain could take in the widening before
    it (EfficientNet-B0 at O3, mixed: 48 of its 232 kernels were such casts). As one kernel
    it is a conv's epilogue (fuse_epilogues) or one step of a chain. The same bits in float
    and double; where float_dtype later makes the elementwise ops half, the product is
    rounded once instead of after the sigmoid too, as any fused epilogue is. A graph that is
    half already (its sigmoid rounded when stored) is left as it is."""
    g = graph.copy()
    uses = uses_of(g)
    producer = {out: n for n in g.nodes for out in n.outputs}
    replaced: dict[int, Node] = {}
    for i, node in enumerate(g.nodes):
        if node.op != "mul" or len(node.inputs) != 2:
            continue
        for x, gate in (node.inputs, node.inputs[::-1]):
            sig = producer.get(gate)
            if sig is None or sig.op != "sigmoid" or sig.inputs[0] != x or uses.get(gate) != 1:
                continue
            out, given = g.values[node.outputs[0]], g.values[x]
            if out.dtype is not given.dtype or not out.dtype.direct or out.shape != given.shape:
                continue
            replaced[i] = Node("silu", [x], list(node.outputs), {}, node.name)
            break
    g.nodes = [replaced.get(i, n) for i, n in enumerate(g.nodes)]
    return dead_code(g)


class _Made:
    """`made(name, op)`: the node of `op` that makes value `name` of a graph, where nothing
    else reads it and it is no output of the graph (an intermediate a pattern may drop)."""

    def __init__(self, g: Graph) -> None:
        self.uses = uses_of(g)
        self.producer = {out: n for n in g.nodes for out in n.outputs}
        self.outputs = set(g.outputs)

    def __call__(self, name: str, op: str) -> Node | None:
        node = self.producer.get(name)
        if node is None or node.op != op or self.uses.get(name) != 1 or name in self.outputs:
            return None
        return node


def fuse_gelu(graph: Graph) -> Graph:
    """GELU as torch.onnx writes nn.GELU() and transformers write it, x * (erf(x / sqrt(2))
    + 1) * 0.5 or x * 0.5 * (1 + erf(...)), and its tanh form as GPT-2 writes it (x * 0.5 *
    (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))), as the one `gelu` kernel: x is read
    two or three times, so the five to eight kernels took two or more chains; a gemm takes
    the erf form as its epilogue (fuse_epilogues). The kernel computes 0.5 * x * (1 + erf(x
    / sqrt(2))) with the same erf, and the tanh form in the same order: the same bits in
    float and double, but where halving or doubling x leaves the normal range. Only the
    division by sqrt(2) is taken: a multiplication by its reciprocal rounds differently."""
    g = graph.copy()
    made = _Made(g)

    def constant(name: str, value: float) -> bool:
        """Whether `name` is a parameter holding `value` as its own dtype rounds it (the
        kernel's constants are the compute dtype's: a float32 sqrt(2) widened to double
        is not double's sqrt(2))."""
        v = g.values[name]
        if v.role != PARAM or v.data is None or not v.dtype.is_float or v.data.size != 1:
            return False
        held = v.data.reshape(-1)[0]
        return bool(held == held.dtype.type(value))

    def split(node: Node | None, value: float) -> str | None:
        """Of a two-input `node`, the input beside the constant `value`."""
        if node is None or len(node.inputs) != 2:
            return None
        a, b = node.inputs
        return a if constant(b, value) else b if constant(a, value) else None

    def erf_of(name: str, x: str | None) -> tuple[str, list[Node]] | None:
        """The nodes making `name` as erf(x / sqrt(2)) + 1 or as tanh(sqrt(2 / pi) * (x +
        0.044715 * x**3)) + 1, each read by nothing else, with the form's `approximate`."""
        add = made(name, "add")
        erf = made(split(add, 1.0) or "", "erf")
        div = made(erf.inputs[0], "div") if erf is not None else None
        if div is not None and div.inputs[0] == x and constant(div.inputs[1], math.sqrt(2.0)):
            return "none", [add, erf, div]
        tanh = made(split(add, 1.0) or "", "tanh")
        scale = made(tanh.inputs[0], "mul") if tanh is not None else None
        inner = made(split(scale, math.sqrt(2.0 / math.pi)) or "", "add")
        if inner is None or x not in inner.inputs:
            return None
        cubed = made(inner.inputs[inner.inputs[0] == x], "mul")
        power = made(split(cubed, 0.044715) or "", "pow")
        if power is None or power.inputs[0] != x or not constant(power.inputs[1], 3.0):
            return None
        return "tanh", [add, tanh, scale, inner, cubed, power]

    replaced: dict[int, Node] = {}
    gone: set[int] = set()
    for i, node in enumerate(g.nodes):
        if node.op != "mul" or len(node.inputs) != 2:
            continue
        match = None
        inner = made(split(node, 0.5) or "", "mul")  # (x * (erf(...) + 1)) * 0.5
        for x, term in (inner.inputs, inner.inputs[::-1]) if inner is not None else ():
            found = erf_of(term, x)
            if found is not None:
                match = x, found[0], [inner, *found[1]]
                break
        for half, term in (node.inputs, node.inputs[::-1]):  # (x * 0.5) * (1 + erf(...))
            scaled = made(half, "mul")
            x = split(scaled, 0.5)
            found = erf_of(term, x) if match is None and x is not None else None
            if found is not None:
                match = x, found[0], [scaled, *found[1]]
        if match is None:
            continue
        x, approximate, parts = match
        out, given = g.values[node.outputs[0]], g.values[x]
        # a graph in half already rounds every step: the kernel would round once
        direct = out.dtype.is_float and out.dtype.direct
        if out.dtype is not given.dtype or not direct or out.shape != given.shape:
            continue
        gone.update(id(n) for n in parts)
        attrs = {} if approximate == "none" else {"approximate": approximate}
        replaced[i] = Node("gelu", [x], list(node.outputs), attrs, node.name)
    g.nodes = [replaced.get(i, n) for i, n in enumerate(g.nodes) if id(n) not in gone]
    drop_unused_values(g)
    g.verify()
    return g


def fuse_layernorm(graph: Graph) -> Graph:
    """LayerNormalization as exporters wrote it before opset 17, ReduceMean, Sub, Pow,
    ReduceMean, Add, Sqrt, Div, then Mul by the scale and Add of the bias, as the one
    `layernorm` kernel: the centred x is read twice (squared, and divided), so no one chain
    took it (two launches a norm; BERT's and GPT-2's older exports hold two a layer). The
    kernel takes the same steps in the same order over the trailing axes: the same bits.
    The scale, and then the bias, are taken where they hold the normalised shape."""
    g = graph.copy()
    made = _Made(g)
    uses, producer, outputs = made.uses, made.producer, made.outputs
    reader = {name: n for n in g.nodes for name in n.inputs}  # the last; used where one

    def read(name: str, op: str) -> Node | None:
        """The two-input node of `op` that alone reads `name`, which is no output."""
        node = reader.get(name)
        if node is None or node.op != op or uses.get(name) != 1 or name in outputs:
            return None
        return node if len(node.inputs) == 2 else None

    def param(name: str, like: Value, shape: tuple[int, ...]) -> bool:
        v = g.values[name]
        return v.role == PARAM and v.data is not None and v.dtype is like.dtype and v.shape == shape

    def trailing(mean: Node | None, rank: int) -> int | None:
        """The first axis of a mean over the trailing axes that keeps their dimensions."""
        if mean is None or not mean.attrs.get("keepdims", True):
            return None
        axes = sorted(a % rank for a in mean.attrs.get("axes") or range(rank))
        return axes[0] if axes == list(range(axes[0], rank)) else None

    def normalised(div: Node) -> tuple[str, int, float, list[Node]] | None:
        """(x, first axis, epsilon, the nodes) where `div` computes (x - mean(x)) /
        sqrt(mean((x - mean(x)) ** 2) + epsilon) over x's trailing axes."""
        centred, root = div.inputs
        sub, sqrt = producer.get(centred), made(root, "sqrt")
        add = made(sqrt.inputs[0], "add") if sqrt is not None else None
        if sub is None or sub.op != "sub" or add is None or uses.get(centred) != 2:
            return None
        x, rank = sub.inputs[0], len(g.values[centred].shape)
        mean_x = made(sub.inputs[1], "mean")
        axis = trailing(mean_x, rank)
        if axis is None or mean_x.inputs[0] != x or centred in outputs:
            return None
        v = g.values[x]
        for variance, eps in (add.inputs, add.inputs[::-1]):
            mean_v = made(variance, "mean")
            power = made(mean_v.inputs[0], "pow") if mean_v is not None else None
            if power is None or trailing(mean_v, rank) != axis or power.inputs[0] != centred:
                continue
            two = power.inputs[1]
            if not any(param(two, v, shape) for shape in ((), (1,))):
                continue
            if float(g.values[two].data.reshape(-1)[0]) != 2.0:
                continue
            if any(param(eps, v, shape) for shape in ((), (1,))):
                epsilon = float(g.values[eps].data.reshape(-1)[0])
                return x, axis, epsilon, [sub, mean_x, sqrt, add, mean_v, power]
        return None

    gone: set[int] = set()
    replaced: dict[int, Node] = {}
    for div in g.nodes:
        if div.op != "div" or len(div.inputs) != 2:
            continue
        found = normalised(div)
        if found is None:
            continue
        x, axis, epsilon, parts = found
        v = g.values[x]
        if not (v.dtype.is_float and v.dtype.direct):
            continue
        out, shape = div.outputs[0], tuple(v.shape[axis:])
        ins, last = [x], div
        scale = read(out, "mul")
        s = scale.inputs[scale.inputs[0] == out] if scale is not None else None
        if s is not None and param(s, v, shape):
            ins, last, parts = [x, s], scale, [*parts, div]
            bias = read(scale.outputs[0], "add")
            b = bias.inputs[bias.inputs[0] == scale.outputs[0]] if bias is not None else None
            if b is not None and param(b, v, shape):
                ins, last, parts = [x, s, b], bias, [*parts, scale]
        gone.update(id(n) for n in parts)
        attrs = {"axis": axis, "epsilon": epsilon}
        replaced[id(last)] = Node("layernorm", ins, list(last.outputs), attrs, last.name)
    g.nodes = [replaced.get(id(n), n) for n in g.nodes if id(n) not in gone]
    drop_unused_values(g)
    g.verify()
    return g


def fuse_rolls(graph: Graph) -> Graph:
    """torch.roll as ONNX exporters write it, concat(x[k:], x[:k]) along one axis, is one
    `roll` kernel: one launch and one pass over x instead of three launches and two (the
    slices' results stored and read back); rolls of one value along several axes in turn,
    a roll along all of them (Swin Transformer's shifted windows roll two). Bits are the
    same: both only move values."""
    g = graph.copy()
    producer = {out: n for n in g.nodes for out in n.outputs}
    uses, outputs = uses_of(g), set(g.outputs)

    def alone(name: str) -> Node | None:
        """The node that makes `name`, where nothing else reads it."""
        return producer.get(name) if uses.get(name) == 1 and name not in outputs else None

    gone: set[int] = set()
    for i, node in enumerate(g.nodes):
        parts = [alone(n) for n in node.inputs]
        if node.op == "concat" and (attrs := _roll_of(g, node, parts)) is not None:
            gone.update(id(p) for p in parts)
            node = Node("roll", list(parts[0].inputs), node.outputs, attrs, node.name)
            uses[node.inputs[0]] -= 1  # read by the roll alone, not by two slices
        elif node.op != "roll":
            continue
        inner = alone(node.inputs[0])  # a roll of a roll along other axes: one roll
        if inner is not None and inner.op == "roll":
            rank = len(g.values[node.inputs[0]].shape)
            axes = tuple(a % rank for a in (*inner.attrs["axes"], *node.attrs["axes"]))
            if len(set(axes)) == len(axes):
                gone.add(id(inner))
                shifts = (*inner.attrs["shifts"], *node.attrs["shifts"])
                node = Node("roll", list(inner.inputs), node.outputs,
                            {"shifts": shifts, "axes": axes}, node.name)  # fmt: skip
        g.nodes[i] = producer[node.outputs[0]] = node
    g.nodes = [n for n in g.nodes if id(n) not in gone]
    drop_unused_values(g)
    g.verify()
    return g


def _roll_of(g: Graph, concat: Node, parts: list[Node | None]) -> dict | None:
    """The roll a concat is, where it joins x[k:] and x[:k] along its axis (slices that
    nothing else reads, each whole along every other axis): shifts n - k."""
    if len(parts) != 2 or any(p is None or p.op != "slice" for p in parts):
        return None
    x = parts[0].inputs[0]
    shape = g.values[x].shape
    if parts[1].inputs[0] != x or not shape:
        return None
    axis = concat.attrs["axis"] % len(shape)
    first, second = (slice_of(shape, p.attrs) for p in parts)
    n = shape[axis]
    k = first[axis].indices(n)[0]
    wants = [(k, n, 1), (0, k, 1)]
    for cut, want in zip((first, second), wants):
        spans = [c.indices(d) for c, d in zip(cut, shape)]
        if spans != [want if j == axis else (0, d, 1) for j, d in enumerate(shape)]:
            return None
    return {"shifts": (n - k,), "axes": (axis,)} if 0 < k < n else None
