"""einsum: ONNX Einsum (numpy's notation): products of labelled axes, summed over the
labels the output leaves out, with '...' for broadcast leading axes.

Labels are letters; each label's dimensions must agree across the operands (ONNX does not
broadcast them), while the '...' axes broadcast by numpy's rules. Without '->' the output
is '...' followed by the labels used once, in alphabetical order. Operands share one
dtype; integers multiply and sum in their own width, half, bfloat16 and float16 in
float32.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import DTypeError, KernelAttributeError, ShapeError
from .. import dtypes as dt
from .common import check_temporary, same_dtype
from .registry import REQUIRED, Attr, Cost, KernelDef, OutSpec, register


def _bad(equation: str, why: str) -> KernelAttributeError:
    return KernelAttributeError(f"kernel 'einsum': equation {equation!r} {why}")


def _parse(equation: str, shapes: list[tuple[int, ...]]):
    """The output shape and every label's size, checked against the operand shapes."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise _bad(equation, f"names {len(terms)} operand(s) but the kernel has {len(shapes)}")
    sizes: dict[str, int] = {}
    ellipses = []
    counts: dict[str, int] = {}
    for i, (term, shape) in enumerate(zip(terms, shapes, strict=True)):
        pre, dots, post = term.partition("...")
        if pre + post and not (pre + post).isalpha():
            raise _bad(equation, f"term {term!r} may hold letters and one '...' only")
        n_ell = len(shape) - len(pre) - len(post)
        if n_ell < 0 or (not dots and n_ell):
            raise _bad(equation, f"term {term!r} does not match operand {i} of rank {len(shape)}")
        dims = shape[: len(pre)] + shape[len(shape) - len(post) :]
        ellipses.append(shape[len(pre) : len(pre) + n_ell])
        for label, n in zip(pre + post, dims, strict=True):
            if sizes.setdefault(label, n) != n:
                raise ShapeError(
                    f"kernel 'einsum': label {label!r} is {sizes[label]} long in one place "
                    f"and {n} in another (operand {i} of shape {shape})"
                )
            counts[label] = counts.get(label, 0) + 1
    try:
        ell = tuple(np.broadcast_shapes(*ellipses))
    except ValueError:
        raise ShapeError(f"kernel 'einsum': the '...' axes {ellipses} do not broadcast") from None
    if not arrow:
        rhs = "..." + "".join(sorted(c for c, k in counts.items() if k == 1))
    pre, dots, post = rhs.partition("...")
    out_labels = pre + post
    if out_labels and not out_labels.isalpha():
        raise _bad(equation, "has an output with characters other than letters and one '...'")
    if len(set(out_labels)) != len(out_labels) or not set(out_labels) <= set(sizes):
        raise _bad(equation, "names an output label twice or one no input has")
    if any(ellipses) and not dots and any(ell):
        raise _bad(equation, "drops the '...' axes from its output; keep '...' there")
    shape = (*(sizes[c] for c in pre), *(ell if dots else ()), *(sizes[c] for c in post))
    return shape, sizes, ell


def _infer(ins, attrs):
    d = same_dtype("einsum", ins)
    if d not in dt.NUMERIC:
        raise DTypeError(f"kernel 'einsum' takes numbers, not {d.name}")
    shape, sizes, ell = _parse(attrs["equation"], [t.shape for t in ins])
    check_temporary("einsum", "the product", math.prod(sizes.values()) * math.prod(ell))
    return [OutSpec(shape, (d,))]


def _compute(ins, attrs, outs):
    dtype = ins[0].dtype
    return [np.einsum(attrs["equation"], *ins, dtype=dtype, optimize=len(ins) > 2)]


def _cost(ins, outs, attrs):
    _, sizes, ell = _parse(attrs["equation"], [t.shape for t in ins])
    # A multiply-add for every combination of labels (and '...' position), per operand.
    products = math.prod(sizes.values()) * math.prod(ell)
    moved = sum(t.nbytes for t in ins) + sum(t.nbytes for t in outs)
    return Cost(flops=2.0 * products * max(len(ins) - 1, 1), dram_bytes=float(moved))


register(
    KernelDef(
        name="einsum",
        doc="Einstein summation over labelled axes (ONNX Einsum / numpy notation, with '...')",
        inputs=("xs*",),
        outputs=("y",),
        attrs={"equation": Attr("str", REQUIRED, "e.g. 'bij,bjk->bik'; '...' broadcasts")},
        infer=_infer,
        compute=_compute,
        cost=_cost,
    )
)
