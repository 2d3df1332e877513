"""onnxruntime's com.microsoft quantized ops (QLinearAdd, QLinearMul, QLinearSigmoid,
QLinearLeakyRelu, QLinearSoftmax, QLinearGlobalAveragePool, QLinearAveragePool, QLinearConcat,
QLinearWhere, QGemm) against onnxruntime's CPU provider, integer outputs exactly: int8 and
uint8, zero points given and left out, every value of the type, broadcasting, scales that
make .5 ties common (so that the rounding and where the zero point is added must be
onnxruntime's), scales and zero points as initializers and as graph inputs. Then a float
model that onnxruntime's quantization tool turns into these ops, compiled and compared."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import helper
from onnx_one_node import (
    image_model,
    images,
    node_model,
    onnxruntime_outputs,
    output_step,
    quantized_by_onnxruntime,
    run,
    run_both,
)

import mnrt
from mnrt.compiler.onnx import InvalidModelError, UnsupportedModelError

RNG = np.random.default_rng(23)
MS = "com.microsoft"
QTYPES = [np.uint8, np.int8]
F32 = np.float32


def _model(op: str, values: dict, inputs: set, **attrs):
    return node_model(op, values, inputs, 17, domain=MS, **attrs)


def _every(qtype, shape=(4, 64)) -> np.ndarray:
    """Each of the type's 256 values once, shuffled."""
    info = np.iinfo(qtype)
    return RNG.permutation(np.arange(int(info.min), int(info.max) + 1)).astype(qtype).reshape(shape)


def _values(qtype, shape) -> np.ndarray:
    info = np.iinfo(qtype)
    return RNG.integers(int(info.min), int(info.max), shape, endpoint=True).astype(qtype)


def _zp(qtype, given: bool = True):
    """A zero point near the middle of the type, odd (rounding before or after adding it
    then differs on ties); None leaves it out."""
    return np.asarray((128 if qtype is np.uint8 else 0) + 2 * int(RNG.integers(-6, 6)) + 1,
                      qtype) if given else None  # fmt: skip


def _scale(lo: float = 0.01, hi: float = 0.1) -> np.ndarray:
    return np.asarray(RNG.uniform(lo, hi), F32)


def _check(ctx, model, feeds, exact: bool = True, reference=None) -> np.ndarray:
    """mnrt's output equals onnxruntime's (of `reference` where given: the same model with
    its zero points given) in dtype and shape, and in value: exactly, or (not `exact`)
    within one step on at most 1% of the elements."""
    (g,) = run(ctx, model, feeds)
    w = onnxruntime_outputs(model if reference is None else reference, feeds)["y"]
    assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
    if exact:
        np.testing.assert_array_equal(g, w)
    else:
        diff = np.abs(g.astype(np.int32) - w.astype(np.int32))
        assert diff.max() <= 1 and np.mean(diff == 0) >= 0.99, (diff.max(), np.mean(diff == 0))
    return g


# --- QLinearAdd, QLinearMul ------------------------------------------------------------------


def _binary(op, qtype, sa, sb, with_zp, scales, inputs=("a", "b")):
    if sa == "grid":  # every pair of values
        a = np.repeat(_every(qtype, (256,)), 256).reshape(256, 256)
        b = np.tile(_every(qtype, (256,)), 256).reshape(256, 256)
    else:
        a, b = _values(qtype, sa), _values(qtype, sb)
    values = {"a": a, "sa": scales[0], "za": _zp(qtype, with_zp), "b": b, "sb": scales[1],
              "zb": _zp(qtype, with_zp), "sc": scales[2], "zc": _zp(qtype, with_zp)}  # fmt: skip
    # onnxruntime's type inference refuses these ops a left-out zero point, which means 0
    given = {k: np.zeros((), qtype) if v is None else v for k, v in values.items()}
    feeds = {k: values[k] for k in inputs}
    return _model(op, values, set(inputs)), feeds, _model(op, given, set(inputs))


