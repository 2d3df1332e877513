"""ONNX exporters of the kernels that are one ONNX op with attributes of their own, or a
few ops where the op arrives after opset 18 or means less than the kernel (onnx_export
holds the registry that gathers these with the rest).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..device import dtypes as dt
from ..device.kernels import Out, lookup
from .ir import Node
from .onnx import names
from .onnx_emit import OPSET, Emitter, ExportError


def _value(v: Any) -> Any:
    """A kernel attribute as an ONNX attribute: bools are ints, tuples lists."""
    if isinstance(v, bool):
        return int(v)
    return list(v) if isinstance(v, tuple) else v


def _named(op: str, **attrs: str) -> Callable[[Emitter, Node], None]:
    """A kernel that is one ONNX op of the same operands; `attrs` maps each ONNX attribute
    to the kernel attribute it takes its value from."""

    def export(out: Emitter, n: Node) -> None:
        out.add(op, n.inputs, n.outputs, **{a: _value(n.attrs[k]) for a, k in attrs.items()})

    return export


def _np(dtype: dt.DType) -> np.dtype:
    """The numpy type of a value's ONNX element type (MN-Core half: IEEE float16)."""
    return np.dtype(np.float16) if dtype.is_half else np.dtype(dtype.read_dtype)


def _like(out: Emitter, name: str, value: Any) -> str:
    """A constant of value `name`'s element type."""
    return out.const(np.asarray(value).astype(_np(out.dtypes[name])))


def _ints(out: Emitter, values: Any) -> str:
    return out.const(np.array(values, np.int64))


def _device(op: str, attrs: Mapping[str, Any], x: np.ndarray, dtype: dt.DType) -> np.ndarray:
    """What kernel `op` computes of a few host values: where an exporter needs a constant
    as the device makes it (a clip's bounds, a fill's value), the kernel says, so the
    conversion rules stay in the kernel alone."""
    kdef = lookup(op)
    ins = [] if not kdef.inputs else [x.astype(dtype.compute)]
    return np.asarray(kdef.compute(ins, kdef.check_attrs(attrs), [Out(x.shape, dtype, None)])[0])


def _int64(out: Emitter, name: str) -> str:
    """An integer value as int64: index operands, which ONNX's ScatterND, GatherND and
    ReverseSequence take only so (the device takes int32 too; onnxruntime's OneHot has no
    int32 indices with int64 depth), and the integers of a formula."""
    if out.dtypes[name] is dt.INT64:
        return name
    t = out.temp()
    out.add("Cast", [name], [t], to=names.onnx_code(dt.INT64))
    return t


def _rsqrt(out: Emitter, n: Node) -> None:
    """ONNX has no Rsqrt: 1 / sqrt(x), as the kernel computes it."""
    root = out.temp()
    out.add("Sqrt", n.inputs, [root])
    out.add("Reciprocal", [root], n.outputs)


def _rmsnorm(out: Emitter, n: Node) -> None:
    """RMSNormalization arrives in opset 23: written as x / sqrt(mean(x^2) + epsilon) * scale."""
    x, *scale = n.inputs
    rank = len(out.shapes[x])
    axes = list(range(n.attrs["axis"] % rank if rank else 0, rank))
    sq, ms, shifted, root = out.temp(), out.temp(), out.temp(), out.temp()
    out.add("Mul", [x, x], [sq])
    out.add("ReduceMean", [sq, _ints(out, axes)], [ms], keepdims=1)
    out.add("Add", [ms, _like(out, x, n.attrs["epsilon"])], [shifted])
    out.add("Sqrt", [shifted], [root])
    if not scale:
        out.add("Div", [x, root], n.outputs)
        return
    y = out.temp()
    out.add("Div", [x, root], [y])
    out.add("Mul", [y, scale[0]], n.outputs)


