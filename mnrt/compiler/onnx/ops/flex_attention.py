"""FlexAttention (domain ai.onnx.preview, version 1): attention over 4-D Q, K and V with
optional score_mod / prob_mod subgraphs. Without them it is Attention's core (scaled scores,
softmax, the product with V); a model with either subgraph is refused by name, since the
frontend does not inline subgraphs."""

from __future__ import annotations

from typing import Any

from ..state import Attrs, Ctx, Invalid, Unsupported, device_dtype_name
from .attention import attend, check_shapes, scaled_scores


def flex_attention(cx: Ctx, node: Any, at: Attrs) -> list:
    for name in ("score_mod", "prob_mod"):
        if at.has(name):
            at.get(name)
            raise Unsupported(f"the {name} subgraph (the frontend does not inline subgraphs)")
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
    y = attend(cx, cx.op("softmax", scores, axis=-1), v)
    return [y if work == dt.name else cx.op("cast", y, to=dt.name)]
