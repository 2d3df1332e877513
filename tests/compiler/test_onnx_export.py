"""Graph IR to ONNX: exported models compute what the device computes."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.compiler import GraphBuilder, onnx_export
from mnrt.compiler.chain_fusion import fuse_chains
from mnrt.compiler.models import MODELS
from mnrt.compiler.onnx import names
from mnrt.compiler.onnx_export import ExportError, to_onnx
from mnrt.device.kernels import all_kernels, chain
from mnrt.device.tolerance import unit_roundoff

onnx = pytest.importorskip("onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402


@pytest.mark.parametrize("model", sorted(MODELS))
def test_exported_models_match_the_device(model):
    builder, inputs = MODELS[model]()
    graph = builder.build()
    exported = ReferenceEvaluator(to_onnx(graph)).run(None, inputs)
    with mnrt.Context() as ctx:
        device = ctx.compile(builder, inputs)(inputs)[graph.outputs[0]].cpu()
    np.testing.assert_allclose(exported[0], device, rtol=1e-4, atol=1e-5)


def test_fused_epilogues_export_as_the_kernel_then_the_activation():
    rng = np.random.default_rng(0)
    b = GraphBuilder("ep")
    x = b.input("x", (1, 2, 6, 6), "float")
    y = b.conv2d(x, b.param("w", rng.standard_normal((3, 2, 3, 3)).astype(np.float32)))
    y = b.reshape(b.silu(y), shape=(1, 48))
    b.output(b.gelu(b.gemm(y, b.param("fc", rng.standard_normal((48, 4)).astype(np.float32)))))
    inputs = {"x": rng.standard_normal((1, 2, 6, 6)).astype(np.float32)}
    with mnrt.Context() as ctx:
        fn = ctx.compile(b, inputs, options={"option_json": "O3", "float_dtype": "float"})
        # the conv heads a chain (its result reshaped as it is stored): its attributes there
        kernels = [
            attrs
            for n in fn.graph.nodes
            for attrs in ([a for _, a in chain.steps_of(n.attrs)] if n.op == "chain" else [n.attrs])
        ]
        assert [a["epilogue"] for a in kernels if a.get("epilogue", "none") != "none"] == [
            "silu",
            "gelu",
        ]
        device = fn(inputs)[fn.graph.outputs[0]].cpu()
    exported = ReferenceEvaluator(to_onnx(fn.graph)).run(None, inputs)
    np.testing.assert_allclose(exported[0], device, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mpmd", [None, {"devices": [0, 1]}], ids=["single", "pipelined"])
def test_codegen_dir_has_the_optimised_onnx_and_out_onnx_writes_it(tmp_path, mpmd):
    """A pipelined compile's codegen_dir too: its optimised graph of one microbatch."""
    builder, inputs = MODELS["mlp"]()
    with mnrt.Context() as ctx:
        options = {"out_onnx": str(tmp_path / "out.onnx"), **({"mpmd": mpmd} if mpmd else {})}
        fn = ctx.compile(builder, inputs, codegen_dir=tmp_path / "cg", options=options)
        out = fn.graph.outputs[0]
        if mpmd:  # two microbatches of the same input
            device = fn({k: np.stack([v, v]) for k, v in inputs.items()})[out][0]
        else:
            device = fn(inputs)[out].cpu()
    for path in (tmp_path / "cg" / "model.onnx", tmp_path / "out.onnx"):
        onnx.checker.check_model(onnx.load(str(path)))
        exported = ReferenceEvaluator(str(path)).run(None, inputs)[0]
        np.testing.assert_allclose(exported, device, rtol=1e-4, atol=1e-5)
    report = json.loads((tmp_path / "cg" / "report.json").read_text())
    assert {"name": "onnx export", "status": "ok"}.items() <= report["phases"][-1].items()


def test_codegen_dirs_model_onnx_takes_its_weights_from_graph_params_npz(tmp_path):
    # Before, model.onnx held a second copy of every weight (VGG-19: 575 MB written twice).
    rng = np.random.default_rng(0)
    b = GraphBuilder("wide")
    h = b.relu(b.gemm(b.input("x", (4, 256)), b.param("w0", rng.random((256, 256), np.float32))))
    b.output(b.gemm(h, b.param("w1", rng.random((256, 8), np.float32)), trans_b=False), "y")
    inputs = {"x": rng.random((4, 256), np.float32)}
    with mnrt.Context() as ctx:
        options = {"out_onnx": str(tmp_path / "out.onnx"), "float_dtype": "float"}
        fn = ctx.compile(b, inputs, codegen_dir=tmp_path / "cg", options=options)
        device = fn(inputs)[fn.graph.outputs[0]].cpu()
    folder = tmp_path / "cg"
    weights = sum(fn.graph.values[n].data.nbytes for n in fn.graph.params)
    assert (folder / "model.onnx").stat().st_size < weights / 4
    assert (tmp_path / "out.onnx").stat().st_size > weights  # out_onnx stands alone
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    locations = {e.value for t in model.graph.initializer for e in t.external_data
                 if e.key == "location"}  # fmt: skip
    assert locations == {"graph.params.npz"}
    for path in (folder / "model.onnx", tmp_path / "out.onnx"):
        exported = ReferenceEvaluator(str(path)).run(None, inputs)
        np.testing.assert_allclose(exported[0], device, rtol=1e-4, atol=1e-5)
    again = mnrt.Context().load_codegen_dir(folder)  # the archive still loads as before
    np.testing.assert_array_equal(again(inputs)[fn.graph.outputs[0]].cpu(), device)