# Dyadic scales: every float32 step exact (ratios 1.5 and 0.5, or 3/16), many results on .5
EXACT = [np.array(s, F32) for s in (0.375, 0.125, 0.25)]


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("with_zp", [True, False])
@pytest.mark.parametrize("sa,sb", [("grid", "grid"), ((2, 3, 4), (4,)), ((3, 1, 5), (4, 1))])
def test_binary_on_ties(ctx, op, qtype, with_zp, sa, sb):
    """Dyadic scales: every float32 step is exact, so the results must be onnxruntime's
    to the bit however it orders them, and ties are common: half to even, with the zero
    point added before rounding, as onnxruntime adds it (after would differ for odd ones)."""
    model, feeds, reference = _binary(op, qtype, sa, sb, with_zp, EXACT)
    y = _check(ctx, model, feeds, reference=reference)
    info = np.iinfo(qtype)
    assert sa != "grid" or 0 < np.isin(y, [info.min, info.max]).mean() < 1  # some saturate


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("qtype", QTYPES)
def test_binary_by_inexact_scales(ctx, op, qtype):
    """QLinearMul's steps are onnxruntime's (an exact int32 product, times the scales'
    ratio, plus the zero point, rounded), so it matches exactly. QLinearAdd follows
    onnxruntime's SSE2 order, but on a CPU with AVX2 onnxruntime fuses its last two steps
    into FMAs, which round once where mnrt rounds twice: a sum within a float32 rounding of
    a .5 boundary (about one in 10**5) may round to the neighbouring step."""
    scales = [_scale(), _scale(), _scale(0.02, 0.2)]
    model, feeds, _ = _binary(op, qtype, "grid", "grid", True, scales)
    _check(ctx, model, feeds, exact=op == "QLinearMul")


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_binary_scales_as_graph_inputs(ctx, op):
    names = ("a", "b", "sa", "za", "sb", "zb", "sc", "zc")
    model, feeds, _ = _binary(op, np.int8, (3, 5), (5,), True, EXACT, names)
    _check(ctx, model, feeds)


# --- QLinearSigmoid, QLinearLeakyRelu ---------------------------------------------------------


def _unary(op, qtype, with_zp, inputs=("x",), **attrs):
    values = {"x": _every(qtype), "xs": _scale(0.02, 0.1), "xz": _zp(qtype, with_zp),
              "ys": F32(1 / 256) if op == "QLinearSigmoid" else _scale(0.005, 0.05),
              "yz": _zp(qtype, with_zp)}  # fmt: skip
    values = {k: v if v is None else np.asarray(v) for k, v in values.items()}
    return _model(op, values, set(inputs), **attrs), {k: values[k] for k in inputs}


@pytest.mark.parametrize("op,attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {}),
                                      ("QLinearLeakyRelu", {"alpha": 0.3})])  # fmt: skip
@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("with_zp", [True, False])
def test_lookup_table_ops(ctx, op, attrs, qtype, with_zp):
    """Every value of the type through onnxruntime's table of quantize(f(dequantize(v))):
    with constant scales the table is computed at compile time, and a run only gathers."""
    model, feeds = _unary(op, qtype, with_zp, **attrs)
    _check(ctx, model, feeds)
    kernels = {k.op for k in ctx.compile(model, feeds).lowered.program.kernels}
    assert "gather" in kernels and not kernels & {"sigmoid", "where", "div", "round"}


@pytest.mark.parametrize("op", ["QLinearSigmoid", "QLinearLeakyRelu"])
def test_lookup_table_of_scales_given_at_run_time(ctx, op):
    model, feeds = _unary(op, np.uint8, True, ("x", "xs", "xz", "ys", "yz"))
    _check(ctx, model, feeds)


# --- QLinearSoftmax --------------------------------------------------------------------------


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize(
    "shape,attrs,y_scale",
    [
        ((6, 37), {"opset": 13, "axis": -1}, 1 / 256),  # the quantization tool's scale
        ((2, 5, 3), {"opset": 13, "axis": 1}, 1 / 256),
        ((2, 3, 4, 5), {"opset": 12, "axis": 1}, 1 / 256),  # the input seen as 2 x 60
        ((3, 2, 7), {"opset": 11}, 1 / 256),  # axis -1, whatever the opset
        ((4, 9), {"opset": 17, "axis": 1}, 0.0123),  # onnxruntime scales by floor(1 / 0.0123)
    ],
)
def test_softmax(ctx, qtype, shape, attrs, y_scale):
    """Probabilities near 1 saturate: the int8 output's zero point is -128, and 256 steps
    above it is past 127."""
    x = _values(qtype, shape)
    x.reshape(-1)[0] = np.iinfo(qtype).max  # one probability near 1 in the first row
    values = {"x": x, "xs": F32(0.3), "xz": _zp(qtype), "ys": F32(y_scale),
              "yz": np.asarray(0 if qtype is np.uint8 else -128, qtype)}  # fmt: skip
    _check(ctx, _model("QLinearSoftmax", values, {"x"}, **attrs), {"x": x})


