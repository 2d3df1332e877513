"""Resize and Upsample: a resize along one axis is a constant matrix (each output element a
fixed weighted sum of input elements: one-hot for nearest, two taps for linear, four for
cubic), so it is computed at import time by running ONNX's reference op on an identity, and
applied on the device as a gather (nearest: exact) or a GEMM (linear, cubic). Axes are
resized one after another, as the ops are separable. Two forms are no such matrix, and
run as the device's resize kernel instead: tf_crop_and_resize (positions outside the roi
take extrapolation_value, a constant rather than a weighted sum) and sizes kept to the
aspect ratio (every axis's matrix depends on the scale that all of them decide)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ....device.kernels import lookup
from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid, Unsupported, axis_index


def _optional_const(cx: Ctx, node: Any, index: int, what: str) -> np.ndarray | None:
    if len(node.input) > index and node.input[index]:
        value = np.asarray(cx.const(node.input[index], what))
        return value if value.size else None
    return None


def _targets(cx: Ctx, node: Any, at: Attrs, shape: tuple[int, ...]) -> list[tuple]:
    """(axis, "scales" or "sizes", value) for every axis the op changes."""
    rank = len(shape)
    if node.op_type == "Upsample" or cx.opset < 11:
        scales = at.get("scales") if cx.opset < 9 else cx.const(node.input[1], "scales")
        scales, sizes = np.asarray(scales, np.float64).reshape(-1), None
    else:
        scales = _optional_const(cx, node, 2, "scales")
        sizes = _optional_const(cx, node, 3, "sizes")
    axes = [axis_index(a, rank) for a in (at.get("axes") or range(rank))]
    values = scales if scales is not None else sizes
    if values is None or len(values) != len(axes):
        raise Invalid(f"{node.op_type} needs one scale or size per axis of {axes}")
    kind = "scales" if scales is not None else "sizes"
    changed = [v != 1.0 if kind == "scales" else int(v) != shape[a] for a, v in zip(axes, values)]
    return [(a, kind, float(v)) for a, v, c in zip(axes, values, changed) if c]


def _matrix(cx: Ctx, node: Any, at: Attrs, n: int, kind: str, value: float) -> np.ndarray:
    """The (out, n) matrix of the op resizing one axis of length n: ONNX's reference op run
    on an n x n identity, resized along its first axis only."""
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    attrs = {k: v for k, v in at.values.items() if k not in ("axes", "scales")}
    legacy = node.op_type == "Upsample" or cx.opset < 11
    if legacy and cx.opset < 9:
        attrs["scales"] = [value, 1.0]
        inputs, inits = ["x"], []
    elif legacy:
        inputs, inits = (
            ["x", "s"],
            [numpy_helper.from_array(np.array([value, 1.0], np.float32), "s")],
        )
    elif kind == "scales":
        s = numpy_helper.from_array(np.array([value, 1.0], np.float32), "s")
        inputs, inits = ["x", "", "s"], [s]
    else:
        s = numpy_helper.from_array(np.array([int(value), n], np.int64), "s")
        inputs, inits = ["x", "", "", "s"], [s]
    probe = helper.make_node(node.op_type, inputs, ["y"], **attrs)
    graph = helper.make_graph(
        [probe], "probe", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [n, n])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)], initializer=inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=cx.opsets)
    try:
        (m,) = ReferenceEvaluator(model).run(None, {"x": np.eye(n)})
    except Exception as e:  # the probe is ours, so what fails is the node's attributes
        raise Invalid(
            f"ONNX's reference {node.op_type} cannot resize by {kind} {value:g} with these "
            f"attributes ({type(e).__name__}: {e})"
        ) from None
    return np.asarray(m)


def _check_modes(at: Attrs) -> None:
    """The interpolation, coordinate and rounding modes are ONNX's, which the device's
    resize kernel lists: another is the model's error (ONNX's reference op, which makes the
    matrices, fails on it with a RuntimeError)."""
    accepted = lookup("resize").accepted_attrs
    for name in ("mode", "coordinate_transformation_mode", "nearest_mode"):
        value = at.get(name, accepted[name].default)
        if value not in accepted[name].choices:
            raise Invalid(f"{name}={value!r} is not one of {', '.join(accepted[name].choices)}")


def _along(cx: Ctx, x: Symbol, axis: int, m: np.ndarray) -> Symbol:
    """x with `axis` replaced by the rows of m: a gather where every row of m is one-hot
    (nearest: copies, exactly), else a GEMM over that axis."""
    onehot = np.all((m == 0) | (m == 1)) and np.all(m.sum(axis=1) == 1)
    if onehot:
        idx = cx.param(np.argmax(m, axis=1).astype(np.int32))
        return cx.op("gather", x, idx, axis=axis)
    if not cx.dtype(x).is_float:
        raise Unsupported(f"interpolating {cx.dtype(x).name} values (only nearest copies)")
    shape = cx.shape(x)
    rank = len(shape)
    perm = [i for i in range(rank) if i != axis] + [axis]
    moved = cx.op("transpose", x, perm=perm) if axis != rank - 1 else x
    lead = [shape[i] for i in perm[:-1]]
    flat = cx.reshape(moved, (int(np.prod(lead)), shape[axis]))
    y = cx.op("gemm", flat, cx.param(np.ascontiguousarray(m.T), like=x))
    y = cx.reshape(y, (*lead, m.shape[0]))
    back = list(np.argsort(perm))
    return cx.op("transpose", y, perm=back) if axis != rank - 1 else y


def _resize_kernel(cx: Ctx, node: Any, at: Attrs, x: Symbol, policy: str) -> Symbol:
    """The device's resize kernel, with the full-rank scales, sizes and roi it takes (see
    device/kernels/resize.py): a policy other than stretch scales every axis in `axes` by
    the least (not_larger) or greatest (not_smaller) of their size ratios, and rounds each
    size half up, as ONNX's reference does."""
    shape = cx.shape(x)
    rank = len(shape)
    axes = [axis_index(a, rank) for a in (at.get("axes") or range(rank))]
    if len(set(axes)) != len(axes):
        raise Invalid(f"axes {at.get('axes')} name an axis twice")
    scales = _optional_const(cx, node, 2, "scales")
    sizes = _optional_const(cx, node, 3, "sizes")
    given = scales if scales is not None else sizes
    if given is None or given.size != len(axes):
        raise Invalid(f"Resize needs one scale or size per axis of {axes}")
    full_scales: list[float] = []
    full_sizes: list[int] = []
    if scales is not None:
        full_scales = [1.0] * rank
        for a, v in zip(axes, scales.tolist()):
            full_scales[a] = float(v)
    elif policy == "stretch":
        full_sizes = list(shape)
        for a, v in zip(axes, sizes.tolist()):
            full_sizes[a] = int(v)
    else:
        if any(shape[a] == 0 for a in axes):
            raise Invalid(f"keep_aspect_ratio_policy={policy} with an empty axis among {axes}")
        ratios = [int(v) / shape[a] for a, v in zip(axes, sizes.tolist())]
        scale = min(ratios) if policy == "not_larger" else max(ratios)
        full_scales = [scale if a in axes else 1.0 for a in range(rank)]
        full_sizes = [int(scale * n + 0.5) if a in axes else n for a, n in enumerate(shape)]
    roi: list[float] = []
    if at.get("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize":
        given_roi = _optional_const(cx, node, 1, "roi")
        if given_roi is None or given_roi.size != 2 * len(axes):
            raise Invalid(
                f"tf_crop_and_resize needs roi of {2 * len(axes)} values (starts, then ends, "
                f"of axes {axes})"
            )
        starts, ends = [0.0] * rank, [1.0] * rank
        for i, a in enumerate(axes):
            starts[a], ends[a] = float(given_roi[i]), float(given_roi[len(axes) + i])
        roi = starts + ends
    attrs = {
        "mode": at.get("mode", "nearest"),
        "coordinate_transformation_mode": at.get("coordinate_transformation_mode", "half_pixel"),
        "nearest_mode": at.get("nearest_mode", "round_prefer_floor"),
        "cubic_coeff_a": float(at.get("cubic_coeff_a", -0.75)),
        "exclude_outside": bool(at.get("exclude_outside", 0)),
        "extrapolation_value": float(at.get("extrapolation_value", 0.0)),
        "antialias": bool(at.get("antialias", 0)),
    }
    return cx.op("resize", x, scales=full_scales, sizes=full_sizes, roi=roi, **attrs)


def resize(cx: Ctx, node: Any, at: Attrs) -> list:
    """Resize (and Upsample): by constant matrices where they express it, else (crop and
    resize, a kept aspect ratio) by the device's resize kernel."""
    x = cx.sym(node.input[0])
    shape = cx.shape(x)
    _check_modes(at)
    policy = at.get("keep_aspect_ratio_policy", "stretch")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise Invalid(f"keep_aspect_ratio_policy={policy} (stretch, not_larger or not_smaller)")
    crop = at.get("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize"
    if crop or policy != "stretch":
        return [_resize_kernel(cx, node, at, x, policy)]
    # The probe of `_matrix` takes these as the node has them (`_check_modes` read the modes).
    for name in ("cubic_coeff_a", "exclude_outside", "extrapolation_value", "antialias"):
        at.get(name)
    y = x
    for axis, kind, value in _targets(cx, node, at, shape):
        y = _along(cx, y, axis, _matrix(cx, node, at, shape[axis], kind, value))
    return [y if y != x else cx.op("copy", x)]
