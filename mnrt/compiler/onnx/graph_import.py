"""Graph import: load an ONNX model, check its structure, walk its nodes in order and hand
each to its converter (or to constant folding), collecting every problem so that one error
lists them all.

Every ONNX value lives on the device in the dtype that names.ELEM_TYPES says holds its
element type (int64 as int64, bfloat16 as bfloat16); types without one are refused by
name. An op, attribute or mode the device cannot run is an `UnsupportedModelError` listing
every such node of the model at once. A model that breaks the ONNX spec (a value read
before it is defined or defined twice, a missing or mistyped attribute, sizes that do not add
up, an axis out of range) is an `InvalidModelError` listing every such problem, and the
unsupported nodes with them.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...errors import (
    DTypeError,
    InvalidArgumentError,
    MnrtError,
    OutOfMemoryError,
    ShapeError,
)
from ...format.text import bad_name
from ...user_warning import warn
from ..builder import Symbol
from ..ir import Graph, GraphError
from . import (
    ops,  # noqa: F401  (fills the registry)
    shapes,
)
from .errors import (
    ForcedInputRead,
    Invalid,
    InvalidModelError,
    NeedsExamples,
    Unsupported,
    UnsupportedModelError,
)
from .examples import examples_of, input_shape, with_example_shapes
from .expand import function_body
from .fold import check_folded_size, fold, foldable
from .reads import value_reads
from .registry import CONVERTERS, key
from .state import Attrs, Converter, Ctx, NoValue, Seq, device_dtype_name


class _Problems:
    """What is wrong with a model, collected over all its nodes so one error lists it all."""

    def __init__(self) -> None:
        self.invalid: list[str] = []
        self.unsupported: list[str] = []
        # what the problems are of, beyond nodes: "input", "output"
        self.parts: set[str] = set()

    def raise_any(self, name: str) -> None:
        # "node(s)", or "input(s)", or "node(s) and input(s)": an input of symbolic shape
        # was counted as an unsupported node
        kinds = " and ".join(f"{k}(s)" for k in ("node", "input", "output")
                             if k in self.parts or (k == "node" and self.invalid))  # fmt: skip
        if self.invalid:
            extra = f" and {len(self.unsupported)} unsupported" if self.unsupported else ""
            raise InvalidModelError(
                f"ONNX model '{name}' has {len(self.invalid)} invalid{extra} {kinds} (fix the "
                "model; onnx.checker.check_model explains ONNX's rules):\n  "
                + "\n  ".join(self.invalid + self.unsupported)
            )
        if self.unsupported:
            raise UnsupportedModelError(
                f"ONNX model '{name}' has {len(self.unsupported)} unsupported {kinds}:\n  "
                + "\n  ".join(self.unsupported)
            )

    def unsupported_part(self, text: str, kind: str = "node") -> None:
        self.unsupported.append(text)
        self.parts.add(kind)


def _label(node: Any) -> str:
    return f"{node.name or '(unnamed)'} ({node.op_type})"


def _spec_problem(node: Any, checker_ctx: Any) -> str | None:
    """What ONNX's own node checker finds wrong with a node of a known op (the number of
    inputs, a missing or mistyped attribute), or None. Ops ONNX does not know at this opset
    are left to the importers, which list them as unsupported unless they can import them."""
    from onnx import AttributeProto, checker, defs

    if not defs.has(node.op_type, node.domain):
        return None
    if any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute):
        return None  # the checker would not see the outer values its subgraphs may read
    try:
        checker.check_node(node, checker_ctx)
    except checker.ValidationError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return None if first.startswith("No Op registered") else first
    return None


def _check_node(cx: Ctx, node: Any, problems: _Problems, poisoned: set[str]) -> None:
    """Fold, convert or expand one node (an op ONNX defines as a function of others, with no
    converter here, becomes that function's body), or record why not."""
    label = _label(node)
    converter = CONVERTERS.get(key(node.domain, node.op_type))
    ins = [n for n in node.input if n]
    reads = value_reads(node)
    spec = _spec_problem(node, cx.checker)
    if spec is not None:
        problems.invalid.append(f"{label}: {spec}")
        poisoned.update(node.output)
        return
    if any(n in poisoned for n in ins):
        if converter is None:
            problems.unsupported_part(f"{label}: op {node.op_type} is not supported")
        poisoned.update(node.output)
        return
    if ins and all(cx.is_const(n) for n in ins) and foldable(node):
        try:
            check_folded_size(cx, node)
        except Invalid as e:
            problems.invalid.append(f"{label}: {e}")
            poisoned.update(node.output)
            return
        folded = fold(node, [cx.consts[n] for n in ins], cx.opsets)
        if folded is not None:
            for name, v in zip([n for n in node.output if n], folded):
                cx.consts[name] = v
            cx.note_sources(reads, [n for n in node.output if n])
            return
    if converter is None and node.domain in ("", "ai.onnx"):
        body = function_body(node, cx.opset, [cx.types.get(n) for n in node.input])
        if body:
            for inner in body:
                _check_node(cx, inner, problems, poisoned)
            return
    if converter is None:
        problems.unsupported_part(f"{label}: op {node.op_type} is not supported")
        poisoned.update(node.output)
        return
    # Its kernels are named in the ONNX node's scope (`/layer0/MatMul/gemm3`): what a
    # stage_assignment's node-name prefixes match.
    with cx.b.scope(node.name) if node.name else contextlib.nullcontext():
        results = _run_converter(cx, node, converter, label, problems)
    if results is None:
        poisoned.update(node.output)
        return
    for name, r in zip(node.output, results):
        if not name:
            continue
        if isinstance(r, (np.ndarray, np.generic)):  # numpy makes a 0-d result a scalar
            cx.consts[name] = np.asarray(r)
        elif isinstance(r, (Seq, NoValue)):
            cx.held[name] = r
        else:
            cx.syms[name] = r
    cx.note_sources(reads, [n for n in node.output if n])


def _run_converter(cx: Ctx, node: Any, converter: Converter, label: str,
                  problems: _Problems) -> list | None:  # fmt: skip
    """The converter's results, or None with the reason recorded in `problems`. A Python
    error of an converter (an index past a list, a bad reshape) means the node is not what
    the ONNX spec allows in some way no check caught: it is reported as such, with the node,
    never as a traceback. Kernel shape, dtype and graph errors (MnrtError) propagate as the
    same error, naming the ONNX node first: the kernel they name is the compiler's."""
    at = Attrs(node)
    try:
        results = converter(cx, node, at)
        extra = at.unread()
        if extra:
            raise Unsupported("attribute " + ", ".join(extra) + " is not supported")
        return results
    except Unsupported as e:
        problems.unsupported_part(f"{label}: {e}")
    except Invalid as e:
        problems.invalid.append(f"{label}: {e}")
    except (ShapeError, DTypeError, GraphError) as e:
        raise type(e)(f"ONNX node {label}: {e}") from None
    except MnrtError:
        raise
    except MemoryError:
        # What the node asks for fits the device (the converters refuse what does not) but
        # not this host: no node's error, and not one to list beside the others.
        raise OutOfMemoryError(
            f"ONNX node {label}: this machine ran out of memory importing it (its constants "
            "or attributes ask for more than the host can allocate); compile on a machine "
            "with more memory, or give the model smaller shapes"
        ) from None
    except (ArithmeticError, IndexError, KeyError, TypeError, ValueError) as e:
        problems.invalid.append(
            f"{label}: cannot import it ({type(e).__name__}: {e}); check its attributes "
            "and input shapes against the ONNX spec"
        )
    return None


def _import_onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise InvalidArgumentError(
            "the ONNX frontend needs the onnx package: pip install mnrt[onnx]"
        ) from None
    return onnx


def load_model(path: str | os.PathLike) -> Any:
    """Read an ONNX file and its external data. A file that is missing, empty, truncated or
    not ONNX, or whose external data is missing, is an InvalidModelError naming the file."""
    onnx = _import_onnx()
    path = os.fspath(path)
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):  # a FIFO would wait for a writer, /dev/zero never end
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise InvalidModelError(f"{path} is {kind}, not an ONNX model")
        empty = os.path.getsize(path) == 0
        model = None if empty else onnx.load(path)
    except OSError as e:
        raise InvalidModelError(f"cannot read ONNX model {path}: {e.strerror or e}") from None
    except Exception as e:  # protobuf's DecodeError, onnx's ValidationError of external data
        raise InvalidModelError(
            f"{path} is not a readable ONNX model ({type(e).__name__}: {e}); give a complete "
            ".onnx file, with its external data files where the model says they are"
        ) from None
    if model is None:
        raise InvalidModelError(f"{path} is empty, not an ONNX model")
    return model