def test_softmax_needs_its_opset():
    x = _values(np.uint8, (2, 3))
    values = {"x": x, "xs": F32(0.1), "xz": None, "ys": F32(1 / 256), "yz": np.uint8(0)}
    with pytest.raises(InvalidModelError, match=r"\(QLinearSoftmax\): .*needs its opset"):
        mnrt.compiler.from_onnx(_model("QLinearSoftmax", values, {"x"}))


# --- QLinearGlobalAveragePool, QLinearAveragePool --------------------------------------------


def _pool_values(qtype, shape) -> dict:
    return {"x": _values(qtype, shape), "xs": _scale(), "xz": _zp(qtype), "ys": _scale(),
            "yz": _zp(qtype)}  # fmt: skip


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("shape,channels_last", [((2, 5, 6, 7), 0), ((2, 6, 7, 5), 1),
                                                 ((3, 4, 50), 0)])  # fmt: skip
def test_global_average_pool(ctx, qtype, shape, channels_last):
    """onnxruntime's integer mean: an exact sum, one float32 product, so exactly its result."""
    values = _pool_values(qtype, shape)
    model = _model("QLinearGlobalAveragePool", values, {"x"}, channels_last=channels_last)
    _check(ctx, model, {"x": values["x"]})


def test_global_average_pool_of_scales_given_at_run_time(ctx):
    values = _pool_values(np.int8, (2, 3, 5, 5))
    model = _model("QLinearGlobalAveragePool", values, set(values))
    _check(ctx, model, values)


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize(
    "shape,attrs",
    [
        ((2, 3, 9, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ((1, 4, 7, 7), {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1}),
        ((1, 4, 6, 6), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
        ((2, 6, 5, 3), {"kernel_shape": [3, 2], "channels_last": 1}),
        ((2, 3, 10), {"kernel_shape": [4], "strides": [3]}),
    ],
)
def test_average_pool(ctx, qtype, shape, attrs):
    """AveragePool of the dequantized values, then onnxruntime's round(y / y_scale + zp):
    onnxruntime sums each window one value after another, mnrt's kernel in its own order,
    so a mean within a float32 rounding of a .5 boundary may round to the next step."""
    values = _pool_values(qtype, shape)
    _check(ctx, _model("QLinearAveragePool", values, {"x"}, **attrs), {"x": values["x"]},
           exact=False)  # fmt: skip


@pytest.mark.parametrize("channels_last", [0, 1])
def test_average_pool_of_one_window_is_the_global_mean(ctx, channels_last):
    """A window covering the unpadded input is onnxruntime's integer global mean: exact."""
    shape = (2, 7, 6, 4) if channels_last else (2, 4, 7, 6)
    values = _pool_values(np.int8, shape)
    model = _model("QLinearAveragePool", values, {"x"}, kernel_shape=[7, 6],
                   channels_last=channels_last)  # fmt: skip
    _check(ctx, model, {"x": values["x"]})


# --- QLinearConcat, QLinearWhere -------------------------------------------------------------


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("as_inputs", [False, True])
def test_concat(ctx, qtype, as_inputs):
    """Three inputs requantized into the output's quantization, the second already in it
    (copied as it is)."""
    ys, yz = _scale(), _zp(qtype)
    values = {"ys": ys, "yz": yz}
    parts = [
        (_every(qtype, (2, 32, 4)), _scale(), _zp(qtype)),
        (_values(qtype, (2, 5, 4)), ys.copy(), yz.copy()),
        (_values(qtype, (2, 1, 4)), _scale(0.1, 0.5), _zp(qtype)),
    ]
    for i, (x, scale, zp) in enumerate(parts):
        values |= {f"x{i}": x, f"s{i}": scale, f"z{i}": zp}
    inputs = {"x0", "x1", "x2"} | ({"s0", "z0", "s2", "z2"} if as_inputs else set())
    _check(ctx, _model("QLinearConcat", values, inputs, axis=1), {k: values[k] for k in inputs})


@pytest.mark.parametrize("qtype", QTYPES)
def test_where(ctx, qtype):
    cond = RNG.integers(0, 2, (1, 4)).astype(bool)
    values = {"c": cond, "a": _values(qtype, (3, 4)), "as": _scale(), "az": _zp(qtype),
              "b": _values(qtype, (3, 1)), "bs": _scale(), "bz": _zp(qtype), "cs": _scale(),
              "cz": _zp(qtype)}  # fmt: skip
    _check(ctx, _model("QLinearWhere", values, {"c", "a", "b"}), {k: values[k] for k in "cab"})


# --- QGemm -----------------------------------------------------------------------------------


@pytest.mark.parametrize("ta,tb", [(np.uint8, np.int8), (np.int8, np.int8)])
@pytest.mark.parametrize(
    "case", ["per_column_trans_b", "trans_a_alpha", "float_out", "float_out_by_y_scale"]
)
def test_qgemm(ctx, ta, tb, case):
    m, k, n = 5, 40, 6
    trans_a, trans_b = case == "trans_a_alpha", case == "per_column_trans_b"
    a = _values(ta, (k, m) if trans_a else (m, k))
    b = _values(tb, (n, k) if trans_b else (k, n))
    cols = (n,) if case == "per_column_trans_b" else ()
    values = {
        "a": a, "sa": _scale(), "za": _zp(ta), "b": b,
        "sb": RNG.uniform(0.01, 0.1, cols).astype(F32),
        "zb": (RNG.integers(-3, 4, cols)).astype(tb),
        "c": RNG.integers(-5000, 5000, (n,) if case != "trans_a_alpha" else (m, n)).astype(
            np.int32),
        "ys": _scale(1, 4) if case != "float_out" else None,
        "yz": _zp(ta) if not case.startswith("float_out") else None,
    }  # fmt: skip
    attrs = {"transA": int(trans_a), "transB": int(trans_b)}
    if case == "trans_a_alpha":
        attrs["alpha"] = 0.75
    y = _check(ctx, _model("QGemm", values, {"a"}, **attrs), {"a": a})
    assert y.dtype == (np.float32 if case.startswith("float_out") else ta)


def test_qgemm_of_scales_given_at_run_time(ctx):
    a, b = _values(np.uint8, (3, 8)), _values(np.int8, (8, 4))
    values = {"a": a, "sa": _scale(), "za": _zp(np.uint8), "b": b, "sb": _scale(),
              "zb": np.asarray(1, np.int8), "c": None, "ys": _scale(0.5, 2),
              "yz": _zp(np.uint8)}  # fmt: skip
    inputs = {k for k, v in values.items() if v is not None}
    _check(ctx, _model("QGemm", values, inputs), {k: values[k] for k in inputs})


# --- refusals --------------------------------------------------------------------------------


def _add_values(**changes) -> dict:
    values = {"a": _values(np.uint8, (2, 3)), "sa": F32(0.1), "za": np.uint8(128),
              "b": _values(np.uint8, (2, 3)), "sb": F32(0.1), "zb": np.uint8(128),
              "sc": F32(0.2), "zc": np.uint8(128)}  # fmt: skip
    return values | changes


@pytest.mark.parametrize(
    "op,values,error,match",
    [
        ("QLinearAdd", _add_values(sa=np.full(2, 0.1, F32)), InvalidModelError,
         r"\(QLinearAdd\): A_scale 'sa' of shape \(2,\) must hold one value"),
        ("QLinearMul", _add_values(zb=np.int8(0)), InvalidModelError,
         r"\(QLinearMul\): B_zero_point 'zb' is int8, but 'a' is uint8: they must have the "
         "same type"),
        ("QLinearAdd", _add_values(a=np.zeros((2, 3), np.int16), b=np.zeros((2, 3), np.int16),
                                   za=None, zb=None), UnsupportedModelError,
         r"\(QLinearAdd\): QLinearAdd of int16 'a': it takes int8 or uint8"),
        ("QLinearSigmoid", {"x": np.zeros(4, np.int16), "xs": F32(1), "xz": None,
                            "ys": F32(1), "yz": None}, UnsupportedModelError,
         "QLinearSigmoid of int16 'x'"),
        ("QLinearAdd", _add_values(sc=np.float64(0.2)), InvalidModelError,
         "C_scale 'sc' is double: scales are float32"),
        ("QGemm", {"a": np.zeros((2, 3), np.uint8), "sa": F32(1), "za": np.uint8(0),
                   "b": np.zeros((3, 4), np.int8), "sb": np.ones(3, F32), "zb": np.int8(0)},
         InvalidModelError, r"b_scale 'sb' of shape \(3,\) must hold one value, or one per "
         r"column \(4\)"),
    ],
)  # fmt: skip
def test_refused_with_the_node_and_the_reason(op, values, error, match):
    first = next(iter(values))
    with pytest.raises(error, match=match):
        mnrt.compiler.from_onnx(_model(op, values, {first}))


def test_the_ops_are_onnxruntimes():
    """Registered in com.microsoft, where onnxruntime's tool writes them, and only there."""
    ops = mnrt.compiler.onnx.supported_ops()
    names = ["QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax",
             "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearConcat", "QLinearWhere",
             "QGemm"]  # fmt: skip
    assert {f"{MS}:{n}" for n in names} <= set(ops)
    assert not set(names) & set(ops)


# --- a model quantized by onnxruntime's tool -------------------------------------------------


def _float_net():
    """Conv, LeakyRelu, Conv, a residual Add, Sigmoid times its input (SiLU), AveragePool,
    GlobalAveragePool of two branches, Concat, Flatten, Gemm, Softmax."""

    def init(shape, scale):
        return (RNG.standard_normal(shape) * scale).astype(F32)

    inits = {"w1": init((6, 3, 3, 3), 0.3), "b1": init(6, 0.1), "w2": init((6, 6, 3, 3), 0.2),
             "b2": init(6, 0.1), "w3": init((10, 12), 0.3), "b3": init(10, 0.1)}  # fmt: skip
    node = helper.make_node
    nodes = [
        node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        node("LeakyRelu", ["c1"], ["l1"], alpha=0.1),
        node("Conv", ["l1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        node("Add", ["c2", "l1"], ["r"]),
        node("Sigmoid", ["r"], ["s"]),
        node("Mul", ["r", "s"], ["m"]),
        node("AveragePool", ["m"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        node("GlobalAveragePool", ["p"], ["g1"]),
        node("GlobalAveragePool", ["l1"], ["g2"]),
        node("Concat", ["g1", "g2"], ["g"], axis=1),
        node("Flatten", ["g"], ["f"]),
        node("Gemm", ["f", "w3", "b3"], ["z"], transB=1),
        node("Softmax", ["z"], ["y"], axis=-1),
    ]
    return image_model("net", nodes, inits)


@pytest.mark.parametrize("activations", ["uint8", "int8"])
def test_model_quantized_by_onnxruntime(ctx, tmp_path, activations):
    """onnxruntime's tool writes its com.microsoft ops; with them mnrt runs the model as
    onnxruntime does, within one step of the output's quantization (QLinearAveragePool's
    float sums may round a tie the other way) and nearly always exactly."""
    from onnxruntime.quantization import QuantType

    qtype = QuantType.QUInt8 if activations == "uint8" else QuantType.QInt8
    model = quantized_by_onnxruntime(_float_net(), tmp_path, [{"x": x} for x in images(RNG, 4)],
                                     True, activation_type=qtype, per_channel=True)  # fmt: skip
    ops = {n.op_type for n in model.graph.node if n.domain == MS}
    assert {"QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu",
            "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearConcat", "QGemm",
            "QLinearSoftmax"} <= ops, ops  # fmt: skip
    step = output_step(model, "y")
    for x in images(RNG, 3):
        got, want = run_both(ctx, model, {"x": x})
        np.testing.assert_allclose(got["y"], want["y"], rtol=0, atol=step * 1.001)
        assert np.mean(got["y"] == want["y"]) >= 0.95
