"""Differential tests of the ONNX frontend: small models over the attribute variants and
opset versions of each supported op, compiled and run on the device and compared with ONNX's
own reference evaluator (float32 tolerance, integers exact).

Where the evaluator itself disagrees with the ONNX spec (onnx 1.23: Softmax/LogSoftmax
below opset 13, BatchNormalization 9..13, LRN, GlobalMaxPool over other than 2 spatial axes,
SAME_LOWER pools, grouped ConvTranspose), a case gives its expected values another way: numpy,
or an equivalent model the evaluator gets right. A case the device does not support must be
refused with an mnrt error, never give a wrong result or a Python crash."""

from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto as TP  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import mnrt  # noqa: E402

RNG = np.random.default_rng(1234)
N = helper.make_node


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def ints(lo, hi, *shape, dtype=np.int64):
    return RNG.integers(lo, hi, shape).astype(dtype)


def i64(*v):
    return np.array(v, dtype=np.int64)


def _info(name, array):
    array = np.asarray(array)
    return helper.make_tensor_value_info(
        name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape
    )


def graph(nodes, feeds, inits=None, outs=("y",), opset=18):
    inits = inits or {}
    g = helper.make_graph(
        nodes,
        "diff",
        [_info(k, v) for k, v in feeds.items()],
        [helper.make_empty_tensor_value_info(o) for o in outs],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


# ONNX shape inference counts a last window that starts in the end padding (ceil_mode), its
# evaluator (and the spec since onnx 1.16, and PyTorch) does not: no full check of these.
NO_SHAPE_CHECK = {"MaxPool_ceil_pads", "AveragePool_ceil_pads"}
CASES: list = []  # (id, model, feeds, expected: None for the evaluator, or feeds -> arrays)
REFUSED: list = []  # (id, model, feeds): unsupported here; an mnrt error or a right result


def add(case_id, op, feeds, inits=None, opset=18, n_out=1, inputs=None, expect=None, **attrs):
    """One node of op: graph inputs `feeds` then initializers `inits` (or `inputs`, names
    with '' for an omitted optional input), outputs y (or y0..y{n-1})."""
    outs = ["y"] if n_out == 1 else [f"y{i}" for i in range(n_out)]
    names = inputs if inputs is not None else [*feeds, *(inits or {})]
    model = graph([N(op, names, outs, **attrs)], feeds, inits, outs, opset)
    CASES.append((case_id, model, feeds, expect))


def add_graph(case_id, nodes, feeds, inits=None, outs=("y",), opset=18, expect=None):
    CASES.append((case_id, graph(nodes, feeds, inits, outs, opset), feeds, expect))


def refused(case_id, op, feeds, inits=None, opset=18, n_out=1, **attrs):
    outs = ["y"] if n_out == 1 else [f"y{i}" for i in range(n_out)]
    model = graph([N(op, [*feeds, *(inits or {})], outs, **attrs)], feeds, inits, outs, opset)
    REFUSED.append((case_id, model, feeds))


def evaluate(model, feeds):
    return [np.asarray(r) for r in ReferenceEvaluator(model).run(None, feeds)]


# --- references where ONNX's evaluator is wrong ------------------------------------------


def softmax_2d(x, axis, log=False):
    """Softmax below opset 13: x coerced to 2-D at axis, normalised over each row."""
    axis %= x.ndim
    flat = x.astype(np.float64).reshape(math.prod(x.shape[:axis]), -1)
    flat = flat - flat.max(axis=1, keepdims=True)
    e = np.exp(flat)
    y = flat - np.log(e.sum(axis=1, keepdims=True)) if log else e / e.sum(axis=1, keepdims=True)
    return y.reshape(x.shape).astype(x.dtype)


def lrn(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    c = x.shape[1]
    square_sum = np.zeros(x.shape)
    for i in range(c):
        lo, hi = max(0, i - (size - 1) // 2), min(c - 1, i + math.ceil((size - 1) / 2))
        square_sum[:, i] = (x[:, lo : hi + 1].astype(np.float64) ** 2).sum(axis=1)
    return (x / (bias + alpha / size * square_sum) ** beta).astype(x.dtype)


def batch_norm(x, s, b, m, v, eps):
    shape = (1, -1, *([1] * (x.ndim - 2)))
    s, b, m, v = (a.astype(np.float64).reshape(shape) for a in (s, b, m, v))
    return ((x - m) / np.sqrt(v + eps) * s + b).astype(x.dtype)


def grouped_conv_transpose(x, w, group, **attrs):
    """ConvTranspose of each group alone (the evaluator gets one group right), concatenated."""
    cin = x.shape[1] // group
    parts = []
    for g in range(group):
        xs, ws = x[:, g * cin : (g + 1) * cin], w[g * cin : (g + 1) * cin]
        model = graph([N("ConvTranspose", ["x", "w"], ["y"], **attrs)], {"x": xs}, {"w": ws})
        parts.append(evaluate(model, {"x": xs})[0])
    return np.concatenate(parts, axis=1)


# --- Conv / ConvTranspose ------------------------------------------------------------------

x4 = randn(1, 4, 7, 8)
for ap in ("SAME_UPPER", "SAME_LOWER", "VALID"):
    for s in (1, 2):
        add(
            f"conv_{ap}_s{s}",
            "Conv",
            {"x": x4},
            {"w": randn(6, 4, 3, 2)},
            auto_pad=ap,
            strides=[s, s],
        )
add(
    "conv_same_upper_dilated",
    "Conv",
    {"x": x4},
    {"w": randn(6, 4, 3, 3)},
    auto_pad="SAME_UPPER",
    dilations=[2, 1],
    strides=[2, 3],
)
add(
    "conv_same_lower_even_kernel",
    "Conv",
    {"x": x4},
    {"w": randn(6, 4, 2, 4)},
    auto_pad="SAME_LOWER",
    strides=[3, 2],
)
add(
    "conv_group_bias_pads",
    "Conv",
    {"x": x4},
    {"w": randn(6, 2, 3, 3), "b": randn(6)},
    group=2,
    pads=[1, 0, 2, 1],
    strides=[2, 1],
    dilations=[1, 2],
)
add("conv_depthwise", "Conv", {"x": x4}, {"w": randn(8, 1, 3, 3)}, group=4, pads=[1, 1, 1, 1])
add(
    "conv1d_same_upper",
    "Conv",
    {"x": randn(2, 3, 9)},
    {"w": randn(4, 3, 4), "b": randn(4)},
    auto_pad="SAME_UPPER",
    strides=[2],
)
add(
    "conv1d_dilated_group",
    "Conv",
    {"x": randn(2, 4, 11)},
    {"w": randn(4, 2, 3)},
    group=2,
    dilations=[3],
    pads=[2, 1],
)
add(
    "conv3d_pads",
    "Conv",
    {"x": randn(1, 2, 5, 6, 5)},
    {"w": randn(3, 2, 2, 3, 2), "b": randn(3)},
    pads=[1, 0, 1, 0, 1, 1],
    strides=[2, 1, 2],
    dilations=[2, 1, 1],
)
add(
    "conv3d_same_lower_group",
    "Conv",
    {"x": randn(1, 2, 5, 6, 5)},
    {"w": randn(4, 1, 2, 3, 2)},
    auto_pad="SAME_LOWER",
    group=2,
    strides=[2, 2, 1],
)
add("conv_weights_input", "Conv", {"x": x4, "w": randn(3, 4, 3, 3)}, pads=[1, 1, 1, 1])
add("conv_opset1", "Conv", {"x": x4}, {"w": randn(3, 4, 3, 3)}, opset=1, pads=[1, 1, 1, 1])

xt = randn(1, 3, 4, 5)
add("convT_plain", "ConvTranspose", {"x": xt}, {"w": randn(3, 2, 3, 3)})
add(
    "convT_strides_pads_bias",
    "ConvTranspose",
    {"x": xt},
    {"w": randn(3, 2, 3, 3), "b": randn(2)},
    strides=[2, 3],
    pads=[1, 0, 1, 2],
)
add(
    "convT_output_padding",
    "ConvTranspose",
    {"x": xt},
    {"w": randn(3, 2, 3, 3)},
    strides=[2, 2],
    output_padding=[1, 1],
)
add(
    "convT_dilated",
    "ConvTranspose",
    {"x": xt},
    {"w": randn(3, 2, 3, 2)},
    dilations=[2, 3],
    strides=[2, 1],
)
add(
    "convT_dilated_output_padding",
    "ConvTranspose",
    {"x": randn(1, 2, 4, 4)},
    {"w": randn(2, 3, 3, 3)},
    dilations=[2, 2],
    strides=[3, 2],
    output_padding=[2, 1],
    pads=[1, 2, 0, 1],
)
add(
    "convT_pads_wider_than_kernel",
    "ConvTranspose",
    {"x": randn(1, 2, 5, 5)},
    {"w": randn(2, 2, 3, 3)},
    pads=[3, 0, 2, 4],
    strides=[2, 2],
)
add(
    "convT_1d",
    "ConvTranspose",
    {"x": randn(2, 3, 6)},
    {"w": randn(3, 2, 4), "b": randn(2)},
    strides=[3],
    pads=[1, 2],
    output_padding=[2],
)
add(
    "convT_1x1_bias",
    "ConvTranspose",
    {"x": randn(2, 3, 4, 4)},
    {"w": randn(3, 5, 1, 1), "b": randn(5)},
)
add(
    "convT_kernel_shape_attr",
    "ConvTranspose",
    {"x": xt},
    {"w": randn(3, 2, 3, 3)},
    kernel_shape=[3, 3],
    strides=[2, 2],
)
# An output_shape past the full result extends it at the end, as output_padding does (the
# evaluator fails on SAME_* and on an output_shape within the full result: the node suite's
# convtranspose_autopad_same, _output_shape and _kernel_shape cases hold those).
add("convT_valid", "ConvTranspose", {"x": xt}, {"w": randn(3, 2, 3, 2)}, strides=[2, 3],
    auto_pad="VALID")  # fmt: skip
add("convT_output_shape_past_full", "ConvTranspose", {"x": xt}, {"w": randn(3, 2, 3, 3)},
    strides=[3, 2], output_shape=[13, 12])  # fmt: skip
_xg, _wg = randn(1, 4, 4, 5), randn(4, 3, 3, 3)
add(
    "convT_group",
    "ConvTranspose",
    {"x": _xg},
    {"w": _wg},
    group=2,
    strides=[2, 2],
    pads=[1, 1, 1, 1],
    expect=lambda f: [grouped_conv_transpose(f["x"], _wg, 2, strides=[2, 2], pads=[1, 1, 1, 1])],
)

# --- pools ---------------------------------------------------------------------------------

for op in ("MaxPool", "AveragePool"):
    add(f"{op}_ceil", op, {"x": x4}, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    add(
        f"{op}_ceil_pads",
        op,
        {"x": x4},
        kernel_shape=[3, 2],
        strides=[2, 3],
        pads=[1, 0, 1, 1],
        ceil_mode=1,
    )
    add(
        f"{op}_same_upper",
        op,
        {"x": x4},
        kernel_shape=[3, 3],
        strides=[2, 2],
        auto_pad="SAME_UPPER",
    )
    add(f"{op}_valid", op, {"x": x4}, kernel_shape=[2, 3], strides=[2, 2], auto_pad="VALID")
    add(f"{op}_1d", op, {"x": randn(2, 3, 10)}, kernel_shape=[3], strides=[2], pads=[1, 1])
    add(f"{op}_1d_ceil", op, {"x": randn(2, 3, 10)}, kernel_shape=[4], strides=[3], ceil_mode=1)
    add(
        f"{op}_3d",
        op,
        {"x": randn(1, 2, 5, 6, 7)},
        kernel_shape=[2, 3, 2],
        strides=[2, 1, 2],
        pads=[0, 1, 1, 1, 1, 0],
    )
    add(
        f"{op}_3d_ceil",
        op,
        {"x": randn(1, 2, 5, 6, 7)},
        kernel_shape=[2, 2, 2],
        strides=[2, 2, 2],
        ceil_mode=1,
    )
    add(f"{op}_opset7", op, {"x": x4}, opset=7, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    # SAME_LOWER: the same windows as explicit pads with the odd one at the start.
    _same = {"kernel_shape": [2, 3], "strides": [2, 2]}
    _explicit = graph([N(op, ["x"], ["y"], pads=[1, 1, 0, 0], **_same)], {"x": x4})
    add(
        f"{op}_same_lower",
        op,
        {"x": x4},
        auto_pad="SAME_LOWER",
        **_same,
        expect=lambda f, m=_explicit: evaluate(m, f),
    )
add("MaxPool_dilated", "MaxPool", {"x": x4}, kernel_shape=[2, 2], dilations=[2, 2])
add(
    "MaxPool_dilated_ceil_pads",
    "MaxPool",
    {"x": x4},
    kernel_shape=[2, 2],
    dilations=[2, 1],
    strides=[2, 2],
    ceil_mode=1,
    pads=[1, 1, 0, 0],
)
add(
    "MaxPool_3d_dilated",
    "MaxPool",
    {"x": randn(1, 2, 5, 6, 7)},
    kernel_shape=[2, 2, 2],
    dilations=[2, 1, 2],
)
add(
    "AvgPool_count_pad",
    "AveragePool",
    {"x": x4},
    kernel_shape=[3, 3],
    pads=[1, 1, 1, 1],
    count_include_pad=1,
)
add(
    "AvgPool_count_pad_ceil",
    "AveragePool",
    {"x": x4},
    kernel_shape=[3, 3],
    strides=[2, 2],
    pads=[1, 1, 1, 1],
    count_include_pad=1,
    ceil_mode=1,
)
add(
    "AvgPool_count_pad_same",
    "AveragePool",
    {"x": x4},
    kernel_shape=[3, 3],
    strides=[2, 2],
    auto_pad="SAME_UPPER",
    count_include_pad=1,
)
add(
    "AvgPool_count_pad_1d",
    "AveragePool",
    {"x": randn(2, 3, 10)},
    kernel_shape=[3],
    strides=[2],
    pads=[2, 1],
    count_include_pad=1,
)
add(
    "AvgPool_count_pad_3d",
    "AveragePool",
    {"x": randn(1, 2, 5, 6, 7)},
    kernel_shape=[3, 2, 3],
    pads=[1, 0, 1, 1, 1, 1],
    count_include_pad=1,
)
add(
    "AvgPool_3d_pads",
    "AveragePool",
    {"x": randn(1, 2, 5, 6, 7)},
    kernel_shape=[3, 2, 3],
    pads=[1, 0, 1, 1, 1, 1],
)
add("GlobalAveragePool_3d", "GlobalAveragePool", {"x": randn(1, 2, 3, 4, 5)})
add("GlobalAveragePool_1d", "GlobalAveragePool", {"x": randn(2, 3, 5)})
add("GlobalMaxPool_2d", "GlobalMaxPool", {"x": x4})
add(
    "GlobalMaxPool_3d",
    "GlobalMaxPool",
    {"x": randn(1, 2, 3, 4, 5)},
    expect=lambda f: [f["x"].max(axis=(2, 3, 4), keepdims=True)],
)

# --- Gemm / MatMul -------------------------------------------------------------------------

for ta in (0, 1):
    for tb in (0, 1):
        a, b = (randn(4, 3) if ta else randn(3, 4)), (randn(5, 4) if tb else randn(4, 5))
        add(
            f"gemm_trans{ta}{tb}",
            "Gemm",
            {"a": a},
            {"b": b, "c": randn(5)},
            transA=ta,
            transB=tb,
            alpha=0.7,
            beta=-1.3,
        )
add(
    "gemm_c_scalar",
    "Gemm",
    {"a": randn(3, 4)},
    {"b": randn(4, 5), "c": np.array(2.0, np.float32)},
    beta=0.5,
)
add("gemm_c_column", "Gemm", {"a": randn(3, 4)}, {"b": randn(4, 5), "c": randn(3, 1)})
add("gemm_c_row", "Gemm", {"a": randn(3, 4)}, {"b": randn(4, 5), "c": randn(1, 5)})
add("gemm_c_one", "Gemm", {"a": randn(3, 4)}, {"b": randn(4, 5), "c": randn(1)})
add("gemm_all_inputs", "Gemm", {"a": randn(3, 4), "b": randn(4, 5), "c": randn(3, 5)}, alpha=2.0)
add("gemm_no_c", "Gemm", {"a": randn(3, 4)}, {"b": randn(4, 5)}, opset=11, beta=3.0)
add(
    "gemm_opset6_broadcast",
    "Gemm",
    {"a": randn(3, 4)},
    {"b": randn(4, 5), "c": randn(5)},
    opset=6,
    broadcast=1,
)
add("matmul_1d_2d", "MatMul", {"a": randn(4), "b": randn(4, 5)})
add("matmul_3d_1d", "MatMul", {"a": randn(2, 3, 4), "b": randn(4)})
add("matmul_1d_1d", "MatMul", {"a": randn(4), "b": randn(4)})
add("matmul_batch_broadcast", "MatMul", {"a": randn(2, 1, 3, 4), "b": randn(3, 4, 5)})
add("matmul_2d_4d", "MatMul", {"a": randn(3, 4), "b": randn(2, 2, 4, 5)})

# --- Softmax / LogSoftmax: opset 13 normalises one axis, older ones the 2-D coercion ---------

xs = randn(2, 3, 4)
for op in ("Softmax", "LogSoftmax"):
    for axis in (0, 1, -1, -2):
        add(f"{op}_o13_axis{axis}", op, {"x": xs}, opset=13, axis=axis)
        for opset in (1, 11):
            add(
                f"{op}_o{opset}_axis{axis}",
                op,
                {"x": xs},
                opset=opset,
                axis=axis,
                expect=lambda f, a=axis, lg=op == "LogSoftmax": [softmax_2d(f["x"], a, lg)],
            )
    add(
        f"{op}_o11_default_axis",
        op,
        {"x": xs},
        opset=11,
        expect=lambda f, lg=op == "LogSoftmax": [softmax_2d(f["x"], 1, lg)],
    )
    add(f"{op}_o13_default_axis", op, {"x": xs}, opset=13)

# --- reductions: axes attribute (<18, Sum <13) or input, keepdims, noop_with_empty_axes --------

for op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"):
    xr = randn(2, 3, 4)
    add(f"{op}_o11_axes", op, {"x": xr}, opset=11, axes=[0, -1])
    add(f"{op}_o11_keepdims0", op, {"x": xr}, opset=11, axes=[1], keepdims=0)
    add(f"{op}_o11_all_keepdims0", op, {"x": xr}, opset=11, keepdims=0)
    add(f"{op}_o18_axes_input", op, {"x": xr}, {"axes": i64(-2, 0)}, opset=18, keepdims=0)
    add(f"{op}_o18_no_axes", op, {"x": xr}, opset=18)
    add(f"{op}_o18_noop", op, {"x": xr}, opset=18, noop_with_empty_axes=1)
    add(
        f"{op}_o18_empty_axes_noop",
        op,
        {"x": xr},
        {"axes": i64()},
        opset=18,
        noop_with_empty_axes=1,
    )
    add(f"{op}_o18_empty_axes", op, {"x": xr}, {"axes": i64()}, opset=18, keepdims=0)
for op in ("ReduceSum", "ReduceMax", "ReduceMin"):
    add(f"{op}_int", op, {"x": ints(-5, 5, 3, 4, dtype=np.int32)}, {"axes": i64(1)}, opset=18)
add(
    "ReduceSum_o13_axes_input",
    "ReduceSum",
    {"x": randn(2, 3, 4)},
    {"axes": i64(1)},
    opset=13,
    keepdims=0,
)
add("ReduceSum_o13_noop", "ReduceSum", {"x": randn(2, 3, 4)}, opset=13, noop_with_empty_axes=1)

# --- Split / Slice / Pad -------------------------------------------------------------------

xsp = randn(4, 6, 5)
add("split_attr", "Split", {"x": xsp}, opset=11, axis=1, split=[1, 2, 3], n_out=3)
add("split_equal_o11", "Split", {"x": xsp}, opset=11, axis=1, n_out=3)
add("split_o2", "Split", {"x": xsp}, opset=2, axis=0, n_out=2)
add("split_input", "Split", {"x": xsp}, {"s": i64(2, 2, 1)}, opset=13, axis=-1, n_out=3)
add("split_input_zero", "Split", {"x": xsp}, {"s": i64(0, 4)}, opset=13, axis=0, n_out=2)
add("split_num_outputs", "Split", {"x": xsp}, opset=18, axis=2, num_outputs=2, n_out=2)
add("split_num_outputs_uneven", "Split", {"x": xsp}, opset=18, axis=1, num_outputs=4, n_out=4)

for case_id, bounds, names in (
    ("slice_basic", (i64(1, 0), i64(3, -1), i64(0, 2)), ["x", "st", "en", "ax"]),
    ("slice_no_axes", (i64(1, 2), i64(-1, 5)), ["x", "st", "en"]),
    (
        "slice_huge_bounds",
        (i64(-1000, 2), i64(2**62, 2**63 - 1), i64(1, -1)),
        ["x", "st", "en", "ax"],
    ),
    (
        "slice_negative_steps",
        (i64(-1, 10**9), i64(-(2**62), 0), i64(0, 2), i64(-1, -2)),
        ["x", "st", "en", "ax", "sp"],
    ),
    (
        "slice_negative_step_mid",
        (i64(4, 5), i64(1, -8), i64(1, 2), i64(-2, -1)),
        ["x", "st", "en", "ax", "sp"],
    ),
    ("slice_steps_no_axes", (i64(0, 5), i64(5, 0), i64(2, -2)), ["x", "st", "en", "", "sp"]),
    ("slice_empty", (i64(3), i64(1), i64(0)), ["x", "st", "en", "ax"]),
    (
        "slice_int64_min_end",
        (i64(-1), i64(-(2**63)), i64(1), i64(-1)),
        ["x", "st", "en", "ax", "sp"],
    ),
    (
        "slice_step3",
        (i64(0, 1, 6), i64(5, 6, -9), i64(0, 1, 2), i64(3, 2, -3)),
        ["x", "st", "en", "ax", "sp"],
    ),
):
    inits = dict(zip([n for n in names[1:] if n], bounds))
    add(case_id, "Slice", {"x": randn(5, 6, 7)}, inits, opset=13, inputs=names)
add(
    "slice_opset1",
    "Slice",
    {"x": randn(5, 6)},
    opset=1,
    starts=[1, -3],
    ends=[100, -1],
    axes=[0, 1],
)

for mode in ("constant", "reflect", "edge"):
    add(
        f"pad_{mode}",
        "Pad",
        {"x": randn(3, 4, 5)},
        {"p": i64(1, 0, 2, 2, 1, 0)},
        opset=13,
        mode=mode,
    )
    add(
        f"pad_{mode}_axes_input",
        "Pad",
        {"x": randn(3, 4, 5)},
        {"p": i64(2, 1, 1, 3), "cv": np.array(1.5, np.float32), "ax": i64(-1, 1)},
        opset=18,
        mode=mode,
    )
    add(
        f"pad_{mode}_opset2",
        "Pad",
        {"x": randn(3, 4)},
        opset=2,
        mode=mode,
        pads=[1, 2, 2, 1],
        **({"value": 2.5} if mode == "constant" else {}),
    )
add(
    "pad_reflect_widest",
    "Pad",
    {"x": randn(3, 4)},
    {"p": i64(0, 3, 0, 3)},
    opset=13,
    mode="reflect",
)
add(
    "pad_edge_wider_than_axis",
    "Pad",
    {"x": randn(2, 3)},
    {"p": i64(0, 5, 0, 4)},
    opset=13,
    mode="edge",
)
add(
    "pad_int",
    "Pad",
    {"x": ints(0, 9, 3, 4)},
    {"p": i64(1, 1, 1, 1), "cv": i64(7).reshape(())},
    opset=13,
)

# --- shapes --------------------------------------------------------------------------------

x5 = randn(1, 3, 1, 4, 1)
add("squeeze_o11_attr", "Squeeze", {"x": x5}, opset=11, axes=[0, -1])
add("squeeze_o13_input", "Squeeze", {"x": x5}, {"a": i64(-3, 0)}, opset=13)
add("squeeze_all", "Squeeze", {"x": x5}, opset=13)
add("squeeze_o1_all", "Squeeze", {"x": x5}, opset=1)
add("unsqueeze_o11_attr", "Unsqueeze", {"x": randn(3, 4)}, opset=11, axes=[0, -1, 2])
add("unsqueeze_o13_input", "Unsqueeze", {"x": randn(3, 4)}, {"a": i64(-1, 1)}, opset=13)
add("unsqueeze_o13_negative", "Unsqueeze", {"x": randn(3, 4)}, {"a": i64(-4, -3)}, opset=13)
add("unsqueeze_unsorted", "Unsqueeze", {"x": randn(3, 4)}, {"a": i64(3, 0)}, opset=13)
add("unsqueeze_scalar", "Unsqueeze", {"x": np.array(2.0, np.float32)}, {"a": i64(0)}, opset=13)
for axis in (0, 1, 2, 3, -1, -2, -3):
    add(f"flatten_axis{axis}", "Flatten", {"x": randn(2, 3, 4)}, opset=13, axis=axis)
add("flatten_1d_axis0", "Flatten", {"x": randn(5)}, axis=0)
add("reshape_zero_copies", "Reshape", {"x": randn(2, 3, 4)}, {"s": i64(0, -1)}, opset=14)
add("reshape_zero_mid", "Reshape", {"x": randn(2, 3, 4)}, {"s": i64(-1, 0, 2, 2)})
add("reshape_allowzero", "Reshape", {"x": randn(2, 3, 4)}, {"s": i64(4, 6)}, opset=14, allowzero=1)
add(
    "reshape_allowzero_empty",
    "Reshape",
    {"x": np.zeros((2, 0, 4), np.float32)},
    {"s": i64(0, 4, 5)},
    opset=14,
    allowzero=1,
)
add("reshape_to_scalar", "Reshape", {"x": randn(1, 1)}, {"s": i64()})
add("transpose_default", "Transpose", {"x": randn(2, 3, 4)})
add("transpose_perm", "Transpose", {"x": randn(2, 3, 4, 5)}, perm=[2, 0, 3, 1])
add("concat_negative_axis", "Concat", {"a": randn(2, 3, 4), "b": randn(2, 3, 1)}, axis=-1)
add(
    "concat_axis_minus_rank",
    "Concat",
    {"a": randn(2, 3, 4), "b": randn(1, 3, 4), "c": randn(3, 3, 4)},
    axis=-3,
)
add("concat_int", "Concat", {"a": ints(0, 9, 2, 3), "b": ints(0, 9, 2, 2)}, axis=1)
add("concat_opset4", "Concat", {"a": randn(2, 3), "b": randn(2, 3)}, opset=4, axis=0)
add("concat_single", "Concat", {"a": randn(2, 3)}, axis=0)
add("expand_broadcast", "Expand", {"x": randn(3, 1)}, {"s": i64(2, 1, 4)})
add("expand_smaller_shape", "Expand", {"x": randn(2, 3, 4)}, {"s": i64(3, 1)})
add("expand_int", "Expand", {"x": ints(0, 5, 1, 3)}, {"s": i64(2, 3)})
add("expand_scalar", "Expand", {"x": np.array(3.0, np.float32)}, {"s": i64(2, 3)})
add("tile", "Tile", {"x": randn(2, 3)}, {"r": i64(2, 3)})
add("tile_zero", "Tile", {"x": randn(2, 3)}, {"r": i64(0, 2)})
add("gather_negative", "Gather", {"x": randn(5, 4)}, {"i": i64(-1, 0, -5, 2)})
add(
    "gather_axis1_2d_indices",
    "Gather",
    {"x": randn(3, 5, 2)},
    {"i": np.array([[0, -1], [-2, 3]], np.int64)},
    axis=1,
)
add("gather_negative_axis", "Gather", {"x": randn(3, 5, 2)}, {"i": i64(1, -1)}, axis=-1)
add("gather_scalar_index", "Gather", {"x": randn(3, 5)}, {"i": i64(-2).reshape(())}, axis=1)
add("gather_indices_input", "Gather", {"x": randn(6, 3), "i": np.array([[5, -6], [-1, 0]])})
add(
    "gather_int32_indices_input",
    "Gather",
    {"x": randn(6, 3), "i": np.array([[5, -6], [-1, 0]], np.int32)},
)
add("gather_int_data", "Gather", {"x": ints(0, 9, 4, 3)}, {"i": i64(3, -4)})
add("shape_start_negative", "Shape", {"x": randn(2, 3, 4)}, opset=15, start=-2)
add("shape_end_past_rank", "Shape", {"x": randn(2, 3, 4)}, opset=15, start=1, end=10)
add_graph(
    "shape_only_input",
    [
        N("Shape", ["x"], ["s"], start=-2, end=-1),
        N(
            "ConstantOfShape",
            ["s"],
            ["c"],
            value=numpy_helper.from_array(np.array([2.5], np.float32)),
        ),
        N("Add", ["c", "z"], ["y"]),
    ],
    {"x": randn(2, 3, 4), "z": randn(3)},
    opset=15,
)
add_graph(
    "shape_cast_mul",
    [N("Shape", ["x"], ["s"]), N("Cast", ["s"], ["f"], to=TP.FLOAT), N("Mul", ["x", "f"], ["y"])],
    {"x": randn(2, 3, 3)},
)
add_graph(
    "size_cast_mul",
    [N("Size", ["x"], ["s"]), N("Cast", ["s"], ["f"], to=TP.FLOAT), N("Mul", ["x", "f"], ["y"])],
    {"x": randn(2, 3)},
)
add_graph(
    "constant_of_shape_int",
    [
        N("ConstantOfShape", ["s"], ["c"], value=numpy_helper.from_array(i64(3))),
        N("Mul", ["c", "z"], ["y"]),
    ],
    {"z": ints(0, 9, 2, 3)},
    {"s": i64(2, 3)},
)
add_graph(
    "constant_value_ints",
    [N("Constant", [], ["c"], value_ints=[2, 3]), N("Reshape", ["x", "c"], ["y"])],
    {"x": randn(6)},
    opset=13,
)
add_graph(
    "constant_value_float",
    [N("Constant", [], ["c"], value_float=2.5), N("Mul", ["c", "x"], ["y"])],
    {"x": randn(6)},
    opset=13,
)

# --- normalisation ---------------------------------------------------------------------------

for axis in (-1, -2, 0, 1):
    norm = (2, 3, 4)[axis:]
    add(
        f"layernorm_axis{axis}",
        "LayerNormalization",
        {"x": randn(2, 3, 4)},
        {"s": randn(*norm), "b": randn(*norm)},
        opset=17,
        axis=axis,
        epsilon=0.1,
    )
add("layernorm_no_bias", "LayerNormalization", {"x": randn(2, 3, 4)}, {"s": randn(4)}, opset=17)
add("layernorm_scale_input", "LayerNormalization", {"x": randn(2, 3, 4), "s": randn(4)}, opset=17)
_bn = {"s": randn(3), "b": randn(3), "m": randn(3), "v": np.abs(randn(3))}
add("batchnorm_o15_2d", "BatchNormalization", {"x": randn(4, 3)}, _bn, opset=15)
add("batchnorm_o15_3d", "BatchNormalization", {"x": randn(2, 3, 5)}, _bn, opset=15, epsilon=0.1)
add(
    "batchnorm_o9",
    "BatchNormalization",
    {"x": randn(2, 3, 4, 5)},
    _bn,
    opset=9,
    epsilon=0.01,
    expect=lambda f: [batch_norm(f["x"], *_bn.values(), 0.01)],
)
add(
    "instancenorm",
    "InstanceNormalization",
    {"x": randn(2, 3, 4, 5)},
    {"s": randn(3), "b": randn(3)},
    epsilon=0.01,
)
add(
    "instancenorm_3d",
    "InstanceNormalization",
    {"x": randn(2, 3, 5)},
    {"s": randn(3), "b": randn(3)},
)
for size, alpha, beta, bias in (
    (3, 1e-4, 0.75, 1.0),
    (5, 0.5, 0.6, 2.0),
    (2, 0.3, 1.0, 1.5),
    (4, 1.0, 0.5, 0.5),
):
    add(
        f"lrn_size{size}",
        "LRN",
        {"x": randn(2, 6, 3, 4)},
        size=size,
        alpha=alpha,
        beta=beta,
        bias=bias,
        opset=13,
        expect=lambda f, a=(size, alpha, beta, bias): [lrn(f["x"], *a)],
    )
add("lrn_3d", "LRN", {"x": randn(2, 6, 5)}, size=3, opset=13, expect=lambda f: [lrn(f["x"], 3)])

# --- elementwise -----------------------------------------------------------------------------

for ap in ("none", "tanh"):
    add(f"gelu_{ap}", "Gelu", {"x": randn(3, 5) * 3}, opset=20, approximate=ap)
_f = np.array(
    [[-2.7, -1.5, -0.5, 0.0], [0.4, 0.5, 1.5, 2.6], [3.99, -3.99, 100.2, -0.0]], np.float32
)
for to, name in (
    (TP.INT64, "int64"),
    (TP.INT32, "int32"),
    (TP.BOOL, "bool"),
    (TP.DOUBLE, "double"),
    (TP.UINT8, "uint8"),
):
    add(
        f"cast_float_to_{name}",
        "Cast",
        {"x": np.abs(_f) if name == "uint8" else _f},
        to=to,
        opset=13,
    )
for to, name in ((TP.FLOAT, "float"), (TP.BOOL, "bool"), (TP.INT32, "int32")):
    add(f"cast_int64_to_{name}", "Cast", {"x": ints(-3, 4, 3, 4)}, to=to, opset=13)
    add(f"cast_bool_to_{name}", "Cast", {"x": ints(0, 2, 3, 4).astype(bool)}, to=to, opset=13)
add("cast_opset6", "Cast", {"x": _f}, to=TP.INT32, opset=6)
add_graph(
    "cast_round_trip",
    [N("Cast", ["a"], ["i"], to=TP.INT32), N("Cast", ["i"], ["y"], to=TP.FLOAT)],
    {"a": randn(3, 4) * 5},
)
add(
    "where_broadcast",
    "Where",
    {"c": ints(0, 2, 3, 1).astype(bool), "a": randn(1, 4), "b": randn(3, 4)},
)
add(
    "where_int",
    "Where",
    {"c": ints(0, 2, 2, 3, 4).astype(bool), "a": ints(-9, 9, 3, 4), "b": ints(-9, 9, 1)},
)
add(
    "where_scalars",
    "Where",
    {"c": ints(0, 2, 3, 4).astype(bool)},
    {"a": np.array(1.5, np.float32), "b": np.array(-2.0, np.float32)},
)
add(
    "where_bool",
    "Where",
    {
        "c": ints(0, 2, 3, 4).astype(bool),
        "a": ints(0, 2, 3, 4).astype(bool),
        "b": ints(0, 2, 4).astype(bool),
    },
)
for op in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"):
    add(f"{op}_float_broadcast", op, {"a": np.round(randn(3, 4)), "b": np.round(randn(4))})
    add(f"{op}_int", op, {"a": ints(-2, 3, 2, 3, 4), "b": ints(-2, 3, 3, 1)})
add("Less_opset7", "Less", {"a": randn(3, 4), "b": randn(4)}, opset=7)
add(
    "Equal_bool",
    "Equal",
    {"a": ints(0, 2, 3, 4).astype(bool), "b": ints(0, 2, 4).astype(bool)},
    opset=11,
)
add_graph(
    "greater_where",
    [N("Greater", ["a", "b"], ["g"]), N("Where", ["g", "a", "b"], ["y"])],
    {"a": ints(-5, 5, 3, 4), "b": ints(-5, 5, 4)},
)
add(
    "add_opset6_legacy_broadcast",
    "Add",
    {"a": randn(2, 3, 4, 5), "b": randn(4, 5)},
    opset=6,
    broadcast=1,
)
add("div_int64", "Div", {"a": ints(-20, 20, 3, 4), "b": i64(3, -3, 7, -2)})
add(
    "div_int32_truncates",
    "Div",
    {"a": np.array([-7, 7, -7, 7, -1], np.int32), "b": np.array([2, -2, -2, 2, 3], np.int32)},
)
add("sub_int", "Sub", {"a": ints(-20, 20, 3, 4), "b": ints(-5, 5, 4)})
add(
    "mul_int32",
    "Mul",
    {"a": ints(-20, 20, 3, 4, dtype=np.int32), "b": ints(-5, 5, 1, dtype=np.int32)},
)
add("pow_int_exponent", "Pow", {"a": randn(3, 4)}, {"b": i64(3).reshape(())}, opset=15)
add(
    "pow_int_exponent_vector",
    "Pow",
    {"a": randn(3, 4)},
    {"b": np.array([0, 1, 2, 3], np.int32)},
    opset=15,
)
add("pow_float", "Pow", {"a": np.abs(randn(3, 4)) + 0.1, "b": randn(4)}, opset=15)
add(
    "pow_negative_base_square",
    "Pow",
    {"a": randn(3, 4)},
    {"b": np.array(2.0, np.float32)},
    opset=15,
)
add("pow_int_base", "Pow", {"a": ints(-4, 5, 3, 4)}, {"b": i64(3).reshape(())}, opset=15)
add(
    "pow_int_base_float_exponent",
    "Pow",
    {"a": ints(-4, 5, 3, 4)},
    {"b": np.array(2.0, np.float32)},
    opset=15,
)
add(
    "pow_scalar_base",
    "Pow",
    {"b": randn(3, 4)},
    {"a": np.array(2.0, np.float32)},
    opset=15,
    inputs=["a", "b"],
)
add("pow_opset7", "Pow", {"a": np.abs(randn(3, 4)), "b": randn(3, 4)}, opset=7)
for op in ("Sqrt", "Reciprocal", "Exp", "Erf", "Tanh", "Sigmoid", "Softplus", "Softsign"):
    add(f"{op.lower()}", op, {"x": (np.abs(randn(3, 4)) if op == "Sqrt" else randn(3, 4) * 2)})
add("log", "Log", {"x": np.abs(randn(3, 4)) + 0.01})
add("abs_int", "Abs", {"x": ints(-9, 9, 3, 4)})
add("neg_int32", "Neg", {"x": ints(-9, 9, 3, 4, dtype=np.int32)})
add("relu_int", "Relu", {"x": ints(-5, 5, 3, 4, dtype=np.int32)}, opset=14)
add("sum_one", "Sum", {"a": randn(3, 4)})
add("sum_three_broadcast", "Sum", {"a": randn(3, 4), "b": randn(4), "c": randn(2, 1, 1)})
add("max_int", "Max", {"a": ints(-9, 9, 3, 4), "b": ints(-9, 9, 4)})
add("max_opset6", "Max", {"a": randn(3, 4), "b": randn(3, 4)}, opset=6)
add("min_three_broadcast", "Min", {"a": randn(3, 4), "b": randn(4), "c": randn(3, 1)})
add("mean_three_broadcast", "Mean", {"a": randn(3, 4), "b": randn(4), "c": randn(3, 1)})
add("leakyrelu", "LeakyRelu", {"x": randn(3, 4)}, alpha=0.3)
add("leakyrelu_default", "LeakyRelu", {"x": randn(3, 4)})
add("elu", "Elu", {"x": randn(3, 4)}, alpha=0.5)
add("selu", "Selu", {"x": randn(3, 4)}, alpha=1.2, gamma=0.9)
add("hardsigmoid", "HardSigmoid", {"x": randn(3, 4) * 4}, alpha=0.3, beta=0.4)
add("prelu_channel", "PRelu", {"x": randn(2, 3, 4, 5)}, {"s": randn(3, 1, 1)})
add("prelu_last_axis", "PRelu", {"x": randn(2, 3, 4, 5)}, {"s": randn(5)})
add("prelu_scalar", "PRelu", {"x": randn(2, 3, 4)}, {"s": randn(1)})
add("clip_opset6", "Clip", {"x": randn(3, 4)}, opset=6, min=-0.5, max=0.7)
add("clip_opset6_min_only", "Clip", {"x": randn(3, 4)}, opset=6, min=-0.5)
add("clip_opset6_no_bounds", "Clip", {"x": randn(3, 4)}, opset=6)
add(
    "clip_opset11",
    "Clip",
    {"x": randn(3, 4)},
    {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)},
    opset=11,
)
add(
    "clip_opset13_max_only",
    "Clip",
    {"x": randn(3, 4)},
    {"hi": np.array(0.2, np.float32)},
    opset=13,
    inputs=["x", "", "hi"],
)
add(
    "clip_opset13_int",
    "Clip",
    {"x": ints(-9, 9, 3, 4)},
    {"lo": i64(-2).reshape(()), "hi": i64(3).reshape(())},
    opset=13,
)
add(
    "clip_opset12_min_above_max",
    "Clip",
    {"x": randn(3, 4)},
    {"lo": np.array(0.5, np.float32), "hi": np.array(-0.5, np.float32)},
    opset=12,
)
add("identity", "Identity", {"x": randn(3, 4)})
add("identity_int", "Identity", {"x": ints(0, 5, 3, 4)})
add("dropout_opset7", "Dropout", {"x": randn(3, 4)}, opset=7, ratio=0.3)
add("dropout_opset10", "Dropout", {"x": randn(3, 4)}, opset=10, ratio=0.3)
add(
    "dropout_opset13_ratio_input",
    "Dropout",
    {"x": randn(3, 4)},
    {"r": np.array(0.4, np.float32)},
    opset=13,
)
add(
    "dropout_opset13_training_false",
    "Dropout",
    {"x": randn(3, 4)},
    {"r": np.array(0.4, np.float32), "t": np.array(False)},
    opset=13,
)
add_graph(
    "identity_two_outputs",
    [N("Identity", ["x"], ["y0"]), N("Identity", ["x"], ["y1"])],
    {"x": randn(2, 3)},
    outs=("y0", "y1"),
)
add_graph(
    "split_concat_swap",
    [N("Split", ["x"], ["p", "q"], axis=1, num_outputs=2), N("Concat", ["q", "p"], ["y"], axis=1)],
    {"x": randn(2, 5)},
)
add_graph(
    "conv_bn_relu",
    [
        N("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        N("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"]),
        N("Relu", ["bn"], ["y"]),
    ],
    {"x": randn(1, 3, 5, 5)},
    {"w": randn(3, 3, 3, 3), **_bn},
)

# --- ops on constants, evaluated at import time or on the device ----------------------------

_c = randn(2, 3, 4)
add_graph(
    "softmax_o11_of_constant",
    [N("Softmax", ["c"], ["s"], axis=1), N("Add", ["s", "x"], ["y"])],
    {"x": randn(2, 3, 4)},
    {"c": _c},
    opset=11,
    expect=lambda f: [softmax_2d(_c, 1) + f["x"]],
)
add_graph(
    "logsoftmax_o11_of_constant",
    [N("LogSoftmax", ["c"], ["s"], axis=0), N("Add", ["s", "x"], ["y"])],
    {"x": randn(2, 3, 4)},
    {"c": _c},
    opset=11,
    expect=lambda f: [softmax_2d(_c, 0, log=True) + f["x"]],
)
_c4 = randn(2, 6, 3, 4)
add_graph(
    "batchnorm_o9_of_constant",
    [
        N("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"], epsilon=0.01),
        N("Add", ["n", "x"], ["y"]),
    ],
    {"x": randn(2, 3, 3, 4)},
    {"c": _c4[:, :3], **_bn},
    opset=9,
    expect=lambda f: [batch_norm(_c4[:, :3], *_bn.values(), 0.01) + f["x"]],
)
add_graph(
    "lrn_of_constant",
    [N("LRN", ["c"], ["n"], size=3), N("Add", ["n", "x"], ["y"])],
    {"x": randn(2, 6, 3, 4)},
    {"c": _c4},
    opset=13,
    expect=lambda f: [lrn(_c4, 3) + f["x"]],
)
_c5 = randn(1, 2, 3, 4, 5)
add_graph(
    "globalmaxpool_3d_of_constant",
    [N("GlobalMaxPool", ["c"], ["p"]), N("Add", ["p", "x"], ["y"])],
    {"x": randn(1, 2, 1, 1, 1)},
    {"c": _c5},
    expect=lambda f: [_c5.max(axis=(2, 3, 4), keepdims=True) + f["x"]],
)
_same_lower = graph(
    [N("MaxPool", ["x"], ["y"], kernel_shape=[2, 3], strides=[2, 2], pads=[1, 1, 0, 0])], {"x": x4}
)
add_graph(
    "maxpool_same_lower_of_constant",
    [
        N("MaxPool", ["c"], ["p"], kernel_shape=[2, 3], strides=[2, 2], auto_pad="SAME_LOWER"),
        N("Add", ["p", "x"], ["y"]),
    ],
    {"x": randn(1, 4, 4, 4)},
    {"c": x4},
    expect=lambda f: [evaluate(_same_lower, {"x": x4})[0] + f["x"]],
)
add_graph(
    "convT_group_of_constant",
    [
        N("ConvTranspose", ["c", "w"], ["t"], group=2, strides=[2, 2], pads=[1, 1, 1, 1]),
        N("Add", ["t", "x"], ["y"]),
    ],
    {"x": randn(1, 6, 7, 9)},
    {"c": _xg, "w": _wg},
    expect=lambda f: [
        grouped_conv_transpose(_xg, _wg, 2, strides=[2, 2], pads=[1, 1, 1, 1]) + f["x"]
    ],
)

# --- not supported here: an mnrt error or a right result, never a wrong one ------------------

refused(
    "convT_output_shape",
    "ConvTranspose",
    {"x": xt},
    {"w": randn(3, 2, 3, 3)},
    strides=[2, 2],
    output_shape=[10, 12],
)
refused(
    "convT_same_upper",
    "ConvTranspose",
    {"x": xt},
    {"w": randn(3, 2, 3, 3)},
    strides=[2, 2],
    auto_pad="SAME_UPPER",
)
refused(
    "convT_3d",
    "ConvTranspose",
    {"x": randn(1, 2, 3, 3, 3)},
    {"w": randn(2, 2, 2, 2, 2)},
    strides=[2, 2, 2],
)
add("AveragePool_dilations", "AveragePool", {"x": x4}, opset=19, kernel_shape=[2, 2],
    dilations=[2, 2])  # fmt: skip
add("AveragePool_dilations_pads_counted", "AveragePool", {"x": x4}, opset=19,
    kernel_shape=[3, 2], dilations=[2, 3], pads=[2, 1, 1, 2], count_include_pad=1)  # fmt: skip
add("AveragePool_dilations_ceil", "AveragePool", {"x": x4}, opset=19, kernel_shape=[2, 2],
    dilations=[2, 2], strides=[2, 3], pads=[1, 0, 1, 1], ceil_mode=1)  # fmt: skip
refused("pad_wrap", "Pad", {"x": randn(3, 4)}, {"p": i64(0, 2, 0, 1)}, opset=19, mode="wrap")
refused("dropout_mask", "Dropout", {"x": randn(3, 4)}, opset=13, n_out=2)
refused("reducemean_int", "ReduceMean", {"x": ints(-5, 5, 3, 4, dtype=np.int32)}, {"axes": i64(1)})
refused(
    "layernorm_broadcast_scale",
    "LayerNormalization",
    {"x": randn(2, 3, 4)},
    {"s": randn(1, 4), "b": randn(4)},
    opset=17,
    axis=-2,
)


def _check(got: np.ndarray, want: np.ndarray, name: str) -> None:
    want = np.asarray(want)
    assert got.shape == want.shape, f"{name}: shape {got.shape}, expected {want.shape}"
    assert got.dtype.kind == want.dtype.kind, f"{name}: dtype {got.dtype}, expected {want.dtype}"
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want.astype(got.dtype), rtol=1e-4, atol=1e-5, err_msg=name)
    else:
        np.testing.assert_array_equal(got, want, err_msg=name)


def _run(ctx, model, feeds) -> list[np.ndarray]:
    compiled = ctx.compile(model, feeds, options={"float_dtype": "float"})
    results = compiled(feeds)
    return [results[o.name].cpu() for o in model.graph.output]


@pytest.mark.parametrize("case_id, model, feeds, expect", CASES, ids=[c[0] for c in CASES])
def test_matches_reference(ctx, case_id, model, feeds, expect):
    expected = expect(feeds) if expect is not None else evaluate(model, feeds)
    for out, want in zip(model.graph.output, expected):  # the model is valid ONNX
        want = np.asarray(want)
        dtype = helper.np_dtype_to_tensor_dtype(want.dtype)
        out.CopyFrom(helper.make_tensor_value_info(out.name, dtype, want.shape))
    onnx.checker.check_model(model, full_check=case_id not in NO_SHAPE_CHECK)
    got = _run(ctx, model, feeds)
    assert len(got) == len(expected)
    for out, g, want in zip(model.graph.output, got, expected):
        _check(g, want, out.name)


@pytest.mark.parametrize("case_id, model, feeds", REFUSED, ids=[c[0] for c in REFUSED])
def test_unsupported_is_an_error_not_a_wrong_result(ctx, case_id, model, feeds):
    try:
        got = _run(ctx, model, feeds)
    except mnrt.MnrtError:
        return
    for out, g, want in zip(model.graph.output, got, evaluate(model, feeds)):
        _check(g, want, out.name)
