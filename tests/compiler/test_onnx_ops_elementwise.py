"""ONNX converters of elementwise ops on the device dtypes: integer widths, bfloat16 and
Cast, bitwise and logical ops, Mod, BitShift, the trigonometric family, IsNaN/IsInf."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import TensorProto, helper
from onnx_one_node import check, one_node_model, run

import mnrt
from mnrt.compiler.onnx import InvalidModelError, UnsupportedModelError, from_onnx, names

RNG = np.random.default_rng(12)


@pytest.mark.parametrize(
    "dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
)
def test_integer_models_run_in_their_own_width(ctx, dtype):
    info = np.iinfo(dtype)
    a = np.array([[info.max, info.min, 3], [7, 1, 0]], dtype)
    b = np.array([[0, 0, 2], [3, 1, 9]], dtype)
    (got,) = check(ctx, one_node_model("Add", {"a": a, "b": b}, ["y"]), {"a": a, "b": b})
    assert got.dtype == dtype  # int64 used to come back as int32, the others were refused


def test_int64_values_beyond_int32_stay_exact(ctx):
    a = np.array([2**40 + 1, -(2**50), 3], np.int64)
    (got,) = check(ctx, one_node_model("Mul", {"a": a, "b": a}, ["y"]), {"a": a, "b": a})
    assert got[0] == (2**40 + 1) ** 2 % 2**64 - (2**64 if (2**40 + 1) ** 2 % 2**64 >= 2**63 else 0)


def test_bfloat16_values_round_to_nearest_even_and_constants_stay_bfloat16(ctx):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from onnx import helper, numpy_helper

    bf16, f32 = TensorProto.BFLOAT16, TensorProto.FLOAT
    nodes = [
        helper.make_node("Cast", ["x"], ["xb"], to=bf16),
        helper.make_node("Add", ["xb", "w"], ["s"]),
        helper.make_node("Cast", ["s"], ["y"], to=f32),
    ]
    w = np.array([0.0, 0.0, 0.0, 2.0], ml_dtypes.bfloat16)
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info("x", f32, [4])],
        [helper.make_tensor_value_info("y", f32, [4])], [numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    assert from_onnx(model).values["w"].dtype is mnrt.bfloat16
    # 1 + 2**-8 and 1 + 3 * 2**-8 lie halfway between bfloat16 neighbours: ties go to even.
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, -3.0e38, 1.0], np.float32)
    (got,) = run(ctx, model, {"x": x})
    assert got.dtype == np.float32
    assert got.tolist() == [1.0, 1 + 2**-6, float(np.float32(ml_dtypes.bfloat16(-3.0e38))), 3.0]


def test_every_device_dtype_has_one_onnx_code_both_ways():
    for name, dtype in mnrt.device.dtypes.DTYPES.items():
        code = names.onnx_code(dtype)
        if dtype.is_half:
            assert code == TensorProto.FLOAT16
        else:
            assert names.device_dtype(code) is dtype, name  # bfloat16 was written as uint16
    assert names.onnx_code(mnrt.bfloat16) == TensorProto.BFLOAT16


@pytest.mark.parametrize("to", ["FLOAT8E4M3FN", "INT4", "UINT2", "FLOAT4E2M1", "STRING"])
def test_cast_to_types_without_a_device_dtype_is_refused_by_name(ctx, to):
    x = np.zeros(3, np.float32)
    model = one_node_model("Cast", {"x": x}, ["y"], to=getattr(TensorProto, to))
    with pytest.raises(UnsupportedModelError, match=f"element type {to.lower()} has no device"):
        run(ctx, model, {"x": x})


@pytest.mark.parametrize(
    "src,to",
    [(np.float32, "INT8"), (np.float32, "INT64"), (np.int64, "FLOAT"), (np.int16, "UINT8"),
     (np.uint64, "FLOAT"), (np.int8, "INT32"), (np.float32, "BOOL")],
)  # fmt: skip
def test_cast_between_device_dtypes(ctx, src, to):
    x = np.array([[-3.75, 0.0, 2.5], [100.0, 7.0, -1.0]]).astype(src)
    model = one_node_model("Cast", {"x": x}, ["y"], to=getattr(TensorProto, to), saturate=1)
    check(ctx, model, {"x": x}, rtol=0, atol=0)


INTS = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


@pytest.mark.parametrize("src", INTS)
@pytest.mark.parametrize("to", INTS)
def test_integer_casts_wrap_like_numpy(ctx, src, to):
    """The device's cast saturates; ONNX (its reference, onnxruntime) wraps: -3 as uint8 is
    253, 300 as int8 is 44, 2**63 as int64 is -2**63."""
    info = np.iinfo(src)
    last = info.min // 3 - 1 if info.min else info.max - 7
    x = np.array([info.min, info.max, 0, 1, 2, 300 % info.max, info.max // 3, last], object)
    x = x.astype(src)
    code = helper.np_dtype_to_tensor_dtype(np.dtype(to))
    (got,) = run(ctx, one_node_model("Cast", {"x": x}, ["y"], to=code), {"x": x})
    assert got.dtype == to
    np.testing.assert_array_equal(got, x.astype(to))


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int64, np.uint64])
def test_bitwise_binary(ctx, op, dtype):
    a = RNG.integers(0, 120, (3, 4)).astype(dtype)
    b = RNG.integers(0, 120, (4,)).astype(dtype)
    check(ctx, one_node_model(op, {"a": a, "b": b}, ["y"]), {"a": a, "b": b})


def test_bitwise_not(ctx):
    x = np.array([0, 1, -128, 127], np.int8)
    check(ctx, one_node_model("BitwiseNot", {"x": x}, ["y"]), {"x": x})


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logical_binary(ctx, op):
    a = RNG.random((2, 3, 4)) > 0.5
    b = RNG.random((3, 4)) > 0.5
    check(ctx, one_node_model(op, {"a": a, "b": b}, ["y"]), {"a": a, "b": b})


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.uint64])
def test_bit_shift(ctx, direction, dtype):
    a = np.array([16, 4, 1, 255], dtype)
    b = np.array([1, 2, 3, 0], dtype)
    model = one_node_model("BitShift", {"a": a, "b": b}, ["y"], direction=direction)
    check(ctx, model, {"a": a, "b": b})


def test_bit_shift_needs_a_direction_of_the_spec(ctx):
    a = np.array([1, 2], np.uint8)
    model = one_node_model("BitShift", {"a": a, "b": a}, ["y"], direction="UP")
    with pytest.raises(mnrt.MnrtError, match="direction"):
        run(ctx, model, {"a": a, "b": a})


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32])
def test_mod_takes_the_sign_fmod_says(ctx, fmod, dtype):
    a = np.array([-7, 7, -7, 7, 5, -4], dtype)
    b = np.array([3, -3, -3, 3, 2, 3], dtype)
    check(ctx, one_node_model("Mod", {"a": a, "b": b}, ["y"], fmod=fmod), {"a": a, "b": b})


@pytest.mark.parametrize(
    "op,lo,hi",
    [("Sin", -4, 4), ("Cos", -4, 4), ("Tan", -1.4, 1.4), ("Asin", -1, 1), ("Acos", -1, 1),
     ("Atan", -9, 9), ("Sinh", -3, 3), ("Cosh", -3, 3), ("Asinh", -9, 9), ("Acosh", 1, 9),
     ("Atanh", -0.99, 0.99), ("Floor", -5, 5), ("Ceil", -5, 5), ("Sign", -2, 2),
     ("Softplus", -20, 20), ("Softsign", -5, 5)],
)  # fmt: skip
def test_one_kernel_unary_ops(ctx, op, lo, hi):
    x = RNG.uniform(lo, hi, (3, 5)).astype(np.float32)
    check(ctx, one_node_model(op, {"x": x}, ["y"]), {"x": x})


X35 = RNG.uniform(-3, 3, (2, 3, 5)).astype(np.float32)
AX = {"axes": np.array([2], np.int64)}


@pytest.mark.parametrize(
    "op,inits,attrs,kernel",
    [("Elu", {}, {"alpha": 0.5}, "elu"), ("Selu", {}, {"gamma": 1.5}, "selu"),
     ("Celu", {}, {"alpha": 2.0}, "celu"), ("LeakyRelu", {}, {"alpha": 0.2}, "leaky_relu"),
     ("ThresholdedRelu", {}, {"alpha": 0.5}, "thresholded_relu"),
     ("HardSigmoid", {}, {"alpha": 0.3, "beta": 0.4}, "hard_sigmoid"),
     ("HardSwish", {}, {}, "hard_swish"), ("Mish", {}, {}, "mish"),
     ("Shrink", {}, {"lambd": 1.0, "bias": 0.5}, "shrink"),
     ("PRelu", {"slope": np.array([0.1, 0.2, 0.3], np.float32).reshape(3, 1)}, {}, "prelu"),
     ("ReduceL1", AX, {}, "l1"), ("ReduceL2", AX, {}, "l2"),
     ("ReduceSumSquare", AX, {}, "sum_square"), ("ReduceLogSum", AX, {}, "log_sum"),
     ("ReduceLogSumExp", AX, {}, "logsumexp")],
)  # fmt: skip
def test_ops_a_device_kernel_computes_import_as_that_kernel(ctx, op, inits, attrs, kernel):
    """One kernel, where these imported as their formula's three to six: a model holding
    them runs fewer kernels, and narrow floats round once."""
    x = np.abs(X35) if op == "ReduceLogSum" else X35
    model = one_node_model(op, {"x": x}, ["y"], inits=inits, **attrs)
    assert [n.op for n in from_onnx(model).nodes] == [kernel]
    check(ctx, model, {"x": x})


def test_not_and_trilu_import_as_their_kernels(ctx):
    """logical_not (was an equal with a False constant) and trilu (was a where with a mask
    constant of the matrix's size); Trilu's k beyond the matrix keeps all or nothing."""
    b = RNG.uniform(-1, 1, (3, 4)) > 0
    model = one_node_model("Not", {"x": b}, ["y"])
    assert [n.op for n in from_onnx(model).nodes] == ["logical_not"]
    check(ctx, model, {"x": b})
    for k, upper in ((1, 1), (-2, 0), (2**40, 0), (-(2**40), 1)):
        model = one_node_model("Trilu", {"x": X35}, ["y"], inits={"k": np.array(k, np.int64)},
                               upper=upper)  # fmt: skip
        assert [n.op for n in from_onnx(model).nodes] == ["trilu"]
        check(ctx, model, {"x": X35})


def test_instance_and_group_norms_scale_and_shift_in_one_kernel(ctx):
    """layernorm, then the per-channel scale and bias as one scale_shift (was a mul and an
    add; float32 results the same to the bit)."""
    x = RNG.standard_normal((2, 4, 3, 5)).astype(np.float32)
    s, b = RNG.standard_normal(4).astype(np.float32), RNG.standard_normal(4).astype(np.float32)
    for op, attrs in (("InstanceNormalization", {}), ("GroupNormalization", {"num_groups": 2})):
        model = one_node_model(op, {"x": x}, ["y"], inits={"s": s, "b": b}, **attrs)
        assert [n.op for n in from_onnx(model).nodes if n.op != "reshape"] == [
            "layernorm",
            "scale_shift",
        ]
        check(ctx, model, {"x": x}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op,want", [("ReduceMax", np.any), ("ReduceMin", np.all)])
def test_bool_max_and_min_are_one_kernel(ctx, op, want):
    """any and all: the max and min kernels take bool (were a cast each way around them)."""
    x = RNG.uniform(-1, 1, (3, 4)) > 0.3
    model = one_node_model(op, {"x": x}, ["y"], inits={"a": np.array([1], np.int64)},
                           keepdims=0)  # fmt: skip
    assert [n.op for n in from_onnx(model).nodes] == [op[len("Reduce") :].lower()]
    np.testing.assert_array_equal(run(ctx, model, {"x": x})[0], want(x, axis=1))


@pytest.mark.parametrize("p,norm", [(1, "l1"), (2, "l2")])
def test_lp_normalization_divides_by_one_norm_kernel(ctx, p, norm):
    """The l1 or l2 kernel, then a zero norm made 1 and the division (was three kernels
    for the norm)."""
    x = X35.copy()
    x[0, 1] = 0  # a slice of zeros stays zero
    model = one_node_model("LpNormalization", {"x": x}, ["y"], p=p, axis=-1)
    assert [n.op for n in from_onnx(model).nodes] == [norm, "equal", "where", "div"]
    want = x / np.where((n := np.linalg.norm(x, ord=p, axis=-1, keepdims=True)) == 0, 1, n)
    np.testing.assert_allclose(run(ctx, model, {"x": x})[0], want, rtol=1e-5, atol=1e-6)


def test_hardmax_is_argmax_and_onehot(ctx):
    """1 at the first maximum, the first nan winning: two kernels (were twelve)."""
    x = np.array([[1, 3, 3, 0], [2, np.nan, 5, np.nan], [-1, -1, -2, -1]], np.float32)
    model = one_node_model("Hardmax", {"x": x}, ["y"], axis=1)
    assert [n.op for n in from_onnx(model).nodes] == ["argmax", "onehot"]
    want = np.array([[0, 1, 0, 0], [0, 1, 0, 0], [1, 0, 0, 0]], np.float32)
    np.testing.assert_array_equal(run(ctx, model, {"x": x})[0], want)


def test_round_ties_to_even(ctx):
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6], np.float32)
    (got,) = check(ctx, one_node_model("Round", {"x": x}, ["y"]), {"x": x})
    assert got.tolist() == [0.0, 2.0, 2.0, -0.0, -2.0, 2.0, -3.0]


@pytest.mark.parametrize("pos,neg", [(1, 1), (1, 0), (0, 1)])
def test_isinf_and_isnan(ctx, pos, neg):
    x = np.array([np.inf, -np.inf, np.nan, 1.0, -2.0], np.float32)
    model = one_node_model("IsInf", {"x": x}, ["y"], detect_positive=pos, detect_negative=neg)
    check(ctx, model, {"x": x})
    check(ctx, one_node_model("IsNaN", {"x": x}, ["y"]), {"x": x})


def test_imported_new_ops_and_dtypes_export_back_to_onnx():
    """names.UNARY/BINARY and ELEM_TYPES serve the exporter too: a graph of the new
    one-kernel ops on int64 and float exports to ONNX that computes the same."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    from mnrt.compiler.onnx import from_onnx
    from mnrt.compiler.onnx_export import to_onnx

    nodes = [
        helper.make_node("BitwiseAnd", ["a", "b"], ["m"]),
        helper.make_node("Sin", ["x"], ["s"]),
        helper.make_node("Round", ["s"], ["r"]),
    ]
    graph = helper.make_graph(
        nodes, "t",
        [helper.make_tensor_value_info("a", TensorProto.INT64, [3]),
         helper.make_tensor_value_info("b", TensorProto.INT64, [3]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("m", TensorProto.INT64, [3]),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, [3])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    feeds = {
        "a": np.array([2**40 + 7, 5, -1], np.int64),
        "b": np.array([2**40 + 3, 4, 2**62], np.int64),
        "x": np.array([0.5, 2.0, -1.4], np.float32),
    }
    exported = to_onnx(from_onnx(model))
    want = ReferenceEvaluator(model).run(None, feeds)
    got = ReferenceEvaluator(exported).run(None, feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_bitcast_reads_the_bits_as_another_type_of_the_same_width(ctx):
    x = np.array([1.0, -0.0, np.inf, np.nan, 3.5e-39], np.float32)
    model = one_node_model("BitCast", {"x": x}, ["y"], opset=26, to=TensorProto.INT32)
    assert [n.op for n in from_onnx(model).nodes] == ["bitcast"]
    (got,) = check(ctx, model, {"x": x})
    assert got.tolist() == x.view(np.int32).tolist()
    # a float_dtype that changes the float's width leaves no bits to read as int32
    with pytest.raises(mnrt.MnrtError, match="widths must agree"):
        ctx.compile(model, {"x": x}, options={"float_dtype": "double"})
    with pytest.raises(mnrt.MnrtError, match="x is half.*model's own precision"):
        ctx.compile(model, {"x": x}, options={"float_dtype": "half"})
    wide = one_node_model("BitCast", {"x": x}, ["y"], opset=26, to=TensorProto.INT64)
    with pytest.raises(InvalidModelError, match="BitCast keeps the width"):
        from_onnx(wide)
