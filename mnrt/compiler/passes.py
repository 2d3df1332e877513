"""Graph passes: small functions from a verified graph to a new verified graph."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..device import dtypes as dt
from ..device.kernels import TensorSpec, chain, lookup, retarget_result_dtype
from ..device.spec import MNCORE2
from ..user_warning import warn
from .ir import MATRIX_OPS, PARAM, TEMP, Graph, GraphError, Node, Value

_FLOATS = {dt.FLOAT, dt.DOUBLE, dt.HALF, dt.FLOAT16}
_PRECISION = {"float": dt.FLOAT, "double": dt.DOUBLE, "half": dt.HALF}


def apply_float_dtype(graph: Graph, mode: str) -> Graph:
    """MLSDK's float_dtype. float|double|half: every floating value in that precision.
    mixed: GEMM and conv operands and results in half (casts inserted around them), the
    rest in float, as the MAU works best in half and accumulates in float: a double or
    float16 model is made float first, so its GEMMs are half too."""
    if mode == "mixed":
        return _mixed(apply_float_dtype(graph, "float"))
    g = graph.copy()
    if mode in _PRECISION:
        target = _PRECISION[mode]
        changed = set()
        for name, v in g.values.items():
            if v.dtype in _FLOATS and v.dtype != target:
                _warn_out_of_range(name, v, target, mode)
                changed.add(name)
                v.dtype = target
        for node in g.nodes:
            retarget_result_dtype(node.attrs, target, _FLOATS)
            # What a compile chose for a node's dtypes does not hold for others (a loaded
            # codegen_dir's graph, made double for its reference): fused chains are made
            # for them again, and mappings dropped (the lowering maps a node without one).
            if node.op == chain.NAME:
                _retarget_chain(g, node, target)
            if "mapping" in node.attrs and changed.intersection([*node.inputs, *node.outputs]):
                node.attrs = {k: v for k, v in node.attrs.items() if k != "mapping"}
        g.verify()
        return g
    raise ValueError(f"float_dtype {mode!r}")  # options.py admits only the modes above


def _retarget_chain(g: Graph, node: Node, target: dt.DType) -> None:
    """A fused chain's steps and the dtypes it was made for (see chain.py) as their
    kernels run one by one would be after apply_float_dtype."""
    ins = [TensorSpec(g.values[n].shape, g.values[n].dtype) for n in node.inputs]
    node.attrs = chain.retargeted(node.attrs, ins, target, _FLOATS)


def _warn_out_of_range(name: str, v: Value, target: dt.DType, mode: str) -> None:
    """A constant that the narrower precision cannot hold becomes inf (or its largest value,
    for half): say so, naming the value, rather than let the results change silently."""
    if v.data is None or v.data.size == 0 or not widens(target, v.dtype):
        return
    finite = np.abs(v.data[np.isfinite(v.data)])
    limit = float(np.finfo(target.read_dtype).max) if target.host is not None else None
    if limit is None or finite.size == 0 or float(finite.max()) <= limit:
        return
    warn(
        f"constant '{name}' holds {float(finite.max()):g}, beyond {target.name}'s range "
        f"(largest {limit:g}): float_dtype='{mode}' makes it infinite; compile with "
        f"float_dtype='{v.dtype.name}' to keep it",
    )


def _mixed(g: Graph) -> Graph:
    in_half = {
        id(n) for n in g.nodes if n.op in MATRIX_OPS and g.values[n.inputs[0]].dtype is dt.FLOAT
    }
    # A parameter that anything else reads too (a float kernel, the graph's outputs) keeps
    # its float value for those; the matrix kernels read a half copy of it.
    elsewhere = {name for n in g.nodes if id(n) not in in_half for name in n.inputs}
    elsewhere.update(g.outputs)
    half_params: dict[str, str] = {}
    nodes: list[Node] = []
    for node in g.nodes:
        if id(node) not in in_half:
            nodes.append(node)
            continue
        inputs = []
        for name in node.inputs:
            v = g.values[name]
            if v.role == PARAM:
                if name not in half_params:  # written once, rounded to half on upload
                    half = fresh_value(g, f"{name}_half", dt.HALF) if name in elsewhere else name
                    g.values[half].role, g.values[half].shape = PARAM, v.shape
                    g.values[half].dtype, g.values[half].data = dt.HALF, v.data
                    half_params[name] = half
                inputs.append(half_params[name])
            else:
                half = fresh_value(g, f"{name}_half", dt.HALF)
                nodes.append(Node("cast", [name], [half], {"to": "half"}, f"{node.name}_in"))
                inputs.append(half)
        out = node.outputs[0]
        result = fresh_value(g, f"{out}_half", dt.HALF)
        nodes.append(Node(node.op, inputs, [result], dict(node.attrs), node.name))
        nodes.append(Node("cast", [result], [out], {"to": "float"}, f"{node.name}_out"))
    g.nodes = nodes
    g.verify()
    return g


def widens(narrow: dt.DType, wide: dt.DType) -> bool:
    """Whether every value of `narrow` is exactly a value of `wide`: true of the floating
    formats here whenever the wider one has more bits (even the 1-6-9 half's range and
    precision fit in float32)."""
    return narrow in _FLOATS and wide in _FLOATS and wide.itemsize > narrow.itemsize


def fresh_value(g: Graph, stem: str, dtype: dt.DType) -> str:
    """A new temporary of `dtype` in `g`, named after `stem`: its name."""
    name = g.unused_name(stem)
    g.values[name] = Value(name, dtype=dtype, role=TEMP)
    return name


def uses_of(g: Graph) -> dict[str, int]:
    """How many times each value is read, a graph output counting as a read: a fusion
    may fold a value into its one reader only where nothing else reads it."""
    counts: dict[str, int] = {}
    for node in g.nodes:
        for name in node.inputs:
            counts[name] = counts.get(name, 0) + 1
    for name in g.outputs:
        counts[name] = counts.get(name, 0) + 1
    return counts


def drop_unused_values(g: Graph) -> None:
    """Forget the values no node, input or output names any more (a fusion's
    intermediates), so that later steps see only what the program holds."""
    live = set(g.inputs) | set(g.outputs)
    for node in g.nodes:
        live.update(node.inputs)
        live.update(node.outputs)
    g.values = {n: v for n, v in g.values.items() if n in live}


def dead_code(graph: Graph) -> Graph:
    """Remove nodes whose results nothing uses, and the values only they used."""
    g = graph.copy()
    needed = set(g.outputs)
    kept = []
    for node in reversed(g.nodes):
        if needed.intersection(node.outputs):
            kept.append(node)
            needed.update(node.inputs)
    g.nodes = kept[::-1]
    drop_unused_values(g)
    g.verify()
    return g


def common_subexpressions(graph: Graph) -> Graph:
    """Compute each distinct (op, inputs, attributes) once."""
    g = graph.copy()
    seen: dict[tuple, list[str]] = {}
    rename: dict[str, str] = {}
    nodes = []
    for node in g.nodes:
        node.inputs = [rename.get(n, n) for n in node.inputs]
        key = (
            node.op,
            tuple(node.inputs),
            tuple(sorted((k, repr(v)) for k, v in node.attrs.items())),
        )
        earlier = seen.get(key)
        if earlier is not None and not set(node.outputs) & set(g.outputs):
            rename.update(zip(node.outputs, earlier))
            continue
        seen[key] = node.outputs
        nodes.append(node)
    g.nodes = nodes
    drop_unused_values(g)
    g.verify()
    return g


def fold_constants(graph: Graph) -> Graph:
    """Evaluate at compile time every node whose inputs are all parameters (a transposed or
    reshaped weight, say): its result becomes a parameter."""
    from ..device.emulator import EmulatedDevice
    from ..device.kernels import lookup

    g = graph.copy()
    nodes = []
    for node in g.nodes:
        ins = [g.values[n] for n in node.inputs]
        if not ins or any(v.role != PARAM for v in ins) or set(node.outputs) & set(g.outputs):
            nodes.append(node)
            continue
        outs = [g.values[n] for n in node.outputs]
        for v in outs:  # before numpy allocates it: shapes the importer could not infer
            nbytes = math.prod(v.shape or ()) * v.dtype.itemsize
            if nbytes > MNCORE2.dram_bytes:
                raise GraphError(
                    f"node '{node.name}' ({node.op}) of constants makes '{v.name}' of shape "
                    f"{v.shape}, {nbytes} bytes, more than the device's {MNCORE2.dram_bytes} "
                    "bytes of DRAM; check the shape it is made from"
                )
        in_bits = [(v.dtype.to_storage(v.data.astype(v.dtype.read_dtype)), v.dtype) for v in ins]
        out_bits = [(np.empty(v.shape, v.dtype.storage), v.dtype) for v in outs]
        with np.errstate(all="ignore"):
            EmulatedDevice.execute(lookup(node.op), node.attrs, in_bits, out_bits)
        for v, (bits, dtype) in zip(outs, out_bits):
            v.role, v.data = PARAM, dtype.from_storage(bits)
    g.nodes = nodes
    drop_unused_values(g)
    g.verify()
    return g


def _param_vector(
    g: Graph, name: str, length: int, channel_axis: int, rank: int
) -> np.ndarray | None:
    """A parameter that scales or shifts along one axis of a rank-`rank` result, as a
    float64 vector of `length`, or None if it is anything else."""
    v = g.values[name]
    if v.role != PARAM or v.data is None:
        return None
    shape = v.shape
    expected = [1] * rank
    expected[channel_axis] = length
    squeezed = [d for d in shape if d != 1]
    if len(shape) > rank or squeezed not in ([length], []):
        return None
    padded = (1,) * (rank - len(shape)) + tuple(shape)
    if any(p not in (1, e) for p, e in zip(padded, expected)):
        return None
    return np.broadcast_to(v.data.astype(np.float64).reshape(padded), expected).reshape(-1)


_COMMUTATIVE = ("add", "mul")


def _absorb_into_epilogue_kernels(
    graph: Graph, absorb: Callable[[Graph, Node, Node], bool]
) -> Graph:
    """Offer each node whose first input is the only use of the result of a kernel with an
    epilogue (conv2d, gemm, scale_shift) to `absorb(g, node, producer)`; when that changes
    the producer to compute the node's result too, the producer takes over the node's
    output and the node goes."""
    g = graph.copy()
    uses = uses_of(g)
    producer = {out: i for i, n in enumerate(g.nodes) for out in n.outputs}
    removed: set[int] = set()
    for i, node in enumerate(g.nodes):
        # The result may be either operand of an add or a mul: exporters write a Linear's
        # bias first (Add(bias, MatMul(x, w))), and both are exactly commutative.
        offered = node
        if node.op in _COMMUTATIVE and len(node.inputs) == 2 and node.inputs[0] not in producer:
            offered = Node(node.op, node.inputs[::-1], node.outputs, node.attrs, node.name)
        src = producer.get(offered.inputs[0]) if offered.inputs else None
        if src is None or src in removed or uses.get(offered.inputs[0]) != 1:
            continue
        base = g.nodes[src]
        # Once its result is activated in the epilogue, nothing more folds into a kernel.
        if "epilogue" not in lookup(base.op).attrs or base.attrs.get("epilogue", "none") != "none":
            continue
        if not absorb(g, offered, base):
            continue
        base.outputs = [node.outputs[0]]
        producer[node.outputs[0]] = src
        removed.add(i)
    g.nodes = [n for i, n in enumerate(g.nodes) if i not in removed]
    drop_unused_values(g)
    g.verify()
    return g


def _absorb_scale_shift(g: Graph, node: Node, base: Node) -> bool:
    if base.op not in ("conv2d", "gemm") or node.op not in ("mul", "add"):
        return False
    if g.values[base.inputs[1]].role != PARAM:
        return False
    if base.op == "gemm" and (
        base.attrs["trans_b"] or base.attrs["alpha"] != 1.0 or base.attrs["beta"] != 1.0
    ):
        return False
    out = g.values[base.outputs[0]]
    axis = 1 if base.op == "conv2d" else len(out.shape) - 1
    channels = out.shape[axis]
    vec = _param_vector(g, node.inputs[1], channels, axis, len(out.shape))
    if vec is None or g.values[node.outputs[0]].dtype is not out.dtype:
        return False
    w = g.values[base.inputs[1]]
    bias_name = base.inputs[2] if len(base.inputs) > 2 else None
    if bias_name is not None and (
        g.values[bias_name].role != PARAM or g.values[bias_name].shape != (channels,)
    ):
        return False
    bias = g.values[bias_name].data.astype(np.float64) if bias_name else np.zeros(channels)
    weight = w.data.astype(np.float64)
    if node.op == "mul":
        weight = weight * (vec.reshape(-1, 1, 1, 1) if base.op == "conv2d" else vec)
        bias = bias * vec
    else:
        bias = bias + vec
    w_new = fresh_value(g, f"{base.inputs[1]}_folded", w.dtype)
    g.values[w_new].role, g.values[w_new].shape = PARAM, w.shape
    g.values[w_new].data = weight.astype(np.float32 if w.dtype.is_half else w.dtype.read_dtype)
    b_new = fresh_value(g, f"{base.outputs[0]}_bias", out.dtype)
    g.values[b_new].role, g.values[b_new].shape = PARAM, (channels,)
    g.values[b_new].data = bias.astype(np.float32 if out.dtype.is_half else out.dtype.read_dtype)
    base.inputs = [base.inputs[0], w_new, b_new]
    return True


def _affine_step(g: Graph, node: Node) -> tuple[str, str, np.ndarray] | None:
    """(op, x, the parameter's values in float64) where `node` multiplies its one
    non-parameter float operand x by a parameter, or adds one, into a result of x's shape
    and dtype; else None."""
    if node.op not in _COMMUTATIVE or len(node.inputs) != 2 or node.inputs[0] == node.inputs[1]:
        return None
    a, b = (g.values[n] for n in node.inputs)
    x, p = (a, b) if b.role == PARAM else (b, a)
    out = g.values[node.outputs[0]]
    if x.role == PARAM or p.data is None or x.dtype not in _FLOATS or x.shape is None:
        return None
    if out.dtype is not x.dtype or p.dtype is not x.dtype or out.shape != x.shape:
        return None
    if len(p.shape) > len(x.shape):
        return None
    return node.op, x.name, p.data.astype(np.float64)


def _composed(steps: list[tuple[str, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Scale and shift (S, T) with x * S + T what the steps compute from x, in float64."""
    scale, shift = np.ones(()), np.zeros(())
    for op, p in steps:
        if op == "mul":
            scale, shift = scale * p, shift * p
        else:
            shift = shift + p
    return np.asarray(scale), np.asarray(shift)


def merge_scale_shifts(graph: Graph) -> Graph:
    """Compose each run of multiplications by and additions of parameters (an inference
    BatchNormalization, once imported, followed by the Mul and Add of a Caffe2 Scale layer,
    as the ONNX model zoo's DenseNet-121 and Inception v2 write it) into at most one `mul`
    and one `add`: x * S + T, S and T computed in float64 and rounded once. Fewer kernels,
    fewer roundings; a run whose composed parameters overflow or flush to zero in their
    dtype is left as it is, as are runs already of that form."""
    g = graph.copy()
    uses = uses_of(g)
    producer = {out: i for i, n in enumerate(g.nodes) for out in n.outputs}
    # the node ending a run -> the run's nodes and their steps (see _affine_step), in order
    runs: dict[int, list[tuple[int, tuple]]] = {}
    for i, node in enumerate(g.nodes):
        step = _affine_step(g, node)
        if step is None:
            continue
        src = producer.get(step[1])
        run = runs.pop(src, None) if src is not None and uses.get(step[1]) == 1 else None
        runs[i] = [*(run or []), (i, step)]
    replace: dict[int, list[Node]] = {}
    for last, run in runs.items():
        if [step[0] for _, step in run] in (["mul"], ["add"], ["mul", "add"]):
            continue
        made = _merged(g, [g.nodes[i] for i, _ in run], [step for _, step in run])
        if made is not None:
            replace.update({i: [] for i, _ in run})
            replace[last] = made
    return _replaced(g, replace)


def _replaced(g: Graph, replace: dict[int, list[Node]]) -> Graph:
    """`g` with node i replaced by the nodes `replace[i]` (none: removed), and the values
    no node reads any more forgotten."""
    if not replace:
        return g
    g.nodes = [n for i, node in enumerate(g.nodes) for n in replace.get(i, [node])]
    drop_unused_values(g)
    g.verify()
    return g


def _merged(g: Graph, run: list[Node], steps: list[tuple]) -> list[Node] | None:
    """The nodes computing x * S + T for a run of affine steps (`steps`, see
    merge_scale_shifts), or None where S or T would not keep the steps' values in x's
    dtype."""
    x = g.values[steps[0][1]]
    scale, shift = _composed([(op, p) for op, _, p in steps])
    read = x.dtype.read_dtype if not x.dtype.is_half else np.float32
    stored = []
    for v, default in ((scale, 1.0), (shift, 0.0)):
        with np.errstate(all="ignore"):
            r = np.asarray(v, read)
        if not (np.all(np.isfinite(r)) and np.all((r != 0) | (v == 0))):
            return None
        stored.append(None if np.all(v == default) else r)
    if stored[0] is None and stored[1] is None:  # x * 1 + 0: one kernel still, as a producer
        stored[0] = np.ones((), read)
    out, result = run[-1].outputs[0], x.name
    made = []
    for op, data, node in (("mul", stored[0], run[0]), ("add", stored[1], run[-1])):
        if data is None:
            continue
        param = fresh_value(g, f"{node.name or op}_{'scale' if op == 'mul' else 'shift'}", x.dtype)
        g.values[param].role, g.values[param].shape, g.values[param].data = (
            PARAM, tuple(data.shape), data,
        )  # fmt: skip
        last = op == "add" or stored[1] is None
        made_out = out if last else fresh_value(g, f"{out}_scaled", x.dtype)
        g.values[made_out].shape = x.shape
        made.append(Node(op, [result, param], [made_out], {}, node.name))
        result = made_out
    return made


def fuse_scale_shift(graph: Graph) -> Graph:
    """Make each multiplication by a parameter whose result only an addition of a parameter
    reads one `scale_shift` kernel: an inference BatchNormalization that no conv or gemm
    absorbed (DenseNet's, after a concatenation) is then one pass over x, as onnxruntime
    runs it (its BatchNormalization kernel), where a mul and an add store an x-sized result
    twice and read one back. The same roundings in float32; half rounds once, at the end."""
    g = graph.copy()
    uses = uses_of(g)
    producer = {out: i for i, n in enumerate(g.nodes) for out in n.outputs}
    replace: dict[int, list[Node]] = {}
    for i, node in enumerate(g.nodes):
        step = _affine_step(g, node)
        src = producer.get(step[1]) if step is not None and step[0] == "add" else None
        if src is None or uses.get(step[1]) != 1:
            continue
        mul = g.nodes[src]
        inner = _affine_step(g, mul)
        if inner is None or inner[0] != "mul":
            continue
        x = inner[1]
        scale = _other(mul, x)
        replace[src] = []
        replace[i] = [
            Node("scale_shift", [x, scale, _other(node, step[1])], node.outputs, {}, node.name)
        ]
    return _replaced(g, replace)


def _other(node: Node, x: str) -> str:
    """The operand of a two-operand node that is not x."""
    return node.inputs[1] if node.inputs[0] == x else node.inputs[0]


def fold_scale_shift(graph: Graph) -> Graph:
    """Fold a per-channel `mul` by a parameter and `add` of a parameter that follow a conv2d
    or gemm (an inference BatchNormalization, once imported) into its weights and bias."""
    return _absorb_into_epilogue_kernels(graph, _absorb_scale_shift)


def _absorb_activation(g: Graph, node: Node, base: Node) -> bool:
    from ..device.kernels.unary import EPILOGUES

    if node.op not in EPILOGUES or node.attrs.get("approximate", "none") != "none":
        return False
    if g.values[node.outputs[0]].dtype is not g.values[base.outputs[0]].dtype:
        return False
    base.attrs["epilogue"] = node.op
    return True


def fuse_epilogues(graph: Graph) -> Graph:
    """Fold an activation that is the only use of a gemm, conv2d or scale_shift result into
    that kernel's epilogue, so the result is activated before it is stored instead of being
    stored, read back and stored again (a pre-activation norm's ReLU, as cuDNN fuses a
    BatchNormalization and its activation)."""
    return _absorb_into_epilogue_kernels(graph, _absorb_activation)