def _check_text(message: Any, where: str) -> None:
    """Every string field of the model holds text. Protobuf hands a name that is not UTF-8
    (a corrupt file's op type or value name) over as bytes, which every later step would
    trip on; bytes fields (raw tensor data, string attributes) are not names and may hold
    any bytes."""
    from google.protobuf.descriptor import FieldDescriptor
    from google.protobuf.message import Message

    for field, value in message.ListFields():
        if field.type == FieldDescriptor.TYPE_STRING:
            items = [value] if isinstance(value, (str, bytes)) else value
            if not all(isinstance(v, str) for v in items):
                raise InvalidModelError(
                    f"ONNX field {where}.{field.name} is not UTF-8 text (the file is "
                    "corrupt, or was not written by an ONNX exporter); export the model again"
                )
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            items = [value] if isinstance(value, Message) else value
            for i, item in enumerate(items):
                _check_text(item, f"{where}.{field.name}" + ("" if item is value else f"[{i}]"))


def _check_opset(model: Any) -> int:
    """The default domain's opset; one newer than the installed onnx knows is refused (its
    ops' meaning is unknown here), as is a version below 1."""
    from onnx import defs

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    newest = defs.onnx_opset_version()
    if not 1 <= opset <= newest:
        raise InvalidModelError(
            f"ONNX model imports opset {opset} of the default domain; the installed onnx "
            f"knows opsets 1..{newest}: export the model with an opset in that range"
        )
    return opset


