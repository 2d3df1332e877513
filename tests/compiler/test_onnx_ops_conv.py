"""ONNX converters of convolutions beyond Conv: 3-D ConvTranspose against onnxruntime, and
DeformConv against ONNX's reference evaluator (offsets and masks as values of the run, taps
moved past the input's edges, groups and offset groups), the device work it becomes, and
the errors of a bad node."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx_one_node import check, node_model, run

from mnrt.compiler.onnx import InvalidModelError, UnsupportedModelError, from_onnx

RNG = np.random.default_rng(23)


def _f(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _deform(x_shape, w_shape, attrs, mask=True, bias=True, offset_scale=1.5):
    """A DeformConv whose features, offsets and mask are graph inputs (a detector computes
    them), its weights and bias initializers; the model and its feeds."""
    n, _, ih, iw = x_shape
    kh, kw = w_shape[2:]
    (sh, sw), (dh, dw) = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    pt, pl, pb, pr = attrs.get("pads", [0, 0, 0, 0])
    oh = (ih + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (iw + pl + pr - (kw - 1) * dw - 1) // sw + 1
    og = attrs.get("offset_group", 1)
    feeds = {"x": _f(*x_shape), "offset": _f(n, og * kh * kw * 2, oh, ow, scale=offset_scale)}
    values = {"x": feeds["x"], "w": _f(*w_shape), "offset": feeds["offset"],
              "b": _f(w_shape[0]) if bias else None}  # fmt: skip
    if mask:
        feeds["mask"] = RNG.uniform(0, 1, (n, og * kh * kw, oh, ow)).astype(np.float32)
        values["mask"] = feeds["mask"]
    model = node_model("DeformConv", values, set(feeds), 19, **attrs)
    return model, feeds


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "attrs", "mask", "bias"),
    [((1, 2, 5, 6), (3, 2, 3, 3), {}, False, False),
     ((2, 4, 7, 6), (4, 2, 2, 3), {"group": 2, "offset_group": 2, "pads": [1, 0, 1, 2]},
      True, True),
     ((1, 3, 8, 9), (2, 3, 3, 2), {"strides": [2, 1], "dilations": [1, 2]}, True, False)],
    ids=["plain", "groups-offset-groups-pads", "strided-dilated"],
)  # fmt: skip
def test_deform_conv_matches_the_reference(ctx, x_shape, w_shape, attrs, mask, bias):
    model, feeds = _deform(x_shape, w_shape, attrs, mask, bias)
    check(ctx, model, feeds, rtol=1e-4, atol=1e-5)


def test_deform_conv_is_one_grid_sample_per_offset_group_and_a_gemm():
    model, _ = _deform((1, 4, 6, 6), (2, 4, 3, 3), {"offset_group": 2})
    ops = [n.op for n in from_onnx(model).nodes]
    assert ops.count("grid_sample") == 2 and ops.count("gemm") == 1


def test_bad_deform_convs_are_refused_by_name():
    model, _ = _deform((1, 3, 5, 5), (2, 3, 3, 3), {"offset_group": 2})
    with pytest.raises(InvalidModelError, match="offset_group 2 does not divide the 3"):
        from_onnx(model)
    model, _ = _deform((1, 2, 1, 5), (2, 2, 1, 3), {})
    with pytest.raises(UnsupportedModelError, match="an input 1 x 5"):
        from_onnx(model)


@pytest.mark.parametrize(
    "attrs",
    [{},
     {"strides": [2, 1, 2], "pads": [1, 0, 1, 0, 1, 0], "output_padding": [1, 0, 1]},
     {"strides": [3, 2, 1], "dilations": [2, 1, 2], "group": 2},
     {"strides": [2, 2, 2], "output_shape": [8, 7, 6]},
     {"strides": [2, 1, 1], "auto_pad": "SAME_UPPER"}],
    ids=["plain", "pads-output-padding", "dilated-groups", "output-shape", "same-upper"],
)  # fmt: skip
def test_conv_transpose_3d_matches_onnxruntime(ctx, attrs):
    """A volumetric decoder's upsampling (3-D U-Net): one conv_transpose2d per depth tap of
    the kernel, placed at the depths it reaches."""
    ort = pytest.importorskip("onnxruntime")
    groups = attrs.get("group", 1)
    x, w, b = _f(2, 4, 4, 3, 3), _f(4, 6 // groups, 3, 2, 3), _f(6)
    model = node_model("ConvTranspose", {"x": x, "w": w, "b": b}, {"x"}, 17, **attrs)
    (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    (got,) = run(ctx, model, {"x": x})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert "conv_transpose2d" in [n.op for n in from_onnx(model).nodes]
