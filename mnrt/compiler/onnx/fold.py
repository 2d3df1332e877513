"""Constant folding: a node whose inputs are all known at import time is evaluated on the
host with ONNX's reference evaluator instead of becoming device work (shape computations,
the axes and shape inputs of Reshape, Slice, Squeeze, ...). Also which ops that evaluator
gets wrong, so they are neither folded nor used for goldens."""

from __future__ import annotations

from typing import Any

import numpy as np

from .state import Ctx, check_const_size

_RANDOM_OPS = ("Random", "Bernoulli", "Multinomial")
# Ops where ONNX's reference evaluator (onnx 1.23) departs from the spec in some cases:
# Softmax/LogSoftmax below opset 13 (it ignores the 2-D coercion), BatchNormalization 9..13
# (training statistics), LRN (sums over the batch), GlobalMaxPool (wrong axes unless 2-D),
# SAME_LOWER pools (wrong shape), MaxPool's Indices (some windows of an unpadded stride-1
# pooling point outside themselves), grouped ConvTranspose (raises), LpNormalization p=1
# (sums x, not |x|), RoiAlign before opset 16 (shifts by half a pixel, as opset 16's
# half_pixel does; opset 10 did not, which output_half_pixel keeps), TfIdfVectorizer with
# weights and n-grams out of column order (weighs column i by weight i, not n-gram i's),
# OptionalGetElement (gives the optional, a list, not its element) and OptionalHasElement
# (an empty optional an If gives holds an element).
_EVALUATOR_UNRELIABLE = ("Softmax", "LogSoftmax", "BatchNormalization", "LRN", "GlobalMaxPool",
                         "MaxPool", "AveragePool", "ConvTranspose", "LpNormalization",
                         "RoiAlign", "TfIdfVectorizer", "OptionalGetElement",
                         "OptionalHasElement")  # fmt: skip
# Never evaluated on the host, even on constants: Dropout, and those.
_NO_FOLD = {"Dropout", *_EVALUATOR_UNRELIABLE}


def evaluator_unreliable_ops(model: Any) -> list[str]:
    """The op types of `model`'s nodes (subgraphs included) that ONNX's reference evaluator
    computes wrongly in the way they are used here: goldens then come from mnrt's own
    float64 run of the imported graph instead."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    found: set[str] = set()

    def attr(node: Any, name: str, default: Any) -> Any:
        from onnx import helper

        a = next((a for a in node.attribute if a.name == name), None)
        return default if a is None else helper.get_attribute_value(a)

    def wrong(node: Any) -> bool:
        op = node.op_type
        if op in ("Softmax", "LogSoftmax"):
            return opset < 13
        if op == "BatchNormalization":
            return opset < 14
        if op == "MaxPool" and len(node.output) > 1 and node.output[1]:
            return True
        if op in ("MaxPool", "AveragePool"):
            return attr(node, "auto_pad", b"NOTSET") in (b"SAME_LOWER", "SAME_LOWER")
        if op == "ConvTranspose":
            return attr(node, "group", 1) != 1
        if op == "RoiAlign":
            return opset < 16
        if op == "TfIdfVectorizer":
            order = list(attr(node, "ngram_indexes", []))
            return bool(attr(node, "weights", [])) and order != sorted(order)
        if op == "LpNormalization":
            return attr(node, "p", 2) == 1
        return op in ("LRN", "GlobalMaxPool", "OptionalGetElement", "OptionalHasElement")

    def walk(graph: Any) -> None:
        for node in graph.node:
            if node.domain in ("", "ai.onnx") and wrong(node):
                found.add(node.op_type)
            for a in node.attribute:
                for sub in (*([a.g] if a.HasField("g") else []), *a.graphs):
                    walk(sub)

    walk(model.graph)
    return sorted(found)


def foldable(node: Any) -> bool:
    """Whether a node of constants may be evaluated on the host (not a random op, not one
    the reference evaluator gets wrong, not Dropout, whose training mode is decided later)."""
    return node.op_type not in _NO_FOLD and not node.op_type.startswith(_RANDOM_OPS)


def check_folded_size(cx: Ctx, node: Any) -> None:
    """Before a node of constants is evaluated on the host, refuse outputs that ONNX shape
    inference says the device could not hold (Range to 2**40, Expand to a huge shape)."""
    from onnx import helper

    for name in node.output:
        if name in cx.inferred:
            shape, elem_type = cx.inferred[name]
            itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).itemsize
            check_const_size(shape, itemsize, f"'{name}'")


def fold(node: Any, inputs: list[np.ndarray], opsets: list[Any]) -> list[np.ndarray] | None:
    """Evaluate one node whose inputs are all constants with the ONNX reference evaluator."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [n for n in node.input if n]
    ins = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in zip(names, inputs)
    ]
    outs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
    graph = helper.make_graph([node], "fold", ins, outs)
    try:
        model = helper.make_model(graph, opset_imports=opsets)
        # What the model computes, infinities included (T5's relative-position buckets take
        # the log of 0 and clip it later): numpy's warnings about them are not the user's.
        with np.errstate(all="ignore"):
            results = ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))
    except Exception:
        return None
    if any(isinstance(r, list) for r in results):  # a sequence: the import keeps its own
        return None
    return [np.asarray(r) for r in results]