def test_unexportable_kernels_are_named(monkeypatch):
    monkeypatch.delitem(onnx_export._EXPORTERS, "rmsnorm")
    b = GraphBuilder("g")
    x = b.input("x", (4,), "float")
    b.output(b.rmsnorm(x), "y")
    with pytest.raises(ExportError, match="no ONNX export for kernel\\(s\\) rmsnorm"):
        to_onnx(b.build())


@pytest.mark.parametrize("model", ["cnn", "transformer"])
def test_chains_export_as_their_steps(model):
    builder, inputs = MODELS[model]()
    with mnrt.Context() as ctx:
        fn = ctx.compile(builder, inputs, options={"option_json": "O3", "float_dtype": "float"})
        assert "chain" in [n.op for n in fn.graph.nodes]
        device = fn(inputs)[fn.graph.outputs[0]].cpu()
    exported = to_onnx(fn.graph)
    assert "chain" not in {n.op_type for n in exported.graph.node}
    out = ReferenceEvaluator(exported).run(None, inputs)
    np.testing.assert_allclose(out[0], device, rtol=1e-4, atol=1e-5)


def test_a_chain_with_an_unexportable_step_names_the_step(monkeypatch):
    monkeypatch.delitem(onnx_export._EXPORTERS, "rmsnorm")
    b = GraphBuilder("g")
    x = b.input("x", (4,), "float")
    b.output(b.rmsnorm(b.relu(x)), "y")
    graph = fuse_chains(b.build())
    assert [n.op for n in graph.nodes] == ["chain"]
    with pytest.raises(ExportError, match="no ONNX export for kernel\\(s\\) rmsnorm"):
        to_onnx(graph)


def test_without_onnx_codegen_dir_skips_model_onnx_and_out_onnx_says_what_is_missing(
    tmp_path, monkeypatch
):
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx now raises ImportError
    b = GraphBuilder("g")
    b.output(b.relu(b.input("x", (4, 8), "float")), "y")
    x = {"x": np.ones((4, 8), np.float32)}
    with mnrt.Context() as ctx:
        ctx.compile(b, x, codegen_dir=tmp_path / "cg")
        report = json.loads((tmp_path / "cg" / "report.json").read_text())
        export = next(p for p in report["phases"] if p["name"] == "onnx export")
        assert "pip install mnrt[onnx]" in export["status"]
        assert not (tmp_path / "cg" / "model.onnx").exists()
        with pytest.raises(mnrt.InvalidArgumentError, match=r"pip install mnrt\[onnx\]"):
            ctx.compile(b, x, options={"out_onnx": str(tmp_path / "m.onnx")})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_exports_the_form_it_computes(approximate):
    # The tanh form differs from the erf form by up to 4e-4: exported as erf, it was wrong.
    b = GraphBuilder("g")
    b.output(b.gelu(b.input("x", (64,), "float"), approximate=approximate), "y")
    graph = b.build()
    x = {"x": np.linspace(-6, 6, 64, dtype=np.float32)}
    exported = ReferenceEvaluator(to_onnx(graph)).run(None, x)[0]
    with mnrt.Context() as ctx:
        device = ctx.compile(b, x, options={"float_dtype": "float"})(x)["y"].cpu()
    np.testing.assert_allclose(exported, device, rtol=1e-6, atol=1e-6)


# --- every kernel, one node each, against onnxruntime ----------------------------------

# Kernels with no exact ONNX opset-18 form, each with the reason; adding a kernel to the
# registry means adding its exporter, or naming it here with why it has none.
NO_ONNX_FORM: dict[str, str] = {
    "bitcast": "ONNX's BitCast arrives in opset 26; opset 18 has no op that reads a value's "
    "bits as another type (to_onnx names the kernel it cannot export)",
}

_rng = np.random.default_rng(7)


def _f(*shape, lo=-2.0, hi=2.0):
    return _rng.uniform(lo, hi, shape).astype(np.float32)


def _i(dtype, *shape, lo=-5, hi=5):
    return _rng.integers(lo, hi, shape).astype(dtype)


_TIES = np.array([[1, 3, 3, 0], [2, 2, 1, 2], [0, 5, 4, 5]], np.float32)
_WITH_INF = np.array([1.0, np.inf, -np.inf, np.nan, -2.0, 0.0], np.float32)
_IMG = _f(1, 2, 4, 5)
_LAYOUT = "((8_L2B:1, 8_L1B:1, 4_MAB:4), (4_MAB:1, 4_PE:1))"  # a (256, 16) tensor
_SHIFT_A = np.array([1, -1, 100, -100, 7, -128, 127, 3, 5], np.int64)
_SHIFT_B = np.array([0, 1, 3, 5, 7, 8, 9, -1, 70], np.int64)

