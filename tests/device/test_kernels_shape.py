"""Data-movement kernels (transpose, reshape, slice, concat, gather, expand) against
element-by-element index references. They do no arithmetic, so every check is exact, and
half data is compared bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from kernel_harness import infer, operand, run, spec

from mnrt.device import dtypes as dt
from mnrt.device.kernels import lookup
from mnrt.errors import DeviceExecutionError, DTypeError, KernelAttributeError, ShapeError

shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)


def numbered(shape) -> np.ndarray:
    """Distinct values, so any misplaced element shows."""
    return np.arange(math.prod(shape), dtype=np.float32).reshape(shape) + np.float32(0.5)


@settings(max_examples=30, deadline=None)
@given(data=st.data(), shape=shapes)
def test_transpose_property(data, shape):
    x = numbered(shape)
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    y = run("transpose", operand(x), perm=perm)
    assert y.shape == tuple(shape[p] for p in perm)
    for out_idx in np.ndindex(y.shape):
        in_idx = [0] * len(shape)
        for k, p in enumerate(perm):
            in_idx[p] = out_idx[k]
        assert y[out_idx] == x[tuple(in_idx)]


def test_transpose_default_reverses_and_keeps_half_bits():
    x = operand(np.random.default_rng(13).standard_normal((2, 3, 4)), "half")
    y = run("transpose", x)
    assert y.shape == (4, 3, 2)
    assert y[3, 1, 0] == dt.HALF.from_storage(x[0])[0, 1, 3]


@settings(max_examples=30, deadline=None)
@given(shape=shapes, data=st.data())
def test_reshape_property(shape, data):
    x = numbered(shape)
    n = x.size
    # A random target: a factorisation of n, with one size replaced by -1 sometimes.
    target, rest = [], n
    for _ in range(data.draw(st.integers(0, 3))):
        divisors = [d for d in range(1, rest + 1) if rest % d == 0] or [0]
        target.append(data.draw(st.sampled_from(divisors)))
        rest = rest // target[-1] if target[-1] else 0
    target.append(rest)
    if n and data.draw(st.booleans()):
        target[data.draw(st.integers(0, len(target) - 1))] = -1
    y = run("reshape", operand(x), shape=tuple(target))
    assert math.prod(y.shape) == n and y.ravel().tolist() == x.ravel().tolist()
    assert all(a == b for a, b in zip(y.shape, target, strict=True) if b != -1)


def onnx_slice_indices(dim: int, start: int, end: int, step: int) -> list[int]:
    """The indices ONNX Slice selects along one axis, by walking from the clamped start."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    out, i = [], start
    while (step > 0 and i < end) or (step < 0 and i > end):
        out.append(i)
        i += step
    return out


@settings(max_examples=50, deadline=None)
@given(
    shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=6),
    data=st.data(),
)
def test_slice_property_onnx_semantics(shape, data):
    x = numbered(shape)
    axes = data.draw(st.lists(st.integers(0, len(shape) - 1), unique=True, min_size=1))
    starts = [data.draw(st.integers(-9, 9)) for _ in axes]
    ends = [data.draw(st.sampled_from([-9, -3, -1, 0, 2, 5, 9, 2**31 - 1, -(2**31)])) for _ in axes]
    steps = [data.draw(st.sampled_from([1, 2, 3, -1, -2])) for _ in axes]
    signed_axes = [a - len(shape) if data.draw(st.booleans()) else a for a in axes]
    y = run("slice", operand(x), starts=starts, ends=ends, axes=signed_axes, steps=steps)
    picks = [list(range(n)) for n in shape]
    for a, s, e, st_ in zip(axes, starts, ends, steps, strict=True):
        picks[a] = onnx_slice_indices(shape[a], s, e, st_)
    assert y.shape == tuple(len(p) for p in picks)
    assert y.size == 0 or (y == x[np.ix_(*picks)]).all()