def _clip(out: Emitter, n: Node) -> None:
    """Clip with both bounds as the kernel holds them in x's type (an integer's rounded
    inward and saturated): the kernel's own values at the type's extremes."""
    x = n.inputs[0]
    d = out.dtypes[x]
    ends = (
        np.array([-np.inf, np.inf])
        if d.is_float
        else np.array([np.iinfo(d.compute).min, np.iinfo(d.compute).max], d.compute)
    )
    lo, hi = _device("clip", n.attrs, ends, d)
    out.add("Clip", [x, _like(out, x, lo), _like(out, x, hi)], n.outputs)


def _mod(out: Emitter, n: Node) -> None:
    """ONNX Mod takes floats with fmod=1 only: Python's % of floats is C fmod moved by b
    where the remainder is nonzero and its sign is not b's (numpy's own rule). Integers
    modulo 0 give 0 here, and ONNX leaves that open (C's % traps, as it does for the
    minimum modulo -1): such divisors become 1 and their results 0, which x mod -1 is
    anyway. Integers go through int64 (exact; onnxruntime has Where of no narrower one),
    uint64 through a sum and a product, as no Where takes it."""
    a, b = n.inputs
    d = out.dtypes[a]
    fmod = n.attrs["fmod"]
    if d.is_float:
        r = out.temp()
        out.add("Mod", [a, b], [r] if not fmod else n.outputs, fmod=1)
        if fmod:
            return
        zero = _like(out, a, 0)
        nonzero, r_neg, b_neg, signs, move, moved = (out.temp() for _ in range(6))
        is_zero = out.temp()
        out.add("Equal", [r, zero], [is_zero])
        out.add("Not", [is_zero], [nonzero])
        out.add("Less", [r, zero], [r_neg])
        out.add("Less", [b, zero], [b_neg])
        out.add("Xor", [r_neg, b_neg], [signs])
        out.add("And", [nonzero, signs], [move])
        out.add("Add", [r, b], [moved])
        out.add("Where", [move, moved, r], n.outputs)
        return
    if d is dt.UINT64:
        is_zero, nonzero, bump, keep, safe, r = (out.temp() for _ in range(6))
        out.add("Equal", [b, _like(out, b, 0)], [is_zero])
        out.add("Not", [is_zero], [nonzero])
        out.add("Cast", [is_zero], [bump], to=names.onnx_code(d))
        out.add("Cast", [nonzero], [keep], to=names.onnx_code(d))
        out.add("Add", [b, bump], [safe])
        out.add("Mod", [a, safe], [r], fmod=int(fmod))
        out.add("Mul", [r, keep], n.outputs)
        return
    a64, b64 = _int64(out, a), _int64(out, b)
    trivial, safe, r = out.temp(), out.temp(), out.temp()
    out.add("Equal", [b64, _ints(out, 0)], [trivial])
    if d.is_signed:
        minus_one, either = out.temp(), out.temp()
        out.add("Equal", [b64, _ints(out, -1)], [minus_one])
        out.add("Or", [trivial, minus_one], [either])
        trivial = either
    out.add("Where", [trivial, _ints(out, 1), b64], [safe])
    out.add("Mod", [a64, safe], [r], fmod=int(fmod))
    if d is dt.INT64:
        out.add("Where", [trivial, _ints(out, 0), r], n.outputs)
        return
    y = out.temp()
    out.add("Where", [trivial, _ints(out, 0), r], [y])
    out.add("Cast", [y], n.outputs, to=names.onnx_code(d))