# (id, kernel, operands by name (None: an optional one left out), attributes). The ids
# name the kernel first, so every kernel with an exporter appears under its own name.
CASES = [
    ("argmax", "argmax", {"x": _TIES}, {"axis": 1, "keepdims": False}),
    ("argmax-last", "argmax", {"x": _TIES}, {"axis": 0, "select_last_index": True}),
    ("argmin", "argmin", {"x": _TIES}, {"axis": -1}),
    ("argmin-last", "argmin", {"x": _TIES}, {"axis": 1, "select_last_index": True,
                                            "keepdims": False}),
    ("bitshift-left-int64", "bitshift", {"a": _SHIFT_A, "b": _SHIFT_B}, {"direction": "left"}),
    ("bitshift-right-int64", "bitshift", {"a": _SHIFT_A, "b": _SHIFT_B},
     {"direction": "right"}),
    ("bitshift-left-int8", "bitshift", {"a": _SHIFT_A.astype(np.int8),
                                        "b": _SHIFT_B.astype(np.int8)}, {"direction": "left"}),
    ("bitshift-right-int8", "bitshift", {"a": _SHIFT_A.astype(np.int8),
                                         "b": _SHIFT_B.astype(np.int8)}, {"direction": "right"}),
    ("bitshift-right-uint16", "bitshift", {"a": _SHIFT_A.astype(np.uint16),
                                           "b": _SHIFT_B.astype(np.uint16) * 2},
     {"direction": "right"}),
    ("bitshift-left-uint32", "bitshift", {"a": _SHIFT_A.astype(np.uint32),
                                          "b": _SHIFT_B.astype(np.uint32) * 4},
     {"direction": "left"}),
    ("celu", "celu", {"x": _f(3, 4)}, {"alpha": 0.5}),
    ("clip", "clip", {"x": _f(3, 4)}, {"min": -0.5, "max": 0.75}),
    ("clip-unbounded", "clip", {"x": _f(3, 4)}, {}),
    ("clip-min-only", "clip", {"x": _f(3, 4)}, {"min": 0.25}),
    ("clip-max-only", "clip", {"x": _f(3, 4)}, {"max": -0.25}),
    ("clip-int32-rounded-inward", "clip", {"x": _i(np.int32, 3, 4)}, {"min": -1.5, "max": 2.5}),
    ("clip-int8-saturated", "clip", {"x": _i(np.int8, 3, 4, lo=-128, hi=127)},
     {"min": -1000.0}),
    ("conv_transpose2d", "conv_transpose2d", {"x": _f(1, 2, 3, 3), "w": _f(2, 3, 2, 2),
                                              "bias": None},
     {"stride": (2, 2), "padding": (1, 0, 0, 1), "output_padding": (1, 0)}),
    ("conv_transpose2d-groups-bias", "conv_transpose2d",
     {"x": _f(1, 4, 3, 3), "w": _f(4, 1, 3, 2), "bias": _f(2)},
     {"groups": 2, "dilation": (2, 1), "stride": (1, 2)}),
    ("cumprod", "cumprod", {"x": _f(3, 4, lo=0.5, hi=1.5)}, {"axis": 1}),
    ("cumprod-exclusive-reverse", "cumprod", {"x": _f(3, 4, lo=0.5, hi=1.5)},
     {"axis": -1, "exclusive": True, "reverse": True}),
    ("cumprod-exclusive", "cumprod", {"x": _i(np.int32, 3, 4)}, {"axis": 0, "exclusive": True}),
    ("cumprod-reverse", "cumprod", {"x": _f(3, 4, lo=0.5, hi=1.5)}, {"axis": 0, "reverse": True}),
    ("cumsum", "cumsum", {"x": _f(3, 4)}, {"axis": 1}),
    ("cumsum-exclusive", "cumsum", {"x": _f(3, 4)}, {"axis": 0, "exclusive": True}),
    ("cumsum-reverse", "cumsum", {"x": _i(np.int32, 3, 4)}, {"axis": -1, "reverse": True}),
    ("cumsum-exclusive-reverse", "cumsum", {"x": _f(3, 4)},
     {"axis": 1, "exclusive": True, "reverse": True}),
    ("depth_to_space-DCR", "depth_to_space", {"x": _f(1, 8, 2, 3)}, {"blocksize": 2}),
    ("depth_to_space-CRD", "depth_to_space", {"x": _f(1, 8, 2, 3)},
     {"blocksize": 2, "mode": "CRD"}),
    ("einsum-batched-matmul", "einsum", {"a": _f(2, 3, 4), "b": _f(2, 4, 2)},
     {"equation": "bij,bjk->bik"}),
    ("einsum-ellipsis-diagonal", "einsum", {"a": _f(2, 3, 3)}, {"equation": "...ii->...i"}),
    ("elu", "elu", {"x": _f(3, 4)}, {"alpha": 0.7}),
    ("eye_like", "eye_like", {"x": _f(3, 4)}, {"k": 1}),
    ("eye_like-int32", "eye_like", {"x": _f(4, 3)}, {"k": -1, "dtype": "int32"}),
    ("fill", "fill", {}, {"shape": (2, 3), "value": 2.5, "dtype": "float"}),
    ("fill-int32-truncated", "fill", {}, {"shape": (3,), "value": -2.7, "dtype": "int32"}),
    ("fill-uint8-saturated", "fill", {}, {"shape": (2, 2), "value": 300.0, "dtype": "uint8"}),
    ("gather_elements", "gather_elements",
     {"data": _f(3, 4), "indices": np.array([[0, -1], [3, 1], [-4, 2]], np.int64)}, {"axis": 1}),
    ("gather_elements-int32", "gather_elements",
     {"data": _f(3, 4), "indices": _i(np.int32, 2, 4, lo=-3, hi=3)}, {"axis": 0}),
    ("gather_nd", "gather_nd",
     {"data": _f(2, 3, 4), "indices": np.array([[1, 2], [0, -1]], np.int32)}, {}),
    ("gather_nd-batch", "gather_nd",
     {"data": _f(2, 3, 4), "indices": np.array([[[2], [0]], [[1], [1]]], np.int64)},
     {"batch_dims": 1}),
    *[(f"grid_sample-{m}-{p}{'-align' * a}", "grid_sample",
       {"x": _IMG, "grid": _f(1, 3, 4, 2, lo=-1.3, hi=1.3)},
       {"mode": m, "padding_mode": p, "align_corners": a})
      for m, p, a in (("linear", "zeros", False), ("nearest", "border", True),
                      ("cubic", "reflection", False))],
    ("hard_sigmoid", "hard_sigmoid", {"x": _f(3, 4, lo=-6, hi=6)}, {"alpha": 0.3, "beta": 0.4}),
    ("hard_swish", "hard_swish", {"x": _f(3, 4, lo=-6, hi=6)}, {}),
    ("isinf", "isinf", {"x": _WITH_INF}, {}),
    ("isinf-positive", "isinf", {"x": _WITH_INF}, {"detect_negative": False}),
    ("isinf-negative", "isinf", {"x": _WITH_INF}, {"detect_positive": False}),
    ("l1", "l1", {"x": _f(2, 3, 4)}, {"axes": (1,)}),
    ("l2", "l2", {"x": _f(2, 3, 4)}, {"axes": (0, 2), "keepdims": False}),
    ("leaky_relu", "leaky_relu", {"x": _f(3, 4)}, {"alpha": 0.1}),
    ("log_sum", "log_sum", {"x": _f(2, 3, 4, lo=0.1, hi=2)}, {"axes": (-1,)}),
    ("logical_not", "logical_not", {"x": np.array([[True, False], [False, True]])}, {}),
    ("logsumexp", "logsumexp", {"x": _f(2, 3, 4, lo=-50, hi=50)}, {}),
    ("mish", "mish", {"x": _f(3, 4, lo=-5, hi=5)}, {}),
    ("mod-python", "mod", {"a": _f(3, 4, lo=-5, hi=5), "b": _f(4, lo=0.5, hi=2) *
                           np.array([1, -1, 1, -1], np.float32)}, {}),
    ("mod-fmod", "mod", {"a": _f(3, 4, lo=-5, hi=5), "b": _f(3, 4, lo=-2, hi=-0.5)},
     {"fmod": True}),
    ("mod-int32-by-zero", "mod", {"a": _i(np.int32, 3, 4, lo=-9, hi=9),
                                  "b": np.array([0, 3, -3, 2], np.int32)}, {}),
    ("mod-int64-fmod", "mod", {"a": _i(np.int64, 3, 4, lo=-9, hi=9),
                               "b": np.array([0, 3, -3, 2], np.int64)}, {"fmod": True}),
    ("onehot", "onehot", {"indices": np.array([[0, 4, -1], [2, -5, 3]], np.int64),
                          "values": np.array([-1.0, 2.0], np.float32)}, {"depth": 5}),
    ("onehot-axis0", "onehot", {"indices": np.array([1, 0, 2], np.int32),
                                "values": np.array([0.0, 1.0], np.float32)},
     {"depth": 3, "axis": 0}),
    ("pad-constant", "pad", {"x": _f(2, 3)}, {"pads": (1, 0, 2, 1), "value": 1.5}),
    ("pad-constant-crop", "pad", {"x": _i(np.int32, 3, 4)}, {"pads": (-1, 2, 1, -2),
                                                           "value": 7.0}),
    ("pad-reflect", "pad", {"x": _f(3, 4)}, {"pads": (2, 1, 1, 3), "mode": "reflect"}),
    ("pad-edge-crop", "pad", {"x": _f(3, 4)}, {"pads": (-1, 2, 2, -1), "mode": "edge"}),
    ("pad-wrap", "pad", {"x": _f(2, 3)}, {"pads": (1, 4, 3, 2), "mode": "wrap"}),
    ("pad-wrap-crop", "pad", {"x": _f(3, 4)}, {"pads": (0, -1, 2, 3), "mode": "wrap"}),
    ("roll", "roll", {"x": _f(2, 3, 5)}, {"shifts": (-4, 2), "axes": (2, -3)}),
    ("prelu", "prelu", {"a": _f(2, 3, 4), "b": _f(3, 1, lo=0, hi=1)}, {}),
    ("prelu-last-axis", "prelu", {"a": _f(2, 3, 4), "b": _f(4, lo=0, hi=1)}, {}),
    ("range", "range", {}, {"start": 0.5, "limit": 3.2, "delta": 0.7}),
    ("range-int32-down", "range", {}, {"start": 10.0, "limit": -3.0, "delta": -4.0,
                                        "dtype": "int32"}),
    ("range-fractional-down", "range", {}, {"start": 1.0, "limit": -1.0, "delta": -0.1}),
    ("resize-nearest-asymmetric-floor", "resize", {"x": _IMG},
     {"scales": (1.0, 1.0, 2.0, 1.5), "coordinate_transformation_mode": "asymmetric",
      "nearest_mode": "floor"}),
    ("resize-nearest-round-prefer-ceil", "resize", {"x": _IMG},
     {"sizes": (1, 2, 7, 3), "nearest_mode": "round_prefer_ceil"}),
    ("resize-linear-half-pixel", "resize", {"x": _IMG}, {"sizes": (1, 2, 6, 8),
                                                          "mode": "linear"}),
    ("resize-linear-antialias", "resize", {"x": _IMG},
     {"scales": (1.0, 1.0, 0.5, 0.5), "mode": "linear", "antialias": True}),
    ("resize-cubic-align-corners", "resize", {"x": _IMG},
     {"sizes": (1, 2, 7, 9), "mode": "cubic", "coordinate_transformation_mode": "align_corners"}),
    ("resize-cubic-exclude-outside", "resize", {"x": _IMG},
     {"scales": (1.0, 1.0, 1.5, 2.0), "mode": "cubic", "exclude_outside": True,
      "cubic_coeff_a": -0.5, "coordinate_transformation_mode": "pytorch_half_pixel"}),
    ("resize-tf-crop-and-resize", "resize", {"x": _IMG},
     {"sizes": (1, 2, 5, 5), "mode": "linear", "extrapolation_value": -9.0,
      "coordinate_transformation_mode": "tf_crop_and_resize",
      "roi": (0.0, 0.0, 0.2, -0.2, 1.0, 1.0, 0.9, 1.3)}),
    ("resize-half-pixel-symmetric-sizes", "resize", {"x": _IMG},
     {"sizes": (1, 2, 3, 8), "mode": "linear",
      "coordinate_transformation_mode": "half_pixel_symmetric"}),
    ("reverse_sequence", "reverse_sequence",
     {"x": _f(4, 3, 2), "sequence_lens": np.array([4, 1, 2], np.int64)}, {}),
    ("reverse_sequence-batch-first-int32", "reverse_sequence",
     {"x": _f(3, 4), "sequence_lens": np.array([0, 3, 4], np.int32)},
     {"batch_axis": 0, "time_axis": 1}),
    ("rmsnorm", "rmsnorm", {"x": _f(2, 3, 4), "scale": _f(4)}, {}),
    ("rmsnorm-from-axis-1", "rmsnorm", {"x": _f(2, 3, 4), "scale": None},
     {"axis": 1, "epsilon": 0.1}),
    ("rsqrt", "rsqrt", {"x": _f(3, 4, lo=0.1, hi=4)}, {}),
    ("scale_shift", "scale_shift", {"x": _f(2, 3, 4), "scale": _f(3, 1), "shift": _f(4)}, {}),
    ("scale_shift-relu", "scale_shift", {"x": _f(2, 3, 4), "scale": _f(3, 1), "shift": _f(4)},
     {"epilogue": "relu"}),
    ("scatter_elements", "scatter_elements",
     {"data": _f(3, 4), "indices": np.array([[1, -1], [0, 2], [3, 0]], np.int64),
      "updates": _f(3, 2)}, {"axis": 1}),
    *[(f"scatter_elements-{r}", "scatter_elements",
       {"data": _f(3, 4), "indices": np.array([[0, 1, 1, 2], [2, 1, 0, 2]], np.int32),
        "updates": _f(2, 4)}, {"axis": 0, "reduction": r})
      for r in ("add", "mul", "max", "min")],
    ("scatter_nd", "scatter_nd",
     {"data": _f(3, 4), "indices": np.array([[2], [0]], np.int32), "updates": _f(2, 4)}, {}),
    *[(f"scatter_nd-{r}", "scatter_nd",
       {"data": _f(3, 4), "indices": np.array([[1, 2], [1, 2], [0, -1]], np.int64),
        "updates": _f(3)}, {"reduction": r})
      for r in ("add", "mul", "max", "min")],
    ("selu", "selu", {"x": _f(3, 4)}, {}),
    ("shrink", "shrink", {"x": _f(3, 4)}, {"lambd": 0.4, "bias": 0.1}),
    ("slice", "slice", {"x": _f(4, 5)}, {"starts": (1, -4), "ends": (100, 4)}),
    ("slice-axes-steps", "slice", {"x": _f(4, 5, 3)},
     {"starts": (-1, 0), "ends": (-100, 3), "axes": (1, -1), "steps": (-2, 2)}),
    ("space_to_depth-DCR", "space_to_depth", {"x": _f(1, 2, 4, 6)}, {"blocksize": 2}),
    ("space_to_depth-CRD", "space_to_depth", {"x": _f(1, 2, 4, 6)},
     {"blocksize": 2, "mode": "CRD"}),
    ("sum_square", "sum_square", {"x": _f(2, 3, 4)}, {"axes": (0,), "keepdims": False}),
    ("thresholded_relu", "thresholded_relu", {"x": _f(3, 4)}, {"alpha": 0.3}),
    ("tile", "tile", {"x": _f(2, 1, 3)}, {"repeats": (2, 3, 1)}),
    ("topk", "topk", {"x": _f(3, 5)}, {"k": 2}),
    ("topk-smallest-axis0", "topk", {"x": _f(4, 3)}, {"k": 3, "axis": 0, "largest": False}),
    ("topk-unsorted", "topk", {"x": _f(3, 5)}, {"k": 4, "sorted": False}),
    ("trilu", "trilu", {"x": _f(2, 3, 4)}, {"k": 1}),
    ("trilu-lower", "trilu", {"x": _f(4, 3)}, {"upper": False, "k": -1}),
]  # fmt: skip