def _check_structure(g: Any) -> None:
    """Every value defined once, before any node reads it; every graph output defined and
    listed once. Checked up front: the importers assume it."""
    problems = []
    defined = {i.name for i in g.initializer} | {i.name for i in g.input}
    for node in g.node:
        for name in node.input:
            if name and name not in defined:
                problems.append(
                    f"{_label(node)} reads '{name}', which no graph input, initializer or "
                    "earlier node defines (nodes must be in topological order, without cycles)"
                )
        for name in node.output:
            if name and name in defined:
                problems.append(f"{_label(node)} defines '{name}' again; a value has one producer")
            defined.add(name)
    listed: set[str] = set()
    for out in g.output:
        if out.name in listed:
            problems.append(f"graph output '{out.name}' is listed twice")
        elif out.name not in defined:
            problems.append(f"graph output '{out.name}' is not defined by any node or input")
        listed.add(out.name)
    if not g.output:
        problems.append("it declares no graph outputs, so there is nothing to compute")
    if problems:
        raise InvalidModelError(
            f"ONNX model '{g.name or 'onnx'}' is invalid:\n  " + "\n  ".join(problems)
        )


def _initializer(init: Any) -> np.ndarray:
    from onnx import numpy_helper

    if any(d < 0 for d in init.dims):
        raise InvalidModelError(f"initializer '{init.name}' has negative dims {list(init.dims)}")
    try:
        return numpy_helper.to_array(init)
    except Exception as e:  # data shorter than its dims, external data not found...
        raise InvalidModelError(
            f"initializer '{init.name}' (dims {list(init.dims)}) cannot be read: {e}"
        ) from None


def _input_dtype(inp: Any) -> str:
    """The device dtype of a graph input, which must be a tensor."""
    if not inp.type.HasField("tensor_type"):
        kind = inp.type.WhichOneof("value") or "untyped value"
        raise Unsupported(f"input '{inp.name}' is a {kind}, not a tensor")
    return device_dtype_name(inp.type.tensor_type.elem_type, f"input '{inp.name}'")


