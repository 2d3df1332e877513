"""ONNX converters of GridSample and AffineGrid against ONNX's reference evaluator, and a
spatial transformer (AffineGrid -> GridSample -> Conv) against onnxruntime, compiled and
exported back to ONNX."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_one_node import check, one_node_model, run

import mnrt
from mnrt.compiler import GraphBuilder
from mnrt.compiler.onnx_export import ExportError, to_onnx

RNG = np.random.default_rng(7)


def _f(*shape, lo=-1.0, hi=1.0):
    return RNG.uniform(lo, hi, shape).astype(np.float32)


def _against_onnxruntime(ctx, model, feeds, rtol=1e-5, atol=1e-6):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, feeds)
    (got,) = run(ctx, model, feeds)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize(
    ("opset", "mode", "padding", "align_corners"),
    [
        (16, "bilinear", "zeros", 0),
        (16, "bicubic", "reflection", 1),
        (16, "nearest", "border", 0),
        (20, "linear", "reflection", 0),
        (20, "cubic", "border", 1),
        (20, "nearest", "zeros", 1),
    ],
)
def test_grid_sample_2d_modes_of_both_opsets(ctx, opset, mode, padding, align_corners):
    """Opset 16's names against onnxruntime (ONNX's reference knows opset 20's only)."""
    feeds = {"x": _f(2, 3, 5, 4), "grid": _f(2, 3, 6, 2, lo=-1.4, hi=1.4)}
    model = one_node_model("GridSample", feeds, ["y"], opset=opset, mode=mode,
                           padding_mode=padding, align_corners=align_corners)  # fmt: skip
    if opset == 16:
        _against_onnxruntime(ctx, model, feeds)
    else:
        check(ctx, model, feeds)


def test_grid_sample_defaults_and_3d_of_opset_20(ctx):
    feeds = {"x": _f(1, 2, 3, 4, 5), "grid": _f(1, 2, 3, 2, 3, lo=-1.2, hi=1.2)}
    check(ctx, one_node_model("GridSample", feeds, ["y"], opset=20), feeds)


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 1, 3, 4, 2)], ids=["2d", "3d"])
def test_affine_grid(ctx, size, align_corners):
    k = len(size) - 2
    feeds = {"theta": _f(2, k, k + 1)}
    model = one_node_model("AffineGrid", feeds, ["grid"], opset=20,
                           inits={"size": np.array(size, np.int64)},
                           align_corners=align_corners)  # fmt: skip
    (grid,) = check(ctx, model, feeds)
    assert grid.shape == (2, *size[2:], k)


def test_affine_grid_needs_its_size_at_import_time(ctx):
    feeds = {"theta": _f(1, 2, 3), "size": np.array([1, 1, 2, 2], np.int64)}
    model = one_node_model("AffineGrid", feeds, ["grid"], opset=20)
    with pytest.raises(mnrt.MnrtError, match="size.*import time"):
        ctx.compile(model, {"theta": feeds["theta"]}, options={"float_dtype": "float"})


def test_affine_grid_of_mismatched_theta_is_invalid(ctx):
    feeds = {"theta": _f(2, 3, 4)}
    model = one_node_model("AffineGrid", feeds, ["grid"], opset=20,
                           inits={"size": np.array([2, 1, 4, 4], np.int64)})  # fmt: skip
    with pytest.raises(mnrt.MnrtError, match=r"\[N, 2, 3\] and \[N, C, H, W\]"):
        run(ctx, model, feeds)


