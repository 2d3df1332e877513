"""Matrix products: MatMul and Gemm."""

from __future__ import annotations

from typing import Any

from ..state import Attrs, Ctx


def matmul(cx: Ctx, node: Any, at: Attrs) -> list:
    a, b = cx.sym(node.input[0]), cx.sym(node.input[1])
    sa, sb = cx.shape(a), cx.shape(b)
    if len(sa) == 1:
        a = cx.reshape(a, (1, sa[0]))
    if len(sb) == 1:
        b = cx.reshape(b, (sb[0], 1))
    y = cx.op("gemm", a, b)
    out = list(cx.shape(y))
    if len(sa) == 1:
        out.pop(-2)
    if len(sb) == 1:
        out.pop(-1)
    return [cx.reshape(y, tuple(out))]


def gemm(cx: Ctx, node: Any, at: Attrs) -> list:
    ins = [cx.sym(n) for n in node.input if n]
    at.get("broadcast")
    return [
        cx.op(
            "gemm",
            *ins,
            trans_a=bool(at.get("transA", 0)),
            trans_b=bool(at.get("transB", 0)),
            alpha=float(at.get("alpha", 1.0)),
            beta=float(at.get("beta", 1.0)),
        )
    ]