# The kernels that are one ONNX op of the same operands (names.py's tables), with inputs
# in each one's domain.
_UNARY_INPUT = {
    "log": _f(3, 4, lo=0.1, hi=3), "sqrt": _f(3, 4, lo=0.1, hi=3),
    "acosh": _f(3, 4, lo=1.1, hi=3), "atanh": _f(3, 4, lo=-0.9, hi=0.9),
    "asin": _f(3, 4, lo=-0.9, hi=0.9), "acos": _f(3, 4, lo=-0.9, hi=0.9),
    "reciprocal": _f(3, 4, lo=0.5, hi=2), "bitwise_not": _i(np.int32, 3, 4),
    "isnan": _WITH_INF, "round": np.array([-2.5, -0.5, 0.5, 1.5, 2.4, 2.6], np.float32),
}  # fmt: skip
_BINARY_INPUTS = {
    "div": (_f(3, 4), _f(4, lo=0.5, hi=2)), "pow": (_f(3, 4, lo=0.1, hi=2), _f(4)),
    "equal": (_i(np.int32, 3, 4, lo=0, hi=3), _i(np.int32, 4, lo=0, hi=3)),
    **{k: (_i(np.int32, 3, 4), _i(np.int32, 4)) for k in ("bitwise_and", "bitwise_or",
                                                          "bitwise_xor")},
    **{k: (_f(3, 4) > 0, _f(4) > 0) for k in ("logical_and", "logical_or", "logical_xor")},
}  # fmt: skip
CASES += [(k, k, {"x": _UNARY_INPUT.get(k, _f(3, 4))}, {}) for k in names.UNARY]
CASES += [(k, k, dict(zip("ab", _BINARY_INPUTS.get(k, (_f(3, 4), _f(4))), strict=True)), {})
          for k in (*names.BINARY, *names.VARIADIC)]  # fmt: skip
