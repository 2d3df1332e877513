"""resize against every Resize case of ONNX's node test suite (the expected outputs the
suite ships, computed by ONNX's reference), with the case's optional inputs resolved to
full-rank sizes and scales the way a converter does, plus the dtype rules."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from kernel_harness import infer, operand, run, spec

from mnrt.device import dtypes as dt
from mnrt.errors import DTypeError, KernelAttributeError

pytest.importorskip("onnx")

_ATTRS = (
    "mode",
    "coordinate_transformation_mode",
    "nearest_mode",
    "cubic_coeff_a",
    "exclude_outside",
    "extrapolation_value",
    "antialias",
)


@pytest.fixture(scope="module")
def resize_cases():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            return [c for c in collect_testcases("Resize") if c.name.startswith("test_resize")]


def _kernel_attrs(node, inputs: list, x_shape: tuple[int, ...]) -> dict:
    """What a Resize converter hands the kernel: attributes by name, and axes / roi /
    keep_aspect_ratio_policy resolved into full-rank sizes, scales and roi."""
    from onnx import helper

    onnx_attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    attrs = {}
    for name in _ATTRS:
        if name in onnx_attrs:
            v = onnx_attrs[name]
            attrs[name] = v.decode() if isinstance(v, bytes) else v
    for name in ("exclude_outside", "antialias"):
        if name in attrs:
            attrs[name] = bool(attrs[name])
    rank = len(x_shape)
    axes = [a % rank for a in onnx_attrs.get("axes", range(rank))]
    # Resize's inputs by position (X, roi, scales, sizes); an omitted one is named "".
    given = iter(inputs)
    by_position = [next(given) if name else None for name in node.input]
    roi, scales, sizes = (by_position[1:] + [None] * 3)[:3]
    if roi is not None and roi.size:
        full = [0.0] * rank + [1.0] * rank
        for i, a in enumerate(axes):
            full[a], full[rank + a] = float(roi[i]), float(roi[len(axes) + i])
        attrs["roi"] = full
    if scales is not None and scales.size:
        full_scales = [1.0] * rank
        for i, a in enumerate(axes):
            full_scales[a] = float(scales[i])
        attrs["scales"] = full_scales
    else:
        full_sizes = list(x_shape)
        for i, a in enumerate(axes):
            full_sizes[a] = int(sizes[i])
        policy = onnx_attrs.get("keep_aspect_ratio_policy", b"stretch").decode()
        if policy != "stretch":
            ratios = [full_sizes[a] / x_shape[a] for a in axes]
            s = min(ratios) if policy == "not_larger" else max(ratios)
            attrs["scales"] = [s if a in axes else 1.0 for a in range(rank)]
            full_sizes = [
                int(s * x_shape[a] + 0.5) if a in axes else x_shape[a] for a in range(rank)
            ]
        attrs["sizes"] = full_sizes
    return attrs


def test_resize_passes_every_onnx_node_case(resize_cases):
    assert len(resize_cases) >= 30
    failures = []
    for case in resize_cases:
        node = case.model.graph.node[0]
        (inputs, (want,)) = case.data_sets[0]
        x = inputs[0]
        attrs = _kernel_attrs(node, list(inputs), x.shape)
        got = run("resize", operand(x), **attrs)
        if got.shape != want.shape or not np.allclose(got, want, rtol=1e-6, atol=1e-6):
            failures.append(case.name)
    assert not failures, f"resize differs from ONNX on {failures}"


@pytest.mark.parametrize("dtype", ["int64", "uint64", "bool", "bfloat16", "int8"])
def test_nearest_is_a_gather_in_every_dtype(dtype):
    d = dt.dtype(dtype)
    if d is dt.BOOL:
        x = np.array([[True, False], [False, True]])
    elif d.is_integer:
        x = np.array([[0, 1], [2, 3]], d.storage) + (
            np.array(2**62, d.storage) if d in (dt.INT64, dt.UINT64) else 0
        )
    else:
        x = np.array([[1.5, -2.0], [np.inf, np.nan]], np.float32)
    got = run("resize", operand(x, d), scales=(2.0, 2.0), mode="nearest")
    want = d.from_storage(operand(x, d)[0]).repeat(2, axis=0).repeat(2, axis=1)
    np.testing.assert_array_equal(got, want)


def test_linear_on_small_integers_rounds_half_to_even_and_saturates():
    x = np.array([[0, 255]], np.uint8)
    got = run("resize", operand(x), sizes=(1, 4), mode="linear",
              coordinate_transformation_mode="align_corners")  # fmt: skip
    assert got.tolist() == [[0, 85, 170, 255]]


@pytest.mark.parametrize(
    "specs,attrs,error,match",
    [
        ([spec((2, 2), "int64")], {"scales": (2.0, 2.0), "mode": "linear"}, DTypeError,
         "2\\*\\*53"),
        ([spec((2, 2), "bool")], {"scales": (2.0, 2.0), "mode": "cubic"}, DTypeError, "bool"),
        ([spec((2, 2))], {}, KernelAttributeError, "'scales' or 'sizes'"),
        ([spec((2, 2))], {"scales": (2.0,)}, KernelAttributeError, "one entry per axis"),
        ([spec((2, 2))], {"scales": (2.0, 0.0)}, KernelAttributeError, "> 0"),
        ([spec((2, 2))], {"scales": (2.0, 2.0), "antialias": True}, KernelAttributeError,
         "antialias"),
        ([spec((2, 2))], {"scales": (2.0, 2.0), "coordinate_transformation_mode":
                          "tf_crop_and_resize"}, KernelAttributeError, "roi"),
    ],
)  # fmt: skip
def test_resize_refuses_bad_arguments(specs, attrs, error, match):
    with pytest.raises(error, match=match):
        infer("resize", *specs, **attrs)
