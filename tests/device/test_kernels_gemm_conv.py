"""gemm and conv2d against float64 references computed from the definitions.

Tolerance for float32 results: a sum of K products accumulated in float32 is within
K * 2**-24 * sum|a*b| of the exact value, so results are checked against that bound (times
two for slack) rather than a fixed rtol. Half results must equal the float64 reference
rounded to half within one half ulp (accumulation order may move a value across a tie).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_harness import infer, operand, run, spec

from mnrt.device import dtypes as dt
from mnrt.device.emulator import EmulatedDevice
from mnrt.device.kernels import common, lookup
from mnrt.device.kernels.common import columns
from mnrt.device.numerics import round_to_half
from mnrt.errors import DTypeError, KernelAttributeError, ShapeError

EPS32 = 2.0**-24


def within_accumulation_bound(y, ref, magnitude, k: int, eps: float = EPS32) -> None:
    bound = 2 * max(k, 1) * eps * magnitude + 1e-30
    err = np.abs(np.asarray(y, np.float64) - ref)
    assert (err <= bound).all(), f"max error {err.max()} over bound {bound.max()}"


def half_close(y, ref) -> None:
    np.testing.assert_allclose(y, round_to_half(ref), rtol=dt.HALF.rtol, atol=dt.HALF.atol)


# --- gemm ------------------------------------------------------------------------------


def gemm_ref(a, b, c, trans_a, trans_b, alpha, beta):
    """Batched matrix product by explicit dot products, in float64."""
    a = np.swapaxes(a, -1, -2) if trans_a else a
    b = np.swapaxes(b, -1, -2) if trans_b else b
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, (*batch, *a.shape[-2:])).astype(np.float64)
    b = np.broadcast_to(b, (*batch, *b.shape[-2:])).astype(np.float64)
    out = np.zeros((*batch, a.shape[-2], b.shape[-1]))
    mag = np.zeros_like(out)
    for idx in np.ndindex(*out.shape):
        row, col = a[idx[:-1]], b[idx[:-2]][:, idx[-1]]
        out[idx] = alpha * sum(float(u) * float(v) for u, v in zip(row, col, strict=True))
        mag[idx] = abs(alpha) * float(np.abs(row) @ np.abs(col))
    if c is not None:
        out += beta * c
        mag += abs(beta * c)
    return out, mag


@settings(max_examples=30, deadline=None)
@given(
    m=st.integers(1, 5),
    n=st.integers(1, 5),
    k=st.integers(1, 6),
    batch_a=st.sampled_from([(), (2,), (1,), (3, 1)]),
    batch_b=st.sampled_from([(), (2,), (1,)]),
    trans_a=st.booleans(),
    trans_b=st.booleans(),
    with_c=st.booleans(),
    alpha=st.sampled_from([1.0, -0.5, 2.0]),
    beta=st.sampled_from([1.0, 0.0, 3.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_gemm_property_float32(
    m, n, k, batch_a, batch_b, trans_a, trans_b, with_c, alpha, beta, seed
):
    rng = np.random.default_rng(seed)
    sa = (*batch_a, k, m) if trans_a else (*batch_a, m, k)
    sb = (*batch_b, n, k) if trans_b else (*batch_b, k, n)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    c = rng.standard_normal((n,)).astype(np.float32) if with_c else None
    ins = [operand(a), operand(b)] + ([operand(c)] if with_c else [])
    y = run("gemm", *ins, trans_a=trans_a, trans_b=trans_b, alpha=alpha, beta=beta)
    ref, mag = gemm_ref(a, b, c, trans_a, trans_b, alpha, beta)
    assert y.shape == ref.shape and y.dtype == np.float32
    within_accumulation_bound(y, ref, mag, k + 1)


def test_gemm_double_and_int32():
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    ref, mag = gemm_ref(a, b, None, False, False, 1.0, 1.0)
    within_accumulation_bound(run("gemm", operand(a), operand(b)), ref, mag, 4, 2.0**-53)
    ai, bi = rng.integers(-100, 100, (2, 3, 5)), rng.integers(-100, 100, (5, 4))
    y = run("gemm", operand(ai, "int32"), operand(bi, "int32"))
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, gemm_ref(ai, bi, None, False, False, 1.0, 1.0)[0])


@pytest.mark.parametrize("out_dtype", [None, "float"])
@pytest.mark.parametrize("dtype", ["half", "float16"])
def test_gemm_half_rounds_a_float32_accumulation(dtype, out_dtype):
    rng = np.random.default_rng(5)
    a, b = (
        operand(rng.standard_normal((4, 33)), dtype),
        operand(rng.standard_normal((33, 3)), dtype),
    )
    d = dt.dtype(dtype)
    ref, mag = gemm_ref(d.from_storage(a[0]), d.from_storage(b[0]), None, False, False, 1.0, 1.0)
    y = run("gemm", a, b, out_dtype=out_dtype)
    if out_dtype == "float":
        assert y.dtype == np.float32
        within_accumulation_bound(y, ref, mag, 33)
    elif dtype == "half":
        half_close(y, ref)
    else:
        np.testing.assert_allclose(
            y, ref.astype(np.float16), rtol=dt.FLOAT16.rtol, atol=dt.FLOAT16.atol
        )


def _sum_test_row(k: int) -> np.ndarray:
    """1 followed by k - 1 copies of 2**-10: each addend is a quarter of a half ulp of 1, so
    a half accumulator would stay at 1.0 while a float32 one reaches 1 + (k - 1) * 2**-10."""
    return np.array([1.0] + [2.0**-10] * (k - 1))


@pytest.mark.parametrize("dtype", ["half", "float16"])
def test_gemm_half_accumulates_in_float32(dtype):
    a = operand(_sum_test_row(1025)[None, :], dtype)
    b = operand(np.ones((1025, 1)), dtype)
    assert run("gemm", a, b).tolist() == [[2.0]]


def test_gemm_accumulating_into_its_own_c():
    # y = a @ b + y: a program binds c and y to one buffer; c must be read before y is written.
    a = np.array([[2.0, 0.0], [0.0, 3.0]], np.float32)
    b = np.ones((2, 2), np.float32)
    y = np.full((2, 2), 10.0, np.float32)
    kdef = lookup("gemm")
    ins = [(a, dt.FLOAT), (b, dt.FLOAT), (y, dt.FLOAT)]
    EmulatedDevice.execute(kdef, kdef.check_attrs({}), ins, [(y, dt.FLOAT)])
    assert y.tolist() == [[12.0, 12.0], [13.0, 13.0]]


def test_gemm_infer_errors():
    with pytest.raises(ShapeError, match="kernel 'gemm': inner dimensions"):
        infer("gemm", spec((2, 3)), spec((2, 3)))
    with pytest.raises(ShapeError, match="kernel 'gemm'.*rank"):
        infer("gemm", spec((3,)), spec((3, 2)))
    with pytest.raises(DTypeError, match="kernel 'gemm'"):
        infer("gemm", spec((2, 2), "bool"), spec((2, 2), "bool"))
    with pytest.raises(DTypeError, match="kernel 'gemm'.*cast"):
        infer("gemm", spec((2, 2)), spec((2, 2), "half"))
    with pytest.raises(ShapeError, match="kernel 'gemm': c"):
        infer("gemm", spec((2, 3)), spec((3, 4)), spec((3, 4)))
    with pytest.raises(ShapeError, match="kernel 'gemm': batch"):
        infer("gemm", spec((2, 2, 3)), spec((3, 3, 4)))


# --- conv2d ----------------------------------------------------------------------------


def conv_ref(x, w, bias, stride, padding, dilation, groups, positions=None):
    """Convolution from its definition, one output element at a time, in float64; with
    `positions` only those (n, o, i, j) are computed (the rest stay nan)."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = stride, dilation, padding
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    out = np.full((n, o, oh, ow), np.nan)
    mag = np.full_like(out, np.nan)
    for b, oc, i, j in positions if positions is not None else np.ndindex(out.shape):
        g = oc // og
        acc = 0.0 if bias is None else float(bias[oc])
        absacc = abs(acc)
        for ci in range(cg):
            for u in range(kh):
                for v in range(kw):
                    r, s = i * sh + u * dh - pt, j * sw + v * dw - pl
                    if 0 <= r < h and 0 <= s < wd:
                        p = x[b, g * cg + ci, r, s] * w[oc, ci, u, v]
                        acc += p
                        absacc += abs(p)
        out[b, oc, i, j], mag[b, oc, i, j] = acc, absacc
    return out, mag