CASES += [(k, k, {"x": _f(2, 3, 4, lo=0.5, hi=1.5)}, {"axes": (1,)}) for k in names.REDUCE]
CASES += [
    ("sum-all-dropped", "sum", {"x": _f(2, 3, 4)}, {"keepdims": False}),
    ("where", "where", {"cond": _f(3, 4) > 0, "a": _f(3, 4), "b": _f(4)}, {}),
    ("copy", "copy", {"x": _f(3, 4)}, {}),
    ("relayout", "relayout", {"x": _f(256, 16)}, {"src": _LAYOUT, "dst": _LAYOUT}),
    ("global_avg_pool2d", "global_avg_pool2d", {"x": _IMG}, {}),
    ("gemm", "gemm", {"a": _f(3, 4), "b": _f(4, 2), "c": None}, {}),
    ("gemm-transposed-scaled-bias-epilogue", "gemm", {"a": _f(4, 3), "b": _f(2, 4),
                                                      "c": _f(2)},
     {"trans_a": True, "trans_b": True, "alpha": 0.5, "beta": 2.0, "epilogue": "relu"}),
    ("gelu", "gelu", {"x": _f(3, 4)}, {}),
    ("gelu-tanh", "gelu", {"x": _f(3, 4)}, {"approximate": "tanh"}),
    ("silu", "silu", {"x": _f(3, 4)}, {}),
    ("layernorm", "layernorm", {"x": _f(2, 3, 4), "scale": _f(4), "bias": _f(4)}, {}),
    ("layernorm-plain", "layernorm", {"x": _f(2, 3, 4)}, {"axis": 1, "epsilon": 0.1}),
    ("conv2d", "conv2d", {"x": _f(1, 2, 5, 5), "w": _f(4, 1, 3, 3), "bias": _f(4)},
     {"stride": (2, 1), "padding": (1, 0, 1, 2), "groups": 2, "epilogue": "silu"}),
    ("max_pool2d", "max_pool2d", {"x": _IMG}, {"kernel": (2, 2), "padding": (1, 1, 0, 0),
                                               "ceil_mode": True}),
    ("avg_pool2d", "avg_pool2d", {"x": _IMG}, {"kernel": (3, 2), "stride": (1, 2),
                                               "padding": (1, 0, 1, 0)}),
    ("avg_pool2d-count-pad", "avg_pool2d", {"x": _IMG},
     {"kernel": (2, 2), "padding": (1, 1, 1, 1), "count_include_pad": True}),
    ("softmax", "softmax", {"x": _f(3, 4)}, {"axis": 0}),
    ("log_softmax", "log_softmax", {"x": _f(3, 4)}, {}),
    ("concat", "concat", {"a": _f(2, 3), "b": _f(2, 1)}, {"axis": -1}),
    ("gather", "gather", {"data": _f(3, 4), "indices": np.array([[2, -1]], np.int32)},
     {"axis": 1}),
    ("transpose", "transpose", {"x": _f(2, 3, 4)}, {"perm": (1, 2, 0)}),
    ("transpose-reversed", "transpose", {"x": _f(2, 3, 4)}, {}),
    ("reshape", "reshape", {"x": _f(2, 3, 4)}, {"shape": (4, -1)}),
    ("expand", "expand", {"x": _f(3, 1)}, {"shape": (2, 3, 4)}),
    ("cast", "cast", {"x": _f(3, 4, lo=-100, hi=100)}, {"to": "int32"}),
    # The device saturates and makes nan 0 where ONNX's Cast wraps or is undefined.
    ("cast-float-to-int8-saturates", "cast",
     {"x": np.array([300.7, -300.2, 127.9, -128.9, np.nan, np.inf, -np.inf, 5.5, -5.5],
                    np.float32)}, {"to": "int8"}),
    ("cast-float-to-int32-saturates", "cast",
     {"x": np.array([3e9, -3e9, 2147483520.0, 2147483648.0, np.nan, np.inf, -np.inf, -7.9],
                    np.float32)}, {"to": "int32"}),
    ("cast-float-to-uint8-saturates", "cast",
     {"x": np.array([-3.5, 255.9, 256.0, np.nan, 1.5], np.float32)}, {"to": "uint8"}),
    ("cast-int32-to-int8-saturates", "cast",
     {"x": np.array([300, -300, 127, -129, 5], np.int32)}, {"to": "int8"}),
    ("cast-int64-to-uint8-saturates", "cast",
     {"x": np.array([-1, 256, 255, 7], np.int64)}, {"to": "uint8"}),
    ("cast-int8-to-int32-widens", "cast", {"x": np.array([-128, 127, 0], np.int8)},
     {"to": "int32"}),
    ("chain", "chain", {"x": _f(3, 4)},
     {"steps": chain.dumps([{"op": "relu"}, {"op": "exp"}]), "x_dtype": "float"}),
    ("chain-operands", "chain", {"x": _f(2, 3, 4), "s": _f(3, 1), "t": _f(2, 3, 4)},
     {"steps": chain.dumps([{"op": "mul", "with": [1]}, {"op": "sub", "with": [2], "at": 1},
                            {"op": "add", "with": [0]}, {"op": "relu"}]),
      "x_dtype": "float", "operand_dtypes": "float,float"}),
    ("chain-tap", "chain", {"x": _f(2, 3, 4), "t": _f(2, 3, 4)},
     {"steps": chain.dumps([{"op": "add", "with": [1]}, {"op": "relu"}, {"op": "exp"}]),
      "x_dtype": "float", "operand_dtypes": "float", "tap": 1}),
]  # fmt: skip