def test_slice_defaults_and_examples():
    x = numbered((4, 5))
    assert run("slice", operand(x), starts=(1,), ends=(3,)).tolist() == x[1:3].tolist()
    y = run("slice", operand(x), starts=(-1, 100), ends=(-100, -100), steps=(-1, -2))
    assert y.tolist() == x[::-1, 4::-2].tolist()
    # Negative step with a start before the axis: ONNX clamps it to index 0 (Python would not).
    assert run("slice", operand(x), starts=(-10,), ends=(-20,), steps=(-1,)).tolist() == [
        x[0].tolist()
    ]


@settings(max_examples=30, deadline=None)
@given(
    base=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=3),
    data=st.data(),
)
def test_concat_property(base, data):
    axis = data.draw(st.integers(0, len(base) - 1))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=4))
    parts = []
    for i, k in enumerate(sizes):
        s = list(base)
        s[axis] = k
        parts.append(numbered(s) + np.float32(1000 * i))
    y = run("concat", *[operand(p) for p in parts], axis=axis - len(base))
    expected_shape = list(base)
    expected_shape[axis] = sum(sizes)
    assert y.shape == tuple(expected_shape)
    offset = 0
    for p in parts:
        sel = [slice(None)] * len(base)
        sel[axis] = slice(offset, offset + p.shape[axis])
        assert (y[tuple(sel)] == p).all()
        offset += p.shape[axis]


@settings(max_examples=30, deadline=None)
@given(
    shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4),
    idx_shape=hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3),
    data=st.data(),
)
def test_gather_property(shape, idx_shape, data):
    x = numbered(shape)
    axis = data.draw(st.integers(0, len(shape) - 1))
    dim = shape[axis]
    idx = np.array(
        data.draw(
            st.lists(
                st.integers(-dim, dim - 1),
                min_size=math.prod(idx_shape),
                max_size=math.prod(idx_shape),
            )
        ),
        np.int32,
    ).reshape(idx_shape)
    y = run("gather", operand(x), operand(idx), axis=axis)
    assert y.shape == shape[:axis] + idx_shape + shape[axis + 1 :]
    for out_idx in np.ndindex(y.shape):
        k = int(idx[out_idx[axis : axis + len(idx_shape)]])
        src = (*out_idx[:axis], k % dim, *out_idx[axis + len(idx_shape) :])
        assert y[out_idx] == x[src]


@pytest.mark.parametrize("bad", [3, -4, 2**31 - 1])
def test_gather_out_of_range_index_fails_at_run_time(bad):
    x = operand(numbered((3, 2)))
    idx = operand(np.array([0, bad], np.int32))
    infer("gather", spec((3, 2)), spec((2,), "int32"))  # the shapes are fine
    with pytest.raises(DeviceExecutionError, match=rf"kernel 'gather': index {bad} .*-3\.\.2"):
        run("gather", x, idx)
    empty = operand(np.zeros((0, 2), np.float32))
    with pytest.raises(DeviceExecutionError, match="kernel 'gather'.*length 0"):
        run("gather", empty, operand(np.array([0], np.int32)))


@settings(max_examples=30, deadline=None)
@given(
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=1, max_dims=4, max_side=3),
    extra=st.lists(st.integers(0, 3), max_size=2),
)
def test_expand_property(shapes, extra):
    (in_shape,) = shapes.input_shapes
    target = tuple(extra) + shapes.result_shape
    x = numbered(in_shape)
    y = run("expand", operand(x), shape=target)
    assert y.shape == target
    lead = len(target) - len(in_shape)
    for out_idx in np.ndindex(target):
        src = tuple(0 if n == 1 else i for i, n in zip(out_idx[lead:], in_shape, strict=True))
        assert y[out_idx] == x[src]


