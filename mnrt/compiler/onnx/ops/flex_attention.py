"""FlexAttention (domain ai.onnx.preview, version 1): attention over 4-D Q, K and V, with
optional score_mod and prob_mod subgraphs that rewrite the scores before the softmax and the
probabilities after it. Attention's core (scaled scores, softmax, the product with V) with
the subgraphs imported in between, node by node like the main graph: a causal or relative
position mask built from the scores' shape folds to constants at import."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid, Unsupported, device_dtype_name
from .attention import attend, check_shapes, scaled_scores


def flex_attention(cx: Ctx, node: Any, at: Attrs) -> list:
    q, k, v = (cx.sym(n) for n in node.input[:3])
    dt = cx.dtype(q)
    if not dt.is_float or cx.dtype(k) is not dt or cx.dtype(v) is not dt:
        raise Unsupported(f"Q, K and V of {cx.dtype(q).name}, {cx.dtype(k).name} and "
                          f"{cx.dtype(v).name} (one float dtype is supported)")  # fmt: skip
    shapes = [cx.shape(t) for t in (q, k, v)]
    if any(len(s) != 4 for s in shapes):
        raise Invalid(f"Q, K and V must be 4-D, got shapes {shapes}")
    check_shapes(cx, q, k, v)
    scores = scaled_scores(cx, q, k, at.get("scale"))
    # softmax and the product with V run in softmax_precision, else in float for float16
    precision = at.get("softmax_precision")
    work = dt.name if dt.name != "float16" else "float"
    if precision is not None:
        work = device_dtype_name(int(precision), "softmax_precision")
    if work not in ("float", "double", "float16"):
        raise Invalid(f"softmax_precision={precision} is not a floating-point type")
    if work != dt.name:
        scores, v = cx.op("cast", scores, to=work), cx.op("cast", v, to=work)
    scores = _modify(cx, at.get("score_mod"), scores)
    probs = _modify(cx, at.get("prob_mod"), cx.op("softmax", scores, axis=-1))
    y = attend(cx, probs, v)
    return [y if work == dt.name else cx.op("cast", y, to=dt.name)]


def _modify(cx: Ctx, graph: Any, x: Symbol) -> Symbol:
    """x through a score_mod / prob_mod subgraph (none: x), which must give one tensor of
    x's shape; of another float dtype it is cast back to x's, as ONNX's definition does."""
    if graph is None:
        return x
    from ..graph_import import import_subgraph  # graph_import loads the ops at import

    outs = import_subgraph(cx, graph, [x])
    if len(outs) != 1:
        raise Invalid(f"the subgraph '{graph.name}' gives {len(outs)} outputs; it must give 1")
    y = outs[0] if isinstance(outs[0], Symbol) else cx.param(outs[0], like=x)
    if cx.shape(y) != cx.shape(x):
        y_shape = cx.shape(y)
        if np.broadcast_shapes(y_shape, cx.shape(x)) != cx.shape(x):
            raise Invalid(f"the subgraph '{graph.name}' gives shape {y_shape}; it must keep "
                          f"{cx.shape(x)}")  # fmt: skip
        y = cx.op("expand", y, shape=list(cx.shape(x)))
    if cx.dtype(y) is not cx.dtype(x):
        if not cx.dtype(y).is_float:
            raise Invalid(f"the subgraph '{graph.name}' gives {cx.dtype(y).name}, not a float")
        y = cx.op("cast", y, to=cx.dtype(x).name)
    return y