def test_a_chain_exports_the_operands_it_widens_as_it_loads_them_through_a_cast():
    """(A compile makes every float one type at float_dtype 'float', so this chain is built
    as mixed precision leaves it: a float16 operand the chain widens.)"""
    ort = pytest.importorskip("onnxruntime")
    b = GraphBuilder("widen")
    x, t = b.input("x", (2, 3, 4), "float"), b.input("t", (2, 3, 4), "float16")
    steps = chain.dumps([{"op": "add", "with": [1]}, {"op": "relu"}])
    y = b.chain(x, t, steps=steps, x_dtype="float", operand_dtypes="float16", widen=",float")
    b.output(y, "y")
    model = to_onnx(b.build())
    assert [n.op_type for n in model.graph.node] == ["Cast", "Add", "Relu"]
    xs, ts = _f(2, 3, 4), _f(2, 3, 4).astype(np.float16)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"x": xs, "t": ts})
    np.testing.assert_array_equal(got, np.maximum(xs + ts.astype(np.float32), 0))


def test_every_kernel_has_an_exporter_or_a_reason():
    kernels = {k.name for k in all_kernels()}
    missing = sorted(kernels - set(onnx_export._EXPORTERS) - set(NO_ONNX_FORM))
    assert not missing, f"kernels without an ONNX exporter: {missing}"
    assert not set(NO_ONNX_FORM) & set(onnx_export._EXPORTERS)
    covered = {kernel for _, kernel, _, _ in CASES}
    assert not set(onnx_export._EXPORTERS) - covered, "exporters without a case in CASES"