@st.composite
def conv_cases(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    cg, og = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, dilation[0] * (kh - 1) + 1 - padding[0] - padding[2]), 7))
    w = draw(st.integers(max(1, dilation[1] * (kw - 1) + 1 - padding[1] - padding[3]), 7))
    n = draw(st.integers(1, 2))
    return (n, groups * cg, h, w), (groups * og, cg, kh, kw), stride, padding, dilation, groups


@settings(max_examples=40, deadline=None)
@given(case=conv_cases(), with_bias=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_conv2d_property_float32(case, with_bias, seed):
    xs, ws, stride, padding, dilation, groups = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    bias = rng.standard_normal(ws[0]).astype(np.float32) if with_bias else None
    ins = [operand(x), operand(w)] + ([operand(bias)] if with_bias else [])
    y = run("conv2d", *ins, stride=stride, padding=padding, dilation=dilation, groups=groups)
    ref, mag = conv_ref(x, w, bias, stride, padding, dilation, groups)
    assert y.shape == ref.shape and y.dtype == np.float32
    within_accumulation_bound(y, ref, mag, ws[1] * ws[2] * ws[3] + 1)


def test_conv2d_double_with_bias_in_place_of_omitted_optional():
    rng = np.random.default_rng(6)
    x, w, bias = (
        rng.standard_normal((1, 2, 5, 4)),
        rng.standard_normal((3, 2, 2, 3)),
        rng.standard_normal(3),
    )
    attrs = {"stride": (2, 1), "padding": (1, 0, 0, 2)}
    y = run("conv2d", operand(x), operand(w), operand(bias), **attrs)
    ref, mag = conv_ref(x, w, bias, attrs["stride"], attrs["padding"], (1, 1), 1)
    within_accumulation_bound(y, ref, mag, 13, 2.0**-53)


@pytest.mark.parametrize("out_dtype", [None, "float"])
def test_conv2d_half_rounds_a_float32_accumulation(out_dtype):
    rng = np.random.default_rng(7)
    x, w = (
        operand(rng.standard_normal((1, 4, 6, 6)), "half"),
        operand(rng.standard_normal((5, 4, 3, 3)), "half"),
    )
    xv, wv = dt.HALF.from_storage(x[0]), dt.HALF.from_storage(w[0])
    ref, mag = conv_ref(xv, wv, None, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    y = run("conv2d", x, w, padding=(1, 1, 1, 1), out_dtype=out_dtype)
    if out_dtype is None:
        half_close(y, ref)
    else:
        within_accumulation_bound(y, ref, mag, 36)


@pytest.mark.parametrize("kernel", [1, 3])
@pytest.mark.parametrize("dtype", ["half", "float16"])
def test_conv2d_half_accumulates_in_float32(dtype, kernel):
    # Channels carry the addends of _sum_test_row at the centre tap; other taps see zeros.
    row = _sum_test_row(1025)
    x = np.zeros((1, 1025, kernel, kernel))
    x[0, :, kernel // 2, kernel // 2] = row
    w = np.ones((1, 1025, kernel, kernel))
    assert run("conv2d", operand(x, dtype), operand(w, dtype)).ravel().tolist() == [2.0]


RESNET_SHAPES = [
    ((1, 64, 56, 56), (64, 64, 3, 3), {"padding": (1, 1, 1, 1)}),
    ((1, 256, 56, 56), (64, 256, 1, 1), {}),
    ((1, 3, 224, 224), (64, 3, 7, 7), {"stride": (2, 2), "padding": (3, 3, 3, 3)}),
    ((1, 256, 56, 56), (512, 256, 1, 1), {"stride": (2, 2)}),
    ((1, 128, 28, 28), (128, 4, 3, 3), {"padding": (1, 1, 1, 1), "groups": 32}),
    ((1, 512, 14, 14), (512, 1, 3, 3), {"padding": (1, 1, 1, 1), "groups": 512}),
]


@pytest.mark.parametrize(("xs", "ws", "attrs"), RESNET_SHAPES)
def test_conv2d_resnet_shapes_are_right(xs, ws, attrs):
    """Speed on these shapes is benchmarks/bench_conv.py's to check."""
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    y = run("conv2d", operand(x), operand(w), **attrs)
    positions = [tuple(int(rng.integers(0, s)) for s in y.shape) for _ in range(12)]
    ref, mag = conv_ref(
        x,
        w,
        None,
        attrs.get("stride", (1, 1)),
        attrs.get("padding", (0,) * 4),
        (1, 1),
        attrs.get("groups", 1),
        positions,
    )
    idx = tuple(np.array(positions).T)
    within_accumulation_bound(y[idx], ref[idx], mag[idx], ws[1] * ws[2] * ws[3])


CONV_ERRORS = [
    (ShapeError, "rank 4", [spec((3, 8, 8)), spec((4, 3, 3, 3))], {}),
    (ShapeError, "'w' must have rank 4", [spec((1, 3, 8, 8)), spec((4, 3, 3))], {}),
    (ShapeError, "w has 2 input channels", [spec((1, 3, 8, 8)), spec((4, 2, 3, 3))], {}),
    (ShapeError, "groups=2 must divide", [spec((1, 3, 8, 8)), spec((4, 1, 3, 3))], {"groups": 2}),
    (ShapeError, "bias must have shape", [spec((1, 3, 8, 8)), spec((4, 3, 3, 3)), spec((3,))], {}),
    (ShapeError, "does not fit", [spec((1, 3, 2, 8)), spec((4, 3, 3, 3))], {}),
    (ShapeError, "does not fit", [spec((1, 3, 5, 8)), spec((4, 3, 3, 3))], {"dilation": (3, 1)}),
    (DTypeError, "floating-point", [spec((1, 3, 8, 8), "int32"), spec((4, 3, 3, 3), "int32")], {}),
    (DTypeError, "cast", [spec((1, 3, 8, 8)), spec((4, 3, 3, 3), "half")], {}),
    (
        KernelAttributeError,
        "'stride' must be 2",
        [spec((1, 3, 8, 8)), spec((4, 3, 3, 3))],
        {"stride": (1,)},
    ),
    (
        KernelAttributeError,
        "'stride' must be 2",
        [spec((1, 3, 8, 8)), spec((4, 3, 3, 3))],
        {"stride": (0, 1)},
    ),
    (
        KernelAttributeError,
        "'padding' must be 4",
        [spec((1, 3, 8, 8)), spec((4, 3, 3, 3))],
        {"padding": (1, 1)},
    ),
    (
        KernelAttributeError,
        "'padding'",
        [spec((1, 3, 8, 8)), spec((4, 3, 3, 3))],
        {"padding": (1, 1, -1, 1)},
    ),
    (
        KernelAttributeError,
        "'groups' must be >= 1",
        [spec((1, 3, 8, 8)), spec((4, 3, 3, 3))],
        {"groups": 0},
    ),
    (
        KernelAttributeError,
        "'groups' must be int",
        [spec((1, 3, 8, 8)), spec((4, 3, 3, 3))],
        {"groups": 1.0},
    ),
]


@pytest.mark.parametrize(("error", "fragment", "ins", "attrs"), CONV_ERRORS)
def test_conv2d_infer_errors(error, fragment, ins, attrs):
    with pytest.raises(error, match=f"kernel 'conv2d'.*{fragment}"):
        infer("conv2d", *ins, **attrs)


def test_conv2d_cost_is_matrix_work():
    kdef = lookup("conv2d")
    attrs = kdef.check_attrs({"padding": (1, 1, 1, 1)})
    ins = [spec((1, 64, 56, 56)), spec((64, 64, 3, 3))]
    (out,) = kdef.infer(ins, attrs)
    cost = kdef.cost(ins, [spec(out.shape)], attrs)
    assert cost.matrix and cost.flops == 2 * 64 * 56 * 56 * 64 * 9
    assert cost.dram_bytes == 4 * (64 * 56 * 56 * 2 + 64 * 64 * 9)


def _int_gemm_operands():
    a = np.array([[1, -2], [3, 4]], np.int32)
    b = np.array([[5, 6], [-7, 8]], np.int32)
    c = np.array([1, -1], np.int32)
    return a, b, c


def test_int32_gemm_whole_scales_compute_exactly():
    a, b, c = _int_gemm_operands()
    y = run("gemm", operand(a), operand(b), operand(c), alpha=2.0, beta=-3.0)
    want = 2 * (a.astype(np.int64) @ b) - 3 * c
    assert y.dtype == np.int32
    assert y.tolist() == want.tolist()


@pytest.mark.parametrize(
    ("attrs", "with_c"),
    [
        ({"alpha": 0.5}, False),  # was multiplied by int32(0.5) == 0: every result 0
        ({"alpha": 2.0**31}, False),  # was an OverflowError while the kernel ran
        ({"beta": 0.5}, True),  # was beta 0: c silently dropped
    ],
)
def test_int32_gemm_refuses_scales_it_cannot_apply(attrs, with_c):
    specs = [spec((2, 2), "int32"), spec((2, 2), "int32")] + [spec((2,), "int32")] * with_c
    with pytest.raises(KernelAttributeError, match="whole number"):
        infer("gemm", *specs, **attrs)


def test_int32_gemm_without_c_ignores_beta():
    a, b, _ = _int_gemm_operands()
    y = run("gemm", operand(a), operand(b), beta=0.5)
    assert y.tolist() == (a @ b).tolist()


@pytest.mark.parametrize("epilogue", ["gelu", "sigmoid", "tanh", "silu"])
def test_int32_gemm_refuses_float_epilogues(epilogue):
    # They gave 0 everywhere (gelu, sigmoid, silu) or failed while running (tanh); the unary
    # kernels refuse int32 for these activations too.
    with pytest.raises(KernelAttributeError, match="floating-point"):
        infer("gemm", spec((2, 2), "int32"), spec((2, 2), "int32"), epilogue=epilogue)


def test_int32_gemm_relu_epilogue():
    a, b, _ = _int_gemm_operands()
    y = run("gemm", operand(a), operand(b), epilogue="relu")
    assert y.tolist() == np.maximum(a @ b, 0).tolist()


def test_im2col_columns_are_reused_on_a_thread_up_to_a_limit(monkeypatch):
    """So that a large convolution's columns fault their pages in once, not every run;
    the other convolution tests check results with the columns reused across shapes."""
    first = columns((4, 100), np.float32)
    assert np.shares_memory(columns((10, 10), np.float64), first)  # smaller: the same space
    grown = columns((1000, 100), np.float32)
    assert np.shares_memory(columns((10,), np.float32), grown)
    elsewhere = []
    thread = threading.Thread(target=lambda: elsewhere.append(columns((10,), np.float32)))
    thread.start()
    thread.join()
    assert not np.shares_memory(elsewhere[0], grown)  # each thread its own
    monkeypatch.setattr(common, "KEPT_COLUMNS", 1000)
    own = columns((1000,), np.float32)  # 4000 bytes: over the limit, not kept
    assert not np.shares_memory(own, columns((10,), np.float32))