def _spatial_transformer():
    """x [2, 3, 8, 8] warped by theta to 6x6, then a 3x3 convolution."""
    w = numpy_helper.from_array(_f(4, 3, 3, 3), "w")
    b = numpy_helper.from_array(_f(4), "b")
    size = numpy_helper.from_array(np.array([2, 3, 6, 6], np.int64), "size")
    nodes = [
        helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=0),
        helper.make_node("GridSample", ["x", "grid"], ["warped"], padding_mode="border"),
        helper.make_node("Conv", ["warped", "w", "b"], ["y"], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "stn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8]),
         helper.make_tensor_value_info("theta", TensorProto.FLOAT, [2, 2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[w, b, size],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    theta = np.array([[[0.9, -0.3, 0.1], [0.2, 1.1, -0.2]], [[1.2, 0.0, 0.4], [0.1, 0.8, 0.0]]])
    return model, {"x": _f(2, 3, 8, 8), "theta": theta.astype(np.float32)}


def test_spatial_transformer_matches_onnxruntime_and_exports(ctx):
    ort = pytest.importorskip("onnxruntime")
    model, feeds = _spatial_transformer()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, feeds)
    compiled = ctx.compile(model, feeds, options={"float_dtype": "float"})
    assert "grid_sample" in {n.op for n in compiled.graph.nodes}
    got = compiled(feeds)["y"].cpu()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    exported = to_onnx(compiled.graph).SerializeToString()
    again = ort.InferenceSession(exported, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(again.run(None, feeds)[0], want, rtol=1e-4, atol=1e-5)


def test_3d_grid_sample_has_no_onnx_form_at_the_exporters_opset():
    b = GraphBuilder("g")
    y = b.node("grid_sample", b.input("x", (1, 1, 2, 2, 2)), b.input("grid", (1, 1, 1, 1, 3)))
    b.output(y, "y")
    with pytest.raises(ExportError, match="3-D sampling has no ONNX form before opset 20"):
        to_onnx(b.build())


@pytest.mark.parametrize(
    ("opset", "attrs"),
    [(16, {"sampling_ratio": 2}),
     (16, {"sampling_ratio": 3, "coordinate_transformation_mode": "output_half_pixel",
           "spatial_scale": 0.5, "output_height": 3, "output_width": 4}),
     (10, {"sampling_ratio": 1, "output_height": 2, "output_width": 2})],
    ids=["half-pixel", "output-half-pixel-scaled", "opset-10"],
)  # fmt: skip
def test_roi_align_samples_regions_the_run_gives(ctx, opset, attrs):
    """A detector's second stage: the regions (some reaching past the map, one degenerate)
    and their images are inputs of the run, not constants."""
    x = _f(2, 3, 10, 12)
    rois = np.array([[0, 0, 11, 9], [2.5, 1.2, 6.1, 8.8], [-3, -2, 4, 5], [7, 6, 20, 15],
                     [5, 5, 5, 5]], np.float32)  # fmt: skip
    batch = np.array([0, 1, 1, 0, 1], np.int64)
    attrs = {"output_height": 4, "output_width": 5, **attrs}
    model = one_node_model("RoiAlign", {"x": x, "rois": rois, "b": batch}, ["y"], opset=opset,
                           **attrs)  # fmt: skip
    feeds = {"x": x, "rois": rois, "b": batch}
    if opset < 16:
        # ONNX's reference shifts opset 10's regions by half a pixel, which opset 10 did
        # not: opset 16's output_half_pixel is its behaviour (and goldens come from mnrt)
        assert mnrt.compiler.onnx.evaluator_unreliable_ops(model) == ["RoiAlign"]
        legacy = {**attrs, "coordinate_transformation_mode": "output_half_pixel"}
        (want,) = ReferenceEvaluator(
            one_node_model("RoiAlign", feeds, ["y"], opset=16, **legacy)
        ).run(None, feeds)
        (got,) = run(ctx, model, feeds)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    else:
        (got,) = check(ctx, model, feeds, rtol=1e-5, atol=1e-5)
    assert got.shape == (5, 3, attrs["output_height"], attrs["output_width"])


@pytest.mark.parametrize(
    ("attrs", "why"),
    [({"sampling_ratio": 0}, "sampling_ratio=0"),
     ({"mode": "max", "sampling_ratio": 2}, "mode=max")],
)  # fmt: skip
def test_roi_align_forms_a_static_graph_cannot_run_are_refused_by_name(attrs, why):
    from mnrt.compiler.onnx import UnsupportedModelError, from_onnx

    x, rois, batch = _f(1, 1, 4, 4), np.zeros((2, 4), np.float32), np.zeros(2, np.int64)
    model = one_node_model("RoiAlign", {"x": x, "rois": rois, "b": batch}, ["y"], opset=16,
                           **attrs)  # fmt: skip
    with pytest.raises(UnsupportedModelError, match=why):
        from_onnx(model)


def test_roi_align_of_more_samples_than_the_device_holds_is_refused_before_allocating():
    # output_width 2**31 made the importer build 2**32 sample positions on the host (a
    # fuzz of mutated node cases found it)
    from mnrt.compiler.onnx import InvalidModelError, from_onnx

    x, rois, batch = _f(1, 1, 4, 4), np.zeros((2, 4), np.float32), np.zeros(2, np.int64)
    model = one_node_model("RoiAlign", {"x": x, "rois": rois, "b": batch}, ["y"], opset=16,
                           sampling_ratio=2, output_width=2**31)  # fmt: skip
    with pytest.raises(InvalidModelError, match=r"sample grid of shape \(2, 2, 4294967296, 2\)"):
        from_onnx(model)