# Cases where onnxruntime departs from ONNX's definition, run in ONNX's reference
# evaluator instead: (the case's attributes, why).
_ORT_DEPARTS = {
    "resize-tf-crop-and-resize": "onnxruntime 1.32 crops another region than the roi, and "
    "never writes extrapolation_value",
}


def _one_node(kernel, operands, attrs):
    b = GraphBuilder(kernel)
    symbols = []
    for name, array in operands.items():
        symbols.append("" if array is None else b.input(name, array.shape, array.dtype))
    while symbols and not symbols[-1]:
        symbols.pop()
    outs = b.node(kernel, *symbols, **attrs)
    for i, y in enumerate(outs if isinstance(outs, tuple) else (outs,)):
        b.output(y, f"y{i}")
    return b, {k: v for k, v in operands.items() if v is not None}


def _tolerance(dtype) -> dict:
    """Each kernel's result at its dtype's precision: a few hundred units of roundoff (the
    two sides may order a reduction's sums differently); integers and bools exactly."""
    u = unit_roundoff(dtype) if dtype.is_float else 0.0
    return {"rtol": 256 * u, "atol": 256 * u}


@pytest.mark.parametrize(("case", "kernel", "operands", "attrs"),
                         [pytest.param(*c, id=c[0]) for c in CASES])  # fmt: skip