def test_shape_ops_move_every_dtype_exactly():
    for d in dt.DTYPES.values():
        x = operand(
            np.arange(6).reshape(2, 3) % 2 if d is dt.BOOL else np.arange(6).reshape(2, 3), d
        )
        xv = d.from_storage(x[0])
        assert run("transpose", x).tolist() == xv.T.tolist()
        assert run("concat", x, x, axis=0).tolist() == xv.tolist() * 2
        got = run("gather", x, operand(np.array([-1], np.int32)), axis=1)
        assert got.tolist() == xv[:, [2]].tolist()


def test_shape_op_costs_count_bytes_not_flops():
    kdef = lookup("gather")
    attrs = kdef.check_attrs({})
    table, idx, out = spec((50000, 64)), spec((8,), "int32"), spec((8, 64))
    cost = kdef.cost([table, idx], [out], attrs)
    assert cost.flops == 0 and cost.dram_bytes == idx.nbytes + 2 * out.nbytes


SHAPE_ERRORS = [
    ("transpose", KernelAttributeError, "'perm'", [spec((2, 3))], {"perm": (0, 0)}),
    ("transpose", KernelAttributeError, "'perm'", [spec((2, 3))], {"perm": (0, 1, 2)}),
    ("reshape", ShapeError, "element counts must match", [spec((2, 3))], {"shape": (4, 2)}),
    ("reshape", ShapeError, "do not divide", [spec((2, 3))], {"shape": (4, -1)}),
    ("reshape", ShapeError, "when another size is 0", [spec((0, 3))], {"shape": (0, -1)}),
    ("reshape", KernelAttributeError, "at most one -1", [spec((2, 3))], {"shape": (-1, -1)}),
    ("reshape", KernelAttributeError, "needs attribute 'shape'", [spec((2, 3))], {}),
    (
        "slice",
        KernelAttributeError,
        "equal lengths",
        [spec((2, 3))],
        {"starts": (0, 0), "ends": (1,)},
    ),
    (
        "slice",
        KernelAttributeError,
        "must not contain 0",
        [spec((2, 3))],
        {"starts": (0,), "ends": (1,), "steps": (0,)},
    ),
    (
        "slice",
        KernelAttributeError,
        "twice",
        [spec((2, 3))],
        {"starts": (0, 0), "ends": (1, 1), "axes": (1, -1)},
    ),
    (
        "slice",
        ShapeError,
        "out of range",
        [spec((2, 3))],
        {"starts": (0,), "ends": (1,), "axes": (2,)},
    ),
    ("concat", ShapeError, "xs\\[1\\] has shape", [spec((2, 3)), spec((3, 3))], {"axis": 1}),
    ("concat", ShapeError, "xs\\[1\\] has shape", [spec((2, 3)), spec((2, 3, 1))], {"axis": 0}),
    ("concat", DTypeError, "cast", [spec((2, 3)), spec((2, 3), "half")], {"axis": 0}),
    ("concat", KernelAttributeError, "needs attribute 'axis'", [spec((2, 3))], {}),
    ("concat", KernelAttributeError, "takes inputs", [], {"axis": 0}),
    ("gather", DTypeError, "indices must be int32", [spec((2, 3)), spec((2,), "float")], {}),
    ("gather", ShapeError, "out of range", [spec((2, 3)), spec((2,), "int32")], {"axis": 2}),
    ("expand", ShapeError, "does not broadcast", [spec((2, 3))], {"shape": (3, 3)}),
    ("expand", ShapeError, "does not broadcast", [spec((2, 3))], {"shape": (3,)}),
    ("expand", ShapeError, "does not broadcast", [spec((1, 3))], {"shape": (-1, 3)}),
    # a hostile binary's shape of more dimensions than numpy has
    ("expand", ShapeError, "does not broadcast", [spec((2, 3))], {"shape": (1,) * 31 + (2, 3)}),
]


@pytest.mark.parametrize(("name", "error", "fragment", "ins", "attrs"), SHAPE_ERRORS)
def test_shape_infer_errors(name, error, fragment, ins, attrs):
    with pytest.raises(error, match=f"kernel '{name}'.*{fragment}"):
        infer(name, *ins, **attrs)
