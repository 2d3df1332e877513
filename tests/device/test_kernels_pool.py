"""Pooling kernels against window-by-window Python references.

The reference enumerates windows from their definition (a window starts every `stride`
elements of the padded input; in ceil mode a last partial window is kept when it starts
inside the input or its leading padding) and treats out-of-input taps as absent: max
ignores them, avg counts them only with count_include_pad (within the declared padding).
max is exact; averages use the float32 golden tolerance (rtol 1e-5, atol 1e-6).
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_harness import infer, operand, run, spec

from mnrt.device import dtypes as dt
from mnrt.device.numerics import round_to_half
from mnrt.errors import DTypeError, KernelAttributeError, ShapeError


def window_starts(size, before, after, k, s, d, ceil) -> list[int]:
    extent = d * (k - 1) + 1
    starts, o = [], 0
    while True:
        start = o * s - before
        fits = start + extent <= size + after
        partial = ceil and start < size and start + extent - s < size + after
        if not (fits or partial):
            return starts
        starts.append(start)
        o += 1


def pool_ref(x, kernel, stride, padding, dilation, ceil, mode, include_pad=False):
    n, c, h, w = x.shape
    pt, pl, pb, pr = padding
    rows = window_starts(h, pt, pb, kernel[0], stride[0], dilation[0], ceil)
    cols = window_starts(w, pl, pr, kernel[1], stride[1], dilation[1], ceil)
    out = np.zeros((n, c, len(rows), len(cols)))
    for b, ch in np.ndindex(n, c):
        for i, r0 in enumerate(rows):
            for j, c0 in enumerate(cols):
                vals, count = [], 0
                for u in range(kernel[0]):
                    for v in range(kernel[1]):
                        r, s = r0 + u * dilation[0], c0 + v * dilation[1]
                        if 0 <= r < h and 0 <= s < w:
                            vals.append(float(x[b, ch, r, s]))
                        if -pt <= r < h + pb and -pl <= s < w + pr:
                            count += 1
                if mode == "max":
                    out[b, ch, i, j] = max(vals)
                else:
                    out[b, ch, i, j] = math.fsum(vals) / (count if include_pad else len(vals))
    return out


@st.composite
def pool_cases(draw, dilated: bool):
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) if dilated else (1, 1)
    padding = tuple(draw(st.integers(0, (k - 1) // 2 + (k > 1))) for k in kernel * 2)
    ceil = draw(st.booleans())
    size = [
        draw(st.integers(max(1, d * (k - 1) + 1 - p), 7))
        for k, d, p in zip(
            kernel, dilation, (padding[0] + padding[2], padding[1] + padding[3]), strict=True
        )
    ]
    return (
        (draw(st.integers(1, 2)), draw(st.integers(1, 2)), *size),
        kernel,
        stride,
        padding,
        dilation,
        ceil,
    )


def covered(shape, kernel, stride, padding, dilation, ceil) -> bool:
    """Whether every window has a tap on an input element; with dilation a window can
    straddle a small input with all its taps in the padding, and the kernels reject that."""
    for ax in range(2):
        size, before, after = shape[2 + ax], padding[ax], padding[2 + ax]
        for start in window_starts(size, before, after, kernel[ax], stride[ax], dilation[ax], ceil):
            if not any(0 <= start + t * dilation[ax] < size for t in range(kernel[ax])):
                return False
    return True


@settings(max_examples=40, deadline=None)
@given(case=pool_cases(dilated=True), seed=st.integers(0, 2**32 - 1))
def test_max_pool2d_property(case, seed):
    shape, kernel, stride, padding, dilation, ceil = case
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    attrs = {
        "kernel": kernel,
        "stride": stride,
        "padding": padding,
        "dilation": dilation,
        "ceil_mode": ceil,
    }
    if not covered(shape, kernel, stride, padding, dilation, ceil):
        with pytest.raises(KernelAttributeError, match="kernel 'max_pool2d'.*no input element"):
            run("max_pool2d", operand(x), **attrs)
        return
    y = run("max_pool2d", operand(x), **attrs)
    ref = pool_ref(x, kernel, stride, padding, dilation, ceil, "max")
    assert y.shape == ref.shape
    np.testing.assert_array_equal(y, ref)


@settings(max_examples=60, deadline=None)
@given(case=pool_cases(dilated=True), include_pad=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_avg_pool2d_property(case, include_pad, seed):
    shape, kernel, stride, padding, dilation, ceil = case
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    attrs = {
        "kernel": kernel,
        "stride": stride,
        "padding": padding,
        "dilation": dilation,
        "ceil_mode": ceil,
        "count_include_pad": include_pad,
    }
    if not covered(shape, kernel, stride, padding, dilation, ceil):
        with pytest.raises(KernelAttributeError, match="kernel 'avg_pool2d'.*no input element"):
            run("avg_pool2d", operand(x), **attrs)
        return
    y = run("avg_pool2d", operand(x), **attrs)
    ref = pool_ref(x, kernel, stride, padding, dilation, ceil, "avg", include_pad)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=dt.FLOAT.rtol, atol=dt.FLOAT.atol)


@pytest.mark.parametrize(
    ("size", "kernel", "stride", "pad", "ceil", "expected"),
    [
        (112, 3, 2, 1, False, 56),  # ResNet stem max pool
        (6, 3, 2, 0, False, 2),
        (6, 3, 2, 0, True, 3),
        (5, 2, 2, 1, True, 3),  # the ceil window would start in the trailing padding: dropped
        (7, 7, 1, 0, False, 1),
    ],
)
def test_output_sizes_match_pytorch(size, kernel, stride, pad, ceil, expected):
    (out,) = infer(
        "max_pool2d",
        spec((1, 1, size, size)),
        kernel=(kernel, kernel),
        stride=(stride, stride),
        padding=(pad,) * 4,
        ceil_mode=ceil,
    )
    assert out.shape == (1, 1, expected, expected)


def test_stride_defaults_to_kernel_and_integers_pool():
    x = np.arange(16, dtype=np.int32).reshape(1, 1, 4, 4)
    y = run("max_pool2d", operand(x), kernel=(2, 2))
    assert y.dtype == np.int32 and y.tolist() == [[[[5, 7], [13, 15]]]]
    neg = run("max_pool2d", operand(-x - 1), kernel=(3, 3), stride=(2, 2), padding=(1,) * 4)
    assert neg[0, 0].tolist() == [[-1, -2], [-5, -6]]  # padding never wins
    u = run("max_pool2d", operand(x.astype(np.uint8)), kernel=(3, 3), padding=(1, 1, 1, 1))
    assert u.dtype == np.uint8 and u[0, 0, 0, 0] == 5


def test_max_pool_propagates_nan():
    x = np.zeros((1, 1, 2, 2), np.float32)
    x[0, 0, 1, 1] = np.nan
    assert np.isnan(run("max_pool2d", operand(x), kernel=(2, 2))).all()


def test_avg_pool_ceil_overhang_is_never_counted():
    x = np.ones((1, 1, 3, 3), np.float32)
    # Windows start at 0 and 2; the second covers rows 2..3 but row 3 is past the input.
    for include in (False, True):
        y = run("avg_pool2d", operand(x), kernel=(2, 2), ceil_mode=True, count_include_pad=include)
        assert y.tolist() == [[[[1.0, 1.0], [1.0, 1.0]]]]
    y = run("avg_pool2d", operand(x), kernel=(2, 2), padding=(1, 1, 0, 0), count_include_pad=True)
    assert y[0, 0].tolist() == [[0.25, 0.5], [0.5, 1.0]]


@pytest.mark.parametrize("dtype", ["half", "float16", "double"])
def test_pools_in_other_dtypes(dtype):
    d = dt.dtype(dtype)
    x = operand(np.random.default_rng(11).uniform(-4, 4, (2, 3, 6, 6)), d)
    xv = d.from_storage(x[0]).astype(np.float64)
    np.testing.assert_array_equal(
        run("max_pool2d", x, kernel=(3, 3), stride=(2, 2), padding=(1, 1, 1, 1)),
        pool_ref(xv, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, "max"),
    )
    avg = pool_ref(xv, (2, 3), (2, 3), (0,) * 4, (1, 1), False, "avg")
    glob = xv.mean(axis=(2, 3), keepdims=True)
    if d is dt.HALF:
        avg, glob = round_to_half(avg), round_to_half(glob)
    np.testing.assert_allclose(run("avg_pool2d", x, kernel=(2, 3)), avg, rtol=d.rtol, atol=d.atol)
    np.testing.assert_allclose(run("global_avg_pool2d", x), glob, rtol=d.rtol, atol=d.atol)


def test_global_avg_pool2d_matches_window_mean():
    x = np.random.default_rng(12).standard_normal((2, 5, 7, 3)).astype(np.float32)
    y = run("global_avg_pool2d", operand(x))
    ref = pool_ref(x, (7, 3), (7, 3), (0,) * 4, (1, 1), False, "avg")
    assert y.shape == (2, 5, 1, 1)
    np.testing.assert_allclose(y, ref, rtol=dt.FLOAT.rtol, atol=dt.FLOAT.atol)


X = spec((1, 2, 8, 8))
POOL_ERRORS = [
    ("max_pool2d", KernelAttributeError, "needs attribute 'kernel'", X, {}),
    ("max_pool2d", KernelAttributeError, "'kernel' must be 2", X, {"kernel": (2,)}),
    (
        "max_pool2d",
        KernelAttributeError,
        "'stride' must be 2",
        X,
        {"kernel": (2, 2), "stride": (0, 1)},
    ),
    (
        "max_pool2d",
        KernelAttributeError,
        "'padding' must be 4",
        X,
        {"kernel": (2, 2), "padding": (1, 1)},
    ),
    (
        "max_pool2d",
        KernelAttributeError,
        "'dilation' must be 2",
        X,
        {"kernel": (2, 2), "dilation": (0, 1)},
    ),
    (
        "max_pool2d",
        KernelAttributeError,
        "no input element",
        X,
        {"kernel": (2, 2), "padding": (2, 0, 0, 0)},
    ),
    (
        "max_pool2d",
        KernelAttributeError,
        "no input element",
        spec((1, 1, 1, 4)),
        {"kernel": (2, 1), "dilation": (3, 1), "padding": (2, 0, 1, 0)},
    ),
    (
        "avg_pool2d",
        KernelAttributeError,
        "no input element",
        X,
        {"kernel": (2, 2), "padding": (0, 0, 0, 2)},
    ),
    ("max_pool2d", ShapeError, "does not fit", X, {"kernel": (9, 2)}),
    ("max_pool2d", ShapeError, "rank 4", spec((2, 8, 8)), {"kernel": (2, 2)}),
    ("max_pool2d", DTypeError, "takes", spec((1, 1, 4, 4), "bool"), {"kernel": (2, 2)}),
    ("avg_pool2d", DTypeError, "takes", spec((1, 1, 4, 4), "int32"), {"kernel": (2, 2)}),
    (
        "avg_pool2d",
        KernelAttributeError,
        "no input element",
        spec((1, 1, 1, 4)),
        {"kernel": (2, 1), "dilation": (3, 1), "padding": (2, 0, 1, 0)},
    ),
    ("global_avg_pool2d", DTypeError, "floating-point", spec((1, 1, 2, 2), "int32"), {}),
    ("global_avg_pool2d", ShapeError, "rank 4", spec((1, 2, 2)), {}),
    ("global_avg_pool2d", ShapeError, "no spatial elements", spec((1, 2, 0, 3)), {}),
]


@pytest.mark.parametrize(("name", "error", "fragment", "x", "attrs"), POOL_ERRORS)
def test_pool_infer_errors(name, error, fragment, x, attrs):
    with pytest.raises(error, match=f"kernel '{name}'.*{fragment}"):
        infer(name, x, **attrs)


def _brute_force_empty_window(size, before, after, k, s, d, ceil) -> bool | None:
    """Whether some window along one axis holds no input element, by listing every window
    (None: no window fits)."""
    span = size + before + after - d * (k - 1) - 1
    if span < 0:
        return None
    count = (-(-span // s) if ceil else span // s) + 1
    if ceil and (count - 1) * s >= size + before:
        count -= 1
    starts = [i * s - before for i in range(count)]
    return any(not any(0 <= st + t * d < size for t in range(k)) for st in starts)


@settings(max_examples=300, deadline=None)
@given(
    size=st.integers(1, 12),
    before=st.integers(0, 40),
    after=st.integers(0, 12),
    k=st.integers(1, 4),
    s=st.integers(1, 5),
    d=st.integers(1, 16),
    ceil=st.booleans(),
)
def test_windows_of_nothing_but_padding_are_found_without_listing_windows(
    size, before, after, k, s, d, ceil
):
    empty = _brute_force_empty_window(size, before, after, k, s, d, ceil)
    attrs = {"kernel": (k, 1), "stride": (s, 1), "dilation": (d, 1), "ceil_mode": ceil,
             "padding": (before, 0, after, 0)}  # fmt: skip
    x = spec((1, 1, size, 1))
    if empty is None or d * (k - 1) + 1 > size + before + after:
        with pytest.raises(ShapeError, match="does not fit"):
            infer("max_pool2d", x, **attrs)
    elif empty:
        with pytest.raises(KernelAttributeError, match="no input element"):
            infer("max_pool2d", x, **attrs)
    else:
        assert infer("max_pool2d", x, **attrs)[0].shape[2] >= 1


@contextlib.contextmanager
def _address_space_grows_at_most(extra: int):
    """Allocations past `extra` more bytes of address space fail with a MemoryError while
    inside (a regression then fails the test instead of paging the machine to death)."""
    import resource  # POSIX only, like /proc

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    pages = int(Path("/proc/self/statm").read_text().split()[0])
    cap = pages * resource.getpagesize() + extra
    resource.setrlimit(
        resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard)
    )
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("name", ["max_pool2d", "avg_pool2d"])
def test_found_by_fuzzing_the_shape_rule_lists_no_windows(name):
    # infer listed every window's start, and then the first tap of each: 2**30 rows of a
    # binary's declared (not yet allocated) input made it allocate 8 GiB at a time, and
    # the fuzz test's process was killed for want of memory.
    with _address_space_grows_at_most(256 << 20):
        (y,) = infer(name, spec((1, 1, 2**30, 1)), kernel=(1, 1))
    assert y.shape == (1, 1, 2**30, 1)