def from_onnx(model: Any, inputs: Mapping[str, Any] | None = None) -> Graph:
    """Import an ONNX model (a ModelProto or a path) as a compiler Graph.

    `inputs` (graph input name -> example array, as given to compile) fix what the model
    leaves open: symbolic dimensions take the example's size, and an input that an op needs
    at import time (the axes of a reduction, the pads of Pad, the shape of Reshape...), or
    that such a value is computed from (CenterCropPad's `shape`, through Max and Sub to the
    pads), becomes a constant of the example's value. Such an input is no longer an input
    of the graph: a call cannot pass another value that the compiled program would ignore.
    One that device kernels read as well is not made a constant, and the op that needs the
    value is refused."""
    onnx = _import_onnx()
    if isinstance(model, (str, os.PathLike)):
        model = load_model(model)
    if not isinstance(model, onnx.ModelProto):
        raise InvalidArgumentError(f"from_onnx takes an onnx.ModelProto or a path, not {model!r}")
    _check_text(model, "model")
    opset = _check_opset(model)
    examples = examples_of(model.graph, inputs)
    declared = {i.name: i for i in model.graph.input}  # before examples fix their shapes
    outputs = {o.name for o in model.graph.output}
    promised = {n: s for n, (s, _) in shapes.static_shapes(model.graph).items() if n in outputs}
    model = shapes.infer(with_example_shapes(model, examples))
    _check_structure(model.graph)
    # An input that a value needed at import time is computed from (a CenterCropPad's
    # `shape`, through Max and Sub, to its Pad's pads) is taken as a constant, and the
    # model imported again; unless device kernels read it too, when the node is refused.
    weights = {init.name: _initializer(init) for init in model.graph.initializer}  # read once
    forced, may_force = frozenset(), True
    while True:
        try:
            graph = _import(model, opset, weights, examples, declared, forced, may_force)
        except NeedsExamples as e:
            if e.inputs <= forced:  # computed from them on the device all the same
                forced, may_force = frozenset(), False
            else:
                forced |= e.inputs
            continue
        except ForcedInputRead:
            forced, may_force = frozenset(), False
            continue
        _warn_of_other_output_shapes(graph, promised)
        return graph


def _import(model: Any, opset: int, weights: dict[str, np.ndarray],
            examples: dict[str, np.ndarray], declared: dict[str, Any], forced: frozenset[str],
            may_force: bool) -> Graph:  # fmt: skip
    """One import of the model (see from_onnx), its initializers' values `weights`, taking
    the inputs `forced` as constants."""
    import onnx

    g = model.graph
    cx = Ctx(g.name or "onnx", opset)
    cx.forced, cx.may_force = forced, may_force
    cx.opsets = list(model.opset_import)
    cx.inferred = shapes.static_shapes(g)
    cx.types = {v.name: v.type for v in [*g.input, *g.value_info, *g.output]}
    cx.checker = onnx.checker.C.CheckerContext()
    cx.checker.ir_version = model.ir_version
    cx.checker.opset_imports = {o.domain: o.version for o in model.opset_import}

    cx.consts.update(weights)
    problems = _Problems()
    poisoned: set[str] = set()  # values of unsupported inputs and nodes: not listed again
    order = [i.name for i in g.input if i.name not in cx.consts]
    for inp in g.input:
        if inp.name in cx.consts:
            continue
        try:
            dtype = _input_dtype(inp)
            example = examples.get(inp.name)
            cx.add_input(inp.name, input_shape(declared[inp.name], example), dtype, example)
        except Unsupported as e:
            problems.unsupported_part(str(e), "input")
            poisoned.add(inp.name)

    cx.b.reserve([*order, *(out.name for out in g.output)])
    for node in g.node:
        made = len(cx.b.graph.nodes)
        _check_node(cx, node, problems, poisoned)
        _keep_onnx_names(cx, node, made)
    problems.raise_any(g.name)
    for out in g.output:
        try:
            _add_output(cx, out.name)
        except Unsupported as e:
            problems.unsupported_part(f"output '{out.name}': {e}", "output")
    problems.raise_any(g.name)
    cx.add_unread_inputs()
    graph = cx.b.build()
    graph.inputs[:] = [name for name in order if name in graph.inputs]
    return graph


def _keep_onnx_names(cx: Ctx, node: Any, made: int) -> None:
    """Give the values node `node` computed the model's names for them, in place of the
    builder's (`relu_2`): what a binary's buffers, goldens and `--locate` then show is
    what the model calls them. Not where the name is taken (an output's, reserved for it)
    or cannot name an object in a binary, nor a value the node did not make (an Identity's
    result is its input)."""
    graph = cx.b.graph
    new = {o for n in graph.nodes[made:] for o in n.outputs}
    for name in node.output:
        s = cx.syms.get(name)
        if s is None or s == name or s not in new or cx.b.taken(name) or bad_name(name):
            continue
        cx.b.rename_new(s, name, made)
        for other in node.output:  # only this node's names can stand for what it made
            if cx.syms.get(other) == s:
                cx.syms[other] = Symbol(name)