def _bitshift(out: Emitter, n: Node) -> None:
    """BitShift is defined on unsigned types and leaves shifts of the width or more open:
    here a goes to 64 bits (sign-extended), shifts are clamped to [0, width] (an amount
    below 0 or of the width shifts every bit out, as on the device) and done as two
    shifts of at most 32, and the low bits come back to a's type. A negative signed value
    shifts right as its complement does, complemented back (the sign fills in)."""
    a, b = n.inputs
    d = out.dtypes[a]
    width = 8 * d.itemsize
    u64, i64 = names.onnx_code(dt.UINT64), names.onnx_code(dt.INT64)
    b64, below, above, big, amount, first, second = (out.temp() for _ in range(7))
    out.add("Cast", [b], [b64], to=i64)
    out.add("Less", [b64, _ints(out, 0)], [below])
    out.add("GreaterOrEqual", [b64, _ints(out, width)], [above])
    out.add("Or", [below, above], [big])
    out.add("Where", [big, _ints(out, width), b64], [amount])
    out.add("Min", [amount, _ints(out, 32)], [first])
    out.add("Sub", [amount, first], [second])
    shifts = []
    for s in (first, second):
        t = out.temp()
        out.add("Cast", [s], [t], to=u64)
        shifts.append(t)
    arithmetic = d.is_signed and n.attrs["direction"] == "right"
    wide = out.temp()
    out.add("Cast", [a], [wide], to=i64 if d.is_signed else u64)
    if arithmetic:
        negative, flag, mask, flipped = out.temp(), out.temp(), out.temp(), out.temp()
        out.add("Less", [wide, _ints(out, 0)], [negative])
        out.add("Cast", [negative], [flag], to=i64)
        out.add("Neg", [flag], [mask])
        out.add("BitwiseXor", [wide, mask], [flipped])
        wide = flipped
    x = out.temp()
    out.add("Cast", [wide], [x], to=u64)
    for s in shifts:
        t = out.temp()
        out.add("BitShift", [x, s], [t], direction=n.attrs["direction"].upper())
        x = t
    if arithmetic:
        signed, back = out.temp(), out.temp()
        out.add("Cast", [x], [signed], to=i64)
        out.add("BitwiseXor", [signed, mask], [back])
        x = back
    out.add("Cast", [x], n.outputs, to=names.onnx_code(d))


def _cumsum(out: Emitter, n: Node) -> None:
    out.add("CumSum", [n.inputs[0], _ints(out, n.attrs["axis"])], n.outputs,
            exclusive=int(n.attrs["exclusive"]), reverse=int(n.attrs["reverse"]))  # fmt: skip


def _cumprod(out: Emitter, n: Node) -> None:
    """CumProd arrives in opset 24: written as a Scan whose state is the running product,
    the same multiplications in the same order as the device's. Exclusive emits each
    step's state before multiplying; reverse scans (and emits) from the end. The axis is
    moved to the front around it (ONNX's reference evaluator scans axis 0 only)."""
    x = n.inputs[0]
    shape, d = out.shapes[x], out.dtypes[x]
    axis = n.attrs["axis"] % len(shape)
    perm = [axis, *(i for i in range(len(shape)) if i != axis)]
    step = [shape[i] for i in perm[1:]]
    code = names.onnx_code(d)
    state, elem, product, emitted, final = (out.temp() for _ in range(5))
    body_out = state if n.attrs["exclusive"] else product
    h = out.helper
    body = h.make_graph(
        [h.make_node("Mul", [state, elem], [product]),
         h.make_node("Identity", [body_out], [emitted])],
        "cumprod_step",
        [h.make_tensor_value_info(state, code, step), h.make_tensor_value_info(elem, code, step)],
        [h.make_tensor_value_info(product, code, step),
         h.make_tensor_value_info(emitted, code, step)],
    )  # fmt: skip
    direction = [int(n.attrs["reverse"])]
    front, scanned = (x, n.outputs[0]) if axis == 0 else (out.temp(), out.temp())
    if axis:
        out.add("Transpose", [x], [front], perm=perm)
    out.add("Scan", [_like(out, x, np.ones(step)), front], [final, scanned], body=body,
            num_scan_inputs=1, scan_input_directions=direction,
            scan_output_directions=direction)  # fmt: skip
    if axis:
        out.add("Transpose", [scanned], n.outputs, perm=[int(i) for i in np.argsort(perm)])


