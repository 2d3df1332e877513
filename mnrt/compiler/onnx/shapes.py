"""Shape and type inference: what ONNX's own inference finds for the graph's values, used to
refuse oversized constants before they are folded.

ONNX's inference is C++ that trusts some attributes: on a few values it reads out of bounds
(the process dies of SIGSEGV or an assertion) or loops for hours, before it could raise
anything a caller can catch. Every node is checked for those first (`_UNSAFE`, found by
fuzzing onnx 1.23's inference with the node cases' models mutated), so a malformed model
is an InvalidModelError naming the node, not a dead `mnrt compile`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

from .errors import InvalidModelError

_INT32 = range(-(2**31), 2**31)


def infer(model: Any) -> Any:
    """The model with ONNX shape inference's value_info added. Inference fails on what the
    model declares (its values' types and shapes, with the example inputs' sizes in its
    symbolic dimensions), so the failure is the model's. Not `check_type`: it calls types
    invalid that are unsupported (a Cast to uint2), and one node's error would hide the
    others that the import lists together."""
    import onnx

    problems = [
        f"{node.name or '(unnamed)'} ({node.op_type}): {why}"
        for node in _nodes(model)
        if (why := _unsafe(node)) is not None
    ]
    if problems:
        raise InvalidModelError(
            f"ONNX model '{model.graph.name}' is invalid, and ONNX's shape inference would "
            "crash or hang on it:\n  " + "\n  ".join(problems)
        )
    try:
        return onnx.shape_inference.infer_shapes(model)
    except Exception as e:
        raise InvalidModelError(
            f"ONNX model '{model.graph.name}' is invalid: ONNX shape inference failed: {e} "
            "(fix the types and shapes the model declares, or the example inputs' shapes; "
            "onnx.checker.check_model(model, full_check=True) explains ONNX's rules)"
        ) from None


def static_shapes(g: Any) -> dict[str, tuple[tuple[int, ...], int]]:
    """Static shapes and element types ONNX shape inference found for the graph's values."""
    shapes = {}
    for v in [*g.value_info, *g.output]:
        tt = v.type.tensor_type
        dims = tt.shape.dim
        if v.type.HasField("tensor_type") and tt.HasField("shape") and tt.elem_type \
                and all(d.HasField("dim_value") for d in dims):  # fmt: skip
            shapes[v.name] = (tuple(d.dim_value for d in dims), tt.elem_type)
    return shapes


def _nodes(model: Any) -> Iterator[Any]:
    """Every node ONNX's inference visits: the graph's, its subgraphs' (If, Loop, Scan
    bodies) and those of the model's local functions."""
    from onnx import AttributeProto

    pending = [*model.graph.node, *(n for f in model.functions for n in f.node)]
    while pending:
        node = pending.pop()
        yield node
        for a in node.attribute:
            if a.type == AttributeProto.GRAPH:
                pending.extend(a.g.node)
            elif a.type == AttributeProto.GRAPHS:
                pending.extend(n for g in a.graphs for n in g.node)


def _unsafe(node: Any) -> str | None:
    """Why ONNX's inference cannot be given this node, or None. Ops of other domains it
    does not look into (it has no schema for them)."""
    from onnx import AttributeProto

    if node.domain not in _schema_domains():
        return None
    for a in node.attribute:
        texts = [a.s] if a.type == AttributeProto.STRING else list(a.strings)
        for text in texts:
            try:
                text.decode("utf-8")
            except UnicodeDecodeError:
                # An Einsum equation that is not text made inference loop without end.
                return f"attribute {a.name} is not UTF-8 text"
    check = _UNSAFE.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    if check is None:
        return None
    ints = {a.name: a.i for a in node.attribute if a.type == AttributeProto.INT}
    return check(node, ints)


@functools.cache
def _schema_domains() -> frozenset[str]:
    """The domains whose ops ONNX's inference knows (has a schema for)."""
    from onnx import defs

    return frozenset({"ai.onnx"} | {s.domain for s in defs.get_all_schemas_with_history()})


def _layer_norm(node: Any, ints: dict[str, int]) -> str | None:
    # Inference truncates axis to 32 bits: 2**31 read as -2**31 indexed before the shape.
    axis = ints.get("axis", -1)
    return None if axis in _INT32 else f"axis={axis} is out of range"


def _gather_nd(node: Any, ints: dict[str, int]) -> str | None:
    # A negative batch_dims indexed before the indices' shape.
    batch_dims = ints.get("batch_dims", 0)
    if 0 <= batch_dims < 2**31:
        return None
    return f"batch_dims={batch_dims} is out of range (0 to {2**31 - 1})"


def _split(node: Any, ints: dict[str, int]) -> str | None:
    # Fewer parts than outputs indexed past the sizes (an assertion); 2**31 parts looped
    # for hours.
    parts = ints.get("num_outputs")
    if parts is None or parts < 1 or parts == len(node.output):
        return None
    return f"num_outputs={parts} but the node has {len(node.output)} outputs"


_UNSAFE: dict[str, Callable[[Any, dict[str, int]], str | None]] = {
    "LayerNormalization": _layer_norm,
    "GatherND": _gather_nd,
    "Split": _split,
}