def _warn_of_other_output_shapes(graph: Graph, promised: dict[str, tuple[int, ...]]) -> None:
    """Say where the model computes an output of another shape than it declares (ONNX's
    strict checker refuses such a model; onnxruntime runs it, with a warning of its own that
    the reference session no longer prints): the compiled function gives what the model
    computes."""
    for name, shape in promised.items():
        got = graph.values[name].shape if name in graph.values else None
        if got is not None and tuple(got) != tuple(shape):
            warn(
                f"ONNX model '{graph.name}' declares output '{name}' as {list(shape)} but "
                f"computes {list(got)}; the compiled function gives {list(got)}: fix the "
                "model's declared output shape",
            )


def _add_output(cx: Ctx, name: str) -> None:
    """Make the value of ONNX name `name` a graph output of that name. A value that is an
    input, a parameter or already another output (Identity aliases two names) is copied."""
    if name not in cx.syms and name in cx.consts:  # a constant output (of Shape, say)
        cx.syms[name] = cx.param(cx.consts[name], stem=name)
    s = cx.sym(name)
    v = cx.b.graph.values[s]
    if v.role != "temp" or s in cx.b.graph.outputs:
        s = cx.op("copy", s)
    if name in cx.b.graph.values and name != s:
        raise InvalidArgumentError(
            f"ONNX output '{name}' is also the name of a graph input or initializer; "
            "rename the output (e.g. add an Identity node) so every value has one name"
        )
    cx.b.output(s, name)
    for k, sym in cx.syms.items():  # the builder renamed s: other ONNX names follow it
        if sym == s:
            cx.syms[k] = Symbol(name)


def import_subgraph(
    cx: Ctx, graph: Any, inputs: list[Symbol | np.ndarray | Seq | NoValue]
) -> list[Symbol | np.ndarray | Seq | NoValue]:
    """Import the nodes of a graph attribute (FlexAttention's score_mod, say) into the graph
    being built, its inputs bound to `inputs` (device values, constants: a Loop's iteration
    number; sequences: a Loop's list that grows; empty optionals) and its initializers as
    constants, and give the values of its outputs. Node by node as the main graph (folding,
    converters); its names shadow the outer graph's while it is imported and are forgotten
    after, and the outer values it reads by name are those of the enclosing graph. A
    problem in it is
    the problem of the node that holds it (Unsupported or Invalid, each listed)."""
    names = {v.name for v in [*graph.input, *graph.initializer]}
    names.update(o for node in graph.node for o in node.output)
    kept = (cx.syms, cx.consts, cx.held)
    saved = {n: [values.pop(n, None) for values in kept] for n in names}
    try:
        if len(graph.input) != len(inputs):
            raise Invalid(f"the subgraph '{graph.name}' takes {len(graph.input)} inputs; it "
                          f"is given {len(inputs)}")  # fmt: skip
        for i, value in zip(graph.input, inputs):
            if isinstance(value, np.ndarray):
                cx.consts[i.name] = value
            elif isinstance(value, (Seq, NoValue)):
                cx.held[i.name] = value
            else:
                cx.syms[i.name] = value
        for init in graph.initializer:
            cx.consts[init.name] = _initializer(init)
        problems, poisoned = _Problems(), set()
        for node in graph.node:
            _check_node(cx, node, problems, poisoned)
        if problems.invalid:
            raise Invalid(f"in its subgraph '{graph.name}': " + "; ".join(problems.invalid))
        if problems.unsupported:
            raise Unsupported(f"in its subgraph '{graph.name}': " +
                              "; ".join(problems.unsupported))  # fmt: skip
        defined = cx.syms.keys() | cx.consts.keys() | cx.held.keys()
        missing = [o.name for o in graph.output if o.name not in defined]
        if missing:
            raise Invalid(f"the subgraph '{graph.name}' does not define its outputs {missing}")
        return [cx.value(o.name) for o in graph.output]
    finally:
        for n, values in saved.items():
            for table, value in zip(kept, values):
                table.pop(n, None)
                if value is not None:
                    table[n] = value