def _space_to_depth(out: Emitter, n: Node) -> None:
    """SpaceToDepth has no mode (it is DCR): CRD is written as its reshape and transpose."""
    if n.attrs["mode"] == "DCR":
        out.add("SpaceToDepth", n.inputs, n.outputs, blocksize=n.attrs["blocksize"])
        return
    b = n.attrs["blocksize"]
    size, c, h, w = out.shapes[n.inputs[0]]
    tiles, moved = out.temp(), out.temp()
    out.add("Reshape", [n.inputs[0], _ints(out, [size, c, h // b, b, w // b, b])], [tiles])
    out.add("Transpose", [tiles], [moved], perm=[0, 1, 3, 5, 2, 4])
    out.add("Reshape", [moved, _ints(out, out.shapes[n.outputs[0]])], n.outputs)


def _eye_like(out: Emitter, n: Node) -> None:
    attrs = {"k": n.attrs["k"]}
    if n.attrs["dtype"]:
        attrs["dtype"] = names.onnx_code(dt.dtype(n.attrs["dtype"]))
    out.add("EyeLike", n.inputs, n.outputs, **attrs)


def _fill(out: Emitter, n: Node) -> None:
    """ConstantOfShape of the value the kernel converts its attribute to."""
    d = dt.dtype(n.attrs["dtype"])
    value = _device("fill", {**n.attrs, "shape": ()}, np.zeros(()), d).astype(_np(d))
    out.add("ConstantOfShape", [_ints(out, n.attrs["shape"])], n.outputs,
            value=out.numpy_helper.from_array(value.reshape(1)))  # fmt: skip


def _range(out: Emitter, n: Node) -> None:
    """ONNX Range adds delta repeatedly; the device computes start + i * delta (integers
    in int64, floats in float64, rounded once): written as that formula over Range's
    positions 0..n-1, which are exact in int64."""
    y = n.outputs[0]
    d = out.dtypes[y]
    count = out.shapes[y][0]
    where, wide, scaled, shifted = out.temp(), out.temp(), out.temp(), out.temp()
    out.add("Range", [_ints(out, 0), _ints(out, count), _ints(out, 1)], [where])
    kind = np.int64 if d.is_integer else np.float64
    start, delta = (out.const(np.array(n.attrs[k]).astype(kind)) for k in ("start", "delta"))
    if d.is_integer:
        wide = where
    else:
        out.add("Cast", [where], [wide], to=names.onnx_code(dt.dtype("double")))
    out.add("Mul", [wide, delta], [scaled])
    out.add("Add", [scaled, start], [shifted])
    out.add("Cast", [shifted], n.outputs, to=names.onnx_code(d))


def _pad(out: Emitter, n: Node) -> None:
    """Negative pads crop first (a Slice), then the rest pads: ONNX Pad for 'constant',
    'reflect' and 'edge'; 'wrap' arrives in opset 19, so it is a Gather per axis of the
    positions (i - begin) mod length, which continue from the other side."""
    x = n.inputs[0]
    shape, pads = out.shapes[x], n.attrs["pads"]
    rank = len(shape)
    begin, end = pads[:rank], pads[rank:]
    if any(p < 0 for p in pads):
        cropped = out.temp()
        starts = [max(-p, 0) for p in begin]
        ends = [s - max(-p, 0) for s, p in zip(shape, end, strict=True)]
        out.add("Slice", [x, _ints(out, starts), _ints(out, ends), _ints(out, range(rank))],
                [cropped])  # fmt: skip
        x = cropped
    sizes = [s - max(-b, 0) - max(-e, 0) for s, b, e in zip(shape, begin, end, strict=True)]
    widths = [max(p, 0) for p in pads]
    mode = n.attrs["mode"]
    if not any(widths):
        out.add("Identity", [x], n.outputs)
    elif mode == "wrap":
        todo = [a for a in range(rank) if widths[a] or widths[a + rank]]
        for a in todo:
            y = n.outputs[0] if a == todo[-1] else out.temp()
            where = np.arange(-widths[a], sizes[a] + widths[a + rank]) % sizes[a]
            out.add("Gather", [x, _ints(out, where)], [y], axis=a)
            x = y
    else:
        inputs = [x, _ints(out, widths)]
        if mode == "constant":
            inputs.append(_like(out, n.inputs[0], n.attrs["value"]))
        out.add("Pad", inputs, n.outputs, mode=mode)


def _roll(out: Emitter, n: Node) -> None:
    """A Gather per axis of the positions (i - shift) mod length."""
    x, shape = n.inputs[0], out.shapes[n.inputs[0]]
    moves = list(zip(n.attrs["shifts"], n.attrs["axes"], strict=True))
    for k, (shift, axis) in enumerate(moves):
        y = n.outputs[0] if k == len(moves) - 1 else out.temp()
        where = (np.arange(shape[axis]) - shift) % shape[axis]
        out.add("Gather", [x, _ints(out, where)], [y], axis=axis % len(shape))
        x = y


def _resize(out: Emitter, n: Node) -> None:
    """Resize with the output sizes where the scales are their ratios, else with the
    scales, which ONNX holds as float32: where those do not give the kernel's output sizes
    there is no opset-18 form, and the node is refused by name. half_pixel_symmetric
    arrives in opset 19; with scales that are the sizes' ratios it is half_pixel."""
    a = n.attrs
    x = n.inputs[0]
    shape = out.shapes[x]
    sizes = list(out.shapes[n.outputs[0]])
    scales = list(a["scales"]) or [z / m for z, m in zip(sizes, shape, strict=True)]
    ratios = all(s * m == z for s, m, z in zip(scales, shape, sizes, strict=True))
    single = np.array(scales, np.float32)
    transform = a["coordinate_transformation_mode"]
    if transform == "half_pixel_symmetric":
        if not ratios:
            raise ExportError(
                f"resize node '{n.name}': coordinate_transformation_mode "
                "'half_pixel_symmetric' with scales that are not the sizes' ratios has no "
                f"ONNX form before opset 19 (this exporter writes opset {OPSET})"
            )
        transform = "half_pixel"
    if not ratios and list((single.astype(np.float64) * shape).astype(np.int64)) != sizes:
        raise ExportError(
            f"resize node '{n.name}': scales {scales} as float32 (all ONNX Resize takes) do "
            f"not give its output sizes {sizes} of x {list(shape)}"
        )
    roi = out.const(np.array(a["roi"], np.float32)) if transform == "tf_crop_and_resize" else ""
    inputs = [x, roi, "", _ints(out, sizes)] if ratios else [x, roi, out.const(single)]
    out.add("Resize", inputs, n.outputs, mode=a["mode"],
            coordinate_transformation_mode=transform, nearest_mode=a["nearest_mode"],
            cubic_coeff_a=a["cubic_coeff_a"], exclude_outside=int(a["exclude_outside"]),
            extrapolation_value=a["extrapolation_value"],
            antialias=int(a["antialias"]))  # fmt: skip


def _grid_sample(out: Emitter, n: Node) -> None:
    """GridSample as opset 16 has it: 2-D spatial only, with the modes named bilinear and
    bicubic; the N-D op and the names linear and cubic arrive in opset 20."""
    rank = len(out.shapes[n.inputs[0]])
    if rank != 4:
        raise ExportError(
            f"grid_sample node '{n.name}': {rank - 2}-D sampling has no ONNX form before "
            f"opset 20 (this exporter writes opset {OPSET}, whose GridSample is 2-D only)"
        )
    mode = {"linear": "bilinear", "cubic": "bicubic"}.get(n.attrs["mode"], n.attrs["mode"])
    out.add("GridSample", n.inputs, n.outputs, mode=mode, padding_mode=n.attrs["padding_mode"],
            align_corners=int(n.attrs["align_corners"]))  # fmt: skip


def _slice(out: Emitter, n: Node) -> None:
    a = n.attrs
    inputs = [n.inputs[0], _ints(out, a["starts"]), _ints(out, a["ends"])]
    axes = list(a["axes"]) or list(range(len(a["starts"])))
    inputs.append(_ints(out, axes))
    if a["steps"]:
        inputs.append(_ints(out, a["steps"]))
    out.add("Slice", inputs, n.outputs)


def _topk(out: Emitter, n: Node) -> None:
    """TopK; the device's results are always in order, so they export as sorted (TopK
    leaves the order of unsorted results open)."""
    out.add("TopK", [n.inputs[0], _ints(out, [n.attrs["k"]])], n.outputs,
            axis=n.attrs["axis"], largest=int(n.attrs["largest"]), sorted=1)  # fmt: skip


def _with_ints(op: str, attr: str, **attrs: str) -> Callable[[Emitter, Node], None]:
    """An op whose kernel attribute `attr` is an int64 operand in ONNX (after the data)."""

    def export(out: Emitter, n: Node) -> None:
        operand = _ints(out, n.attrs[attr])
        out.add(op, [n.inputs[0], operand, *n.inputs[1:]], n.outputs,
                **{k: _value(n.attrs[v]) for k, v in attrs.items()})  # fmt: skip

    return export


def _index_last(op: str, **attrs: str) -> Callable[[Emitter, Node], None]:
    """An op whose index operand (the second) must be int64 in ONNX."""

    def export(out: Emitter, n: Node) -> None:
        data, idx, *rest = n.inputs
        out.add(op, [data, _int64(out, idx), *rest], n.outputs,
                **{k: _value(n.attrs[v]) for k, v in attrs.items()})  # fmt: skip

    return export


def _onehot(out: Emitter, n: Node) -> None:
    indices, values = n.inputs
    out.add("OneHot", [_int64(out, indices), _ints(out, [n.attrs["depth"]]), values], n.outputs,
            axis=n.attrs["axis"])  # fmt: skip


EXPORTERS: dict[str, Callable[[Emitter, Node], None]] = {
    "argmax": _named("ArgMax", axis="axis", keepdims="keepdims",
                     select_last_index="select_last_index"),
    "argmin": _named("ArgMin", axis="axis", keepdims="keepdims",
                     select_last_index="select_last_index"),
    "bitshift": _bitshift,
    "celu": _named("Celu", alpha="alpha"),
    "clip": _clip,
    "conv_transpose2d": _named("ConvTranspose", strides="stride", pads="padding",
                               output_padding="output_padding", dilations="dilation",
                               group="groups"),
    "cumprod": _cumprod,
    "cumsum": _cumsum,
    "depth_to_space": _named("DepthToSpace", blocksize="blocksize", mode="mode"),
    "einsum": _named("Einsum", equation="equation"),
    "elu": _named("Elu", alpha="alpha"),
    "eye_like": _eye_like,
    "fill": _fill,
    "gather_elements": _named("GatherElements", axis="axis"),
    "gather_nd": _index_last("GatherND", batch_dims="batch_dims"),
    "grid_sample": _grid_sample,
    "hard_sigmoid": _named("HardSigmoid", alpha="alpha", beta="beta"),
    "hard_swish": _named("HardSwish"),
    "isinf": _named("IsInf", detect_positive="detect_positive",
                    detect_negative="detect_negative"),
    "leaky_relu": _named("LeakyRelu", alpha="alpha"),
    "logical_not": _named("Not"),
    "mish": _named("Mish"),
    "mod": _mod,
    "onehot": _onehot,
    "pad": _pad,
    "roll": _roll,
    "prelu": _named("PRelu"),
    "range": _range,
    "resize": _resize,
    "reverse_sequence": _index_last("ReverseSequence", batch_axis="batch_axis",
                                    time_axis="time_axis"),
    "rmsnorm": _rmsnorm,
    "rsqrt": _rsqrt,
    "scatter_elements": _named("ScatterElements", axis="axis", reduction="reduction"),
    "scatter_nd": _index_last("ScatterND", reduction="reduction"),
    "selu": _named("Selu", alpha="alpha", gamma="gamma"),
    "shrink": _named("Shrink", lambd="lambd", bias="bias"),
    "slice": _slice,
    "space_to_depth": _space_to_depth,
    "thresholded_relu": _named("ThresholdedRelu", alpha="alpha"),
    "tile": _with_ints("Tile", "repeats"),
    "topk": _topk,
    "trilu": _with_ints("Trilu", "k", upper="upper"),
}  # fmt: skip

__all__ = ["EXPORTERS"]