def test_each_kernel_exports_what_the_device_computes(case, kernel, operands, attrs):
    ort = pytest.importorskip("onnxruntime")
    builder, inputs = _one_node(kernel, operands, attrs)
    with mnrt.Context() as ctx:
        fn = ctx.compile(builder, inputs, options={"float_dtype": "float"})
        graph = fn.graph
        assert kernel in {op for n in graph.nodes for op in (n.op, *onnx_export._ops(n))}
        device = fn(inputs)
        device = [device[name].cpu() for name in graph.outputs]
    model = to_onnx(graph)
    if case in _ORT_DEPARTS:
        exported = ReferenceEvaluator(model).run(None, inputs)
        _compare(graph, device, exported)
        return
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: inputs[i.name] for i in session.get_inputs()}
    _compare(graph, device, session.run(None, feeds))


def _compare(graph, device, exported):
    for name, want, got in zip(graph.outputs, device, exported, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape, name
        np.testing.assert_allclose(got, want, **_tolerance(graph.values[name].dtype))


def test_half_pixel_symmetric_resize_with_inexact_scales_is_refused_by_name():
    b = GraphBuilder("g")
    x = b.input("x", (1, 1, 3, 5), "float")
    b.output(b.resize(x, scales=(1.0, 1.0, 1.5, 0.7), mode="linear",
                      coordinate_transformation_mode="half_pixel_symmetric"), "y")  # fmt: skip
    with pytest.raises(ExportError, match="half_pixel_symmetric.*opset 19"):
        to_onnx(b.build())


def test_dilated_avg_pool_is_refused_by_name():
    """AveragePool takes dilations from opset 19; the exporter writes 18."""
    b = GraphBuilder("g")
    x = b.input("x", (1, 1, 6, 6), "float")
    b.output(b.avg_pool2d(x, kernel=(2, 2), dilation=(2, 1)), "y")
    with pytest.raises(ExportError, match="avg_pool2d node .*dilation \\[2, 1\\].*opset 19"):
        to_onnx(b.build())


_INTEGERS = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]


@settings(max_examples=40, deadline=None)
@given(
    dtype=st.sampled_from(_INTEGERS),
    op=st.sampled_from([("bitshift", {"direction": "left"}), ("bitshift", {"direction": "right"}),
                        ("mod", {"fmod": False}), ("mod", {"fmod": True})]),
    seed=st.integers(0, 2**32 - 1),
)  # fmt: skip
def test_integer_formulas_match_the_device_at_every_width(dtype, op, seed):
    """bitshift and mod of integers are written as several ops (widened shifts, guarded
    divisors): at each width, with shift amounts past it and below 0, and zero divisors,
    they give the device's values exactly."""
    ort = pytest.importorskip("onnxruntime")
    kernel, attrs = op
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    a = rng.integers(info.min, info.max, 16, dtype=dtype, endpoint=True)
    if kernel == "bitshift":
        b = rng.integers(-3, info.bits + 3, 16).astype(dtype)
    else:
        b = rng.integers(max(info.min, -9), min(info.max, 9), 16, endpoint=True).astype(dtype)
    builder, inputs = _one_node(kernel, {"a": a, "b": b}, attrs)
    with mnrt.Context() as ctx:
        fn = ctx.compile(builder, inputs)
        device = fn(inputs)[fn.graph.outputs[0]].cpu()
    session = ort.InferenceSession(to_onnx(fn.graph).SerializeToString(),
                                   providers=["CPUExecutionProvider"])  # fmt: skip
    np.testing.assert_array_equal(session.run(None, inputs)[0], device)


def test_codegen_dir_writes_model_onnx_for_kernels_that_had_no_exporter(tmp_path):
    # Before, a graph holding any of them got no model.onnx at all.
    b = GraphBuilder("g")
    x = b.rmsnorm(b.input("x", (4, 8), "float"), b.param("s", _f(8)))
    values, _ = b.topk(b.cumprod(b.clip(x, min=-1.0, max=1.0), axis=1), k=3)
    b.output(b.pad(values, pads=(1, 0, 0, 2), mode="wrap"), "y")
    inputs = {"x": _f(4, 8)}
    with mnrt.Context() as ctx:
        fn = ctx.compile(b, inputs, codegen_dir=tmp_path / "cg")
        device = fn(inputs)["y"].cpu()
    report = json.loads((tmp_path / "cg" / "report.json").read_text())
    assert {"name": "onnx export", "status": "ok"}.items() <= report["phases"][-1].items()
    model = onnx.load(str(tmp_path / "cg" / "model.onnx"))
    assert {"Scan", "TopK", "Gather", "Clip", "ReduceMean"} <= {n.op_type for n in model.graph.node}
    out = ReferenceEvaluator(model).run(None, inputs)[0]
    np.testing.assert_allclose(out, device, **_tolerance(fn.graph.values["y"].dtype))


def test_resize_scales_float32_cannot_carry_are_refused_by_name():
    # 0.7 as float32 is below 0.7: ONNX would make 6 rows of 10, the device makes 7.
    b = GraphBuilder("g")
    x = b.input("x", (1, 1, 10, 3), "float")
    b.output(b.resize(x, scales=(1.0, 1.0, 0.7, 1.5), mode="linear"), "y")
    with pytest.raises(ExportError, match="as float32.*output sizes \\[1, 1, 7, 4\\]"):
        to_onnx(b.build())
