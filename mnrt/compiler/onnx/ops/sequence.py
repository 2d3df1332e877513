"""ONNX sequences, resolved at import time. The ops that build a sequence take its
positions and split sizes as constants, so its length and elements are known when the
model is imported: a sequence is the list of its elements (device values or constants,
`state.Seq`) that the import keeps, and the ops that read one become the kernels of what
they take from it (a slice, a concatenation) or a constant (its length). What a PyTorch
export makes of a Python list (split, index, append, cat) is then what the same tensors
would compute; SequenceMap imports its body once per element. Sequences as graph inputs or
outputs are refused: the device holds tensors."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid, NoValue, Seq, Unsupported, axis_index
from .common import optional_input


def sequence_empty(cx: Ctx, node: Any, at: Attrs) -> list:
    at.get("dtype")  # an empty sequence's element type: nothing on the device to type
    return [Seq()]


def sequence_construct(cx: Ctx, node: Any, at: Attrs) -> list:
    return [Seq(_value(cx, name) for name in node.input)]


def sequence_insert(cx: Ctx, node: Any, at: Attrs) -> list:
    """The tensor at the position (default: the end; -n..n, a negative one from the end)."""
    seq = cx.seq(node.input[0])
    where = _position(cx, node, 2, len(seq), len(seq), len(seq))
    return [Seq((*seq[:where], _value(cx, node.input[1]), *seq[where:]))]


def sequence_erase(cx: Ctx, node: Any, at: Attrs) -> list:
    """Without the tensor at the position (default: the last; -n..n-1)."""
    seq = cx.seq(node.input[0])
    where = _position(cx, node, 1, len(seq), len(seq) - 1, len(seq) - 1)
    return [Seq((*seq[:where], *seq[where + 1 :]))]


def sequence_at(cx: Ctx, node: Any, at: Attrs) -> list:
    seq = cx.seq(node.input[0])
    return [seq[_position(cx, node, 1, len(seq), len(seq) - 1, None)]]


def sequence_length(cx: Ctx, node: Any, at: Attrs) -> list:
    return [np.array(len(cx.seq(node.input[0])), np.int64)]


def concat_from_sequence(cx: Ctx, node: Any, at: Attrs) -> list:
    """The elements concatenated along `axis`, or stacked on a new one (`new_axis`)."""
    seq = cx.seq(node.input[0])
    if not seq:
        raise Invalid("the sequence is empty: there is nothing to concatenate")
    new_axis = int(at.get("new_axis", 0))
    if new_axis not in (0, 1):
        raise Invalid(f"new_axis={new_axis} must be 0 or 1")
    if all(isinstance(e, np.ndarray) for e in seq):  # a shape put together, say
        axis = axis_index(int(at.get("axis")), seq[0].ndim + new_axis)
        try:
            return [(np.stack if new_axis else np.concatenate)(seq, axis=axis)]
        except ValueError as e:
            raise Invalid(f"its tensors do not fit together: {e}") from None
    parts = [_sym(cx, e) for e in seq]
    axis = axis_index(int(at.get("axis")), len(cx.shape(parts[0])) + new_axis)
    if new_axis:
        parts = [cx.reshape(p, _with_axis(cx.shape(p), axis)) for p in parts]
    if len(parts) == 1:
        return [parts[0]]
    return [cx.op("concat", *parts, axis=axis)]


def split_to_sequence(cx: Ctx, node: Any, at: Attrs) -> list:
    """The input split along `axis`: into pieces of the given sizes (`split` 1-D), of one
    size with a shorter last (`split` a scalar), or into single slices, without that axis
    unless `keepdims` (no `split`)."""
    x = _value(cx, node.input[0])
    shape = tuple(x.shape) if isinstance(x, np.ndarray) else cx.shape(x)
    axis = axis_index(int(at.get("axis", 0)), len(shape))
    dim = shape[axis]
    keepdims = int(at.get("keepdims", 1))
    split = optional_input(node, 1)
    if split is None:
        sizes = [1] * dim
    else:
        given = np.asarray(cx.const(split, "split"))
        values = [int(v) for v in given.reshape(-1)]
        if given.ndim == 0:
            if values[0] < 1:
                raise Invalid(f"split={values[0]} must be at least 1")
            sizes = [min(values[0], dim - i) for i in range(0, dim, values[0])]
        elif any(v < 0 for v in values) or sum(values) != dim:
            raise Invalid(f"split sizes {values} must be sizes >= 0 that add up to {dim}, the "
                          f"size of axis {axis}")  # fmt: skip
        else:
            sizes = values
    bounds = list(itertools.pairwise(itertools.accumulate(sizes, initial=0)))
    squeezed = shape[:axis] + shape[axis + 1 :]
    if isinstance(x, np.ndarray):  # a constant's pieces are constants
        parts = [np.take(x, range(a, b), axis=axis) for a, b in bounds]
        return [Seq(p.reshape(squeezed) if split is None and not keepdims else p for p in parts)]
    parts = [cx.op("slice", x, starts=[a], ends=[b], axes=[axis]) for a, b in bounds]
    if split is None and not keepdims:
        parts = [cx.reshape(p, squeezed) for p in parts]
    return [Seq(parts)]


def _value(cx: Ctx, name: str) -> Symbol | np.ndarray:
    """What an element added to a sequence is: a constant stays one (a SequenceAt of it
    can be a shape), anything else the device value."""
    return cx.consts[name] if cx.is_const(name) else cx.sym(name)


def _sym(cx: Ctx, element: Symbol | np.ndarray) -> Symbol:
    return element if isinstance(element, Symbol) else cx.param(element, stem="seq")


def _position(cx: Ctx, node: Any, index: int, n: int, most: int, default: int | None) -> int:
    """The position input `index` of a sequence of `n` (default where absent, if any):
    from -n to `most`, a negative one counted from the end."""
    name = optional_input(node, index)
    if name is None:
        if default is None:
            raise Invalid("the position is required")
        return default
    values = cx.ints(name, "position")
    if len(values) != 1:
        raise Invalid(f"position {values} must be one integer")
    (p,) = values
    if not -n <= p <= most:
        raise Invalid(f"position {p} is outside a sequence of {n} tensors ({-n} to {most})")
    return p + n if p < 0 else p


def _with_axis(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    return (*shape[:axis], 1, *shape[axis:])


def sequence_map(cx: Ctx, node: Any, at: Attrs) -> list:
    """The body imported once per element (an unrolled map): its inputs the element of the
    first sequence, then each additional input (its element, where it is a sequence of the
    same length), its outputs each gathered into a sequence."""
    from ..graph_import import import_subgraph  # graph_import loads the ops at import

    body = at.get("body")
    seq = cx.seq(node.input[0])
    extra = [cx.value(name) for name in node.input[1:]]
    for name, value in zip(node.input[1:], extra):
        if isinstance(value, Seq) and len(value) != len(seq):
            raise Invalid(f"'{name}' holds {len(value)} tensors, the input sequence {len(seq)}")
    rows = [
        import_subgraph(cx, body, [element, *(v[i] if isinstance(v, Seq) else v for v in extra)])
        for i, element in enumerate(seq)
    ]
    if any(isinstance(v, (Seq, NoValue)) for row in rows for v in row):
        raise Unsupported("a body that gives sequences or optionals: the elements of the "
                          "sequences it makes are tensors")  # fmt: skip
    return [Seq(row[k] for row in rows) for k in range(len(body.output))]
