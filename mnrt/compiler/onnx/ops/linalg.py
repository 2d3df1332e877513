"""Matrix products (MatMul, Gemm, Einsum) and the determinant (Det)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid, Unsupported


def matmul(cx: Ctx, node: Any, at: Attrs) -> list:
    return [product(cx, cx.sym(node.input[0]), cx.sym(node.input[1]))]


def product(cx: Ctx, a: Symbol, b: Symbol) -> Symbol:
    """a @ b as numpy.matmul takes them (MatMul, and the integer products of quantized
    ops): a 1-D a is a row and a 1-D b a column for the gemm, and drops out of the result."""
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
    return cx.reshape(y, tuple(out))


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


def einsum(cx: Ctx, node: Any, at: Attrs) -> list:
    """A product of two float operands runs as a batched `gemm` on the matrix unit, as
    MatMul does (the device's `einsum` kernel would price it on the vector units); every
    other equation (one or three operands, '...', a label twice in a term: a diagonal)
    goes to the `einsum` kernel as it is."""
    equation = at.get("equation")
    ins = [cx.sym(n) for n in node.input]
    terms = _two_term_product(equation, [cx.shape(s) for s in ins])
    if terms is None or not all(cx.dtype(s).is_float for s in ins):
        return [cx.op("einsum", *ins, equation=equation)]
    (ta, tb), out = terms
    a, ta = _sum_out(cx, ins[0], ta, keep=tb + out)
    b, tb = _sum_out(cx, ins[1], tb, keep=ta + out)
    sizes = dict(zip(ta, cx.shape(a))) | dict(zip(tb, cx.shape(b)))
    batch = [c for c in ta if c in tb and c in out]
    inner = [c for c in ta if c in tb and c not in out]
    left = [c for c in ta if c not in tb]
    right = [c for c in tb if c not in ta]
    if not inner:
        # Nothing summed: [.., L, 1] times [.., 1, R] is an outer or elementwise product, a
        # broadcasting mul rather than a gemm of inner dimension 1.
        a = _arranged(cx, a, ta, [batch, left, inner], sizes)
        y = cx.op("mul", a, _arranged(cx, b, tb, [batch, inner, right], sizes))
    else:
        # gemm's trans_a / trans_b take an operand whose term has its summed labels first
        # (a) or last (b) as it is, with no transpose kernel.
        trans_a = ta == "".join(batch + inner + left) != "".join(batch + left + inner)
        trans_b = tb == "".join(batch + right + inner) != "".join(batch + inner + right)
        a = _arranged(cx, a, ta, [batch, inner, left] if trans_a else [batch, left, inner], sizes)
        b = _arranged(cx, b, tb, [batch, right, inner] if trans_b else [batch, inner, right], sizes)
        y = cx.op("gemm", a, b, trans_a=trans_a, trans_b=trans_b)
    labels = batch + left + right
    y = cx.reshape(y, tuple(sizes[c] for c in labels))
    return [_permuted(cx, y, labels, list(out))]


def _two_term_product(equation: Any, shapes: list[tuple[int, ...]]):
    """`((a's labels, b's labels), output labels)` of an equation the gemm lowering takes,
    or None: two operands, letters only, no label twice in one term, each label as long in
    both operands (the kernel explains what is wrong with an equation that is not)."""
    if not isinstance(equation, str) or len(shapes) != 2:
        return None
    lhs, arrow, out = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != 2 or not all(t.isalpha() for t in terms):
        return None
    if not arrow:
        out = "".join(sorted(c for c in set(lhs) - {","} if lhs.count(c) == 1))
    if (out and not out.isalpha()) or any(len(set(t)) != len(t) for t in (*terms, out)):
        return None
    if not set(out) <= set(terms[0]) | set(terms[1]):
        return None
    if any(len(t) != len(s) for t, s in zip(terms, shapes, strict=True)):
        return None
    sizes: dict[str, int] = {}
    for term, shape in zip(terms, shapes, strict=True):
        if any(sizes.setdefault(c, n) != n for c, n in zip(term, shape, strict=True)):
            return None
    return (terms[0], terms[1]), out


def _sum_out(cx: Ctx, s: Symbol, term: str, keep: str) -> tuple[Symbol, str]:
    """Sum over the labels of `term` no other term nor the output has."""
    axes = [i for i, c in enumerate(term) if c not in keep]
    if not axes:
        return s, term
    return cx.op("sum", s, axes=axes, keepdims=False), "".join(c for c in term if c in keep)


def _arranged(
    cx: Ctx, s: Symbol, term: str, groups: list[list[str]], sizes: dict[str, int]
) -> Symbol:
    """An operand with its labels in `groups` order, each group one axis (a batch label an
    axis of its own)."""
    batch, *rest = groups
    shape = (*(sizes[c] for c in batch), *(_size(sizes, g) for g in rest))
    return cx.reshape(_permuted(cx, s, list(term), [c for g in groups for c in g]), shape)


def _permuted(cx: Ctx, s: Symbol, labels: list[str], order: list[str]) -> Symbol:
    perm = [labels.index(c) for c in order]
    return s if perm == sorted(perm) else cx.op("transpose", s, perm=perm)


def _size(sizes: dict[str, int], labels: list[str]) -> int:
    return math.prod(sizes[c] for c in labels)


# The largest matrix Det eliminates: its kernels grow as the square of the size.
_MAX_DET = 32


def det(cx: Ctx, node: Any, at: Attrs) -> list:
    """Det of [..., M, M]: Gaussian elimination with partial pivoting, unrolled over the M
    columns (static), every batch of matrices at once. Each step picks the row of the
    largest magnitude in the column (argmax), swaps it first (a gather of rows, the sign
    flipping when it moves), multiplies the determinant by the pivot and subtracts the
    pivot row's multiples from the rows below. A zero pivot makes the determinant 0 (the
    division by it is then by 1, so no NaN is made)."""
    x = cx.sym(node.input[0])
    shape = cx.shape(x)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise Invalid(f"X has shape {shape}; Det takes [..., M, M]")
    if not cx.dtype(x).is_float:
        raise Invalid(f"Det of {cx.dtype(x).name}: only floating types")
    size, batch = shape[-1], tuple(shape[:-2])
    if size > _MAX_DET:
        raise Unsupported(f"the determinant of {size} x {size} matrices (unrolled, at most "
                          f"{_MAX_DET})")  # fmt: skip
    if size == 0:
        return [cx.op("fill", shape=list(batch), value=1.0, dtype=cx.dtype(x).name)]

    def const(value: Any, stem: str = "det") -> Symbol:
        return cx.param(np.asarray(value, np.float64), like=x, stem=stem)

    def cut(v: Symbol, rows: tuple[int, int], cols: tuple[int, int]) -> Symbol:
        r = len(cx.shape(v))
        return cx.op("slice", v, starts=[rows[0], cols[0]], ends=[rows[1], cols[1]],
                     axes=[r - 2, r - 1])  # fmt: skip

    b, total = x, None
    for m in range(size, 0, -1):
        column = cx.reshape(cut(b, (0, m), (0, 1)), (*batch, m))
        row = cx.op("argmax", cx.op("abs", column), axis=-1, keepdims=True,
                    select_last_index=False)  # fmt: skip
        flip = None
        if m > 1:  # rows 0 and `row` swap: a gather of rows by the swapped order
            order = cx.param(np.arange(m, dtype=np.int64), stem="det_rows")
            first = cx.op("equal", order, cx.param(np.zeros(1, np.int64), stem="det_zero"))
            picked = cx.op("equal", order, row)
            swapped = cx.op("where", first, row, cx.op("where", picked,
                            cx.param(np.zeros(1, np.int64), stem="det_zero"), order))  # fmt: skip
            index = cx.op("expand", cx.reshape(swapped, (*batch, m, 1)), shape=[*batch, m, m])
            b = cx.op("gather_elements", b, index, axis=len(batch))
            moved = cx.op("greater", row, cx.param(np.zeros(1, np.int64), stem="det_zero"))
            flip = cx.op("where", moved, const(-1.0), const(1.0))  # [..., 1]
        pivot = cx.reshape(cut(b, (0, 1), (0, 1)), (*batch, 1))
        step = pivot if flip is None else cx.op("mul", pivot, flip)
        total = step if total is None else cx.op("mul", total, step)
        if m > 1:
            zero = cx.op("equal", pivot, const(0.0))
            safe = cx.op("where", zero, const(1.0), pivot)
            factors = cx.op("div", cut(b, (1, m), (0, 1)), cx.reshape(safe, (*batch, 1, 1)))
            b = cx.op("sub", cut(b, (1, m), (1, m)), cx.op("mul", factors, cut(b, (0, 1), (1, m))))
    return [cx.reshape(total, batch)]
