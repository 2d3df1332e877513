"""ONNX converters of position ops: ArgMax/ArgMin, TopK, Gather/Scatter families, OneHot,
CumSum/CumProd, ReverseSequence, Compress, NonZero/Unique/NonMaxSuppression."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import helper
from onnx_one_node import check, one_node_model, onnxruntime_outputs, run

import mnrt
from mnrt.compiler.onnx import UnsupportedModelError, from_onnx

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keepdims,last", [(0, 1, 0), (-1, 0, 1), (1, 1, 1)])
def test_arg_max_min(ctx, op, axis, keepdims, last):
    x = RNG.integers(0, 3, (3, 4, 2)).astype(np.float32)  # ties: select_last_index matters
    model = one_node_model(op, {"x": x}, ["y"], axis=axis, keepdims=keepdims,
                           select_last_index=last)  # fmt: skip
    (got,) = check(ctx, model, {"x": x})
    assert got.dtype == np.int64


@pytest.mark.parametrize("largest", [0, 1])
def test_top_k_with_constant_k(ctx, largest):
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    model = one_node_model("TopK", {"x": x}, ["v", "i"], inits={"k": np.array([2], np.int64)},
                           axis=-1, largest=largest)  # fmt: skip
    check(ctx, model, {"x": x})


def test_top_k_larger_than_its_axis_is_invalid(ctx):
    x = np.zeros((3, 5), np.float32)
    model = one_node_model("TopK", {"x": x}, ["v", "i"], inits={"k": np.array([6], np.int64)})
    with pytest.raises(mnrt.MnrtError, match="K=6"):
        run(ctx, model, {"x": x})


def test_gather_elements_and_gather_nd(ctx):
    data = RNG.standard_normal((3, 4)).astype(np.float32)
    idx = np.array([[0, -1, 2, 1], [2, 2, 0, 0]], np.int64)
    check(ctx, one_node_model("GatherElements", {"d": data, "i": idx}, ["y"], axis=0),
          {"d": data, "i": np.abs(idx)})  # fmt: skip
    nd = np.array([[[0, 1]], [[2, 3]]], np.int64)
    check(ctx, one_node_model("GatherND", {"d": data, "i": nd}, ["y"]), {"d": data, "i": nd})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_and_nd(ctx, reduction):
    data = RNG.standard_normal((3, 4)).astype(np.float32)
    idx = np.array([[1, 0, 3], [2, 3, 1], [0, 1, 2]], np.int64)
    upd = RNG.standard_normal((3, 3)).astype(np.float32)
    model = one_node_model("ScatterElements", {"d": data, "i": idx, "u": upd}, ["y"], axis=1,
                           reduction=reduction)  # fmt: skip
    check(ctx, model, {"d": data, "i": idx, "u": upd})
    nd = np.array([[2], [0]], np.int64)
    rows = RNG.standard_normal((2, 4)).astype(np.float32)
    model = one_node_model("ScatterND", {"d": data, "i": nd, "u": rows}, ["y"],
                           reduction=reduction)  # fmt: skip
    check(ctx, model, {"d": data, "i": nd, "u": rows})


def test_scatter_is_scatter_elements_at_opset_10(ctx):
    data = np.zeros((3, 3), np.float32)
    idx = np.array([[1, 0, 2], [0, 0, 0], [2, 2, 2]], np.int64)
    upd = np.array([[1.0, 2.0, 3.0], [4.0, 4.0, 4.0], [5.0, 6.0, 7.0]], np.float32)
    model = one_node_model("Scatter", {"d": data, "i": idx, "u": upd}, ["y"], axis=1, opset=10)
    (got,) = run(ctx, model, {"d": data, "i": idx, "u": upd})
    np.testing.assert_array_equal(got, [[2.0, 1.0, 3.0], [4.0, 0, 0], [0, 0, 7.0]])


def test_scatter_indices_narrower_than_data_are_refused_by_name(ctx):
    data = np.zeros((3, 3), np.float32)
    idx = np.array([[1, 0, 2]], np.int64)
    upd = np.array([[1.0, 2.0, 3.0]], np.float32)
    model = one_node_model("ScatterElements", {"d": data, "i": idx, "u": upd}, ["y"], axis=1)
    with pytest.raises(UnsupportedModelError, match=r"indices of shape \(1, 3\) smaller"):
        run(ctx, model, {"d": data, "i": idx, "u": upd})


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_with_constant_depth(ctx, axis):
    idx = np.array([[0, 3], [-1, 5]], np.int64)  # -1 counts from the end; 5 is out of range
    inits = {"depth": np.array(4, np.int64), "values": np.array([-1.0, 2.0], np.float32)}
    check(ctx, one_node_model("OneHot", {"i": idx}, ["y"], inits=inits, axis=axis), {"i": idx})


@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumulative(ctx, op, exclusive, reverse):
    x = RNG.integers(-3, 4, (2, 5)).astype(np.int32)
    model = one_node_model(op, {"x": x}, ["y"], inits={"axis": np.array(-1, np.int64)},
                           exclusive=exclusive, reverse=reverse)  # fmt: skip
    if op == "CumProd":  # the installed onnx's reference evaluator may predate CumProd
        (got,) = run(ctx, model, {"x": x})
        v = x[:, ::-1] if reverse else x
        want = np.cumprod(v, axis=1)
        if exclusive:
            want = np.concatenate([np.ones((2, 1), x.dtype), want[:, :-1]], axis=1)
        np.testing.assert_array_equal(got, want[:, ::-1] if reverse else want)
    else:
        check(ctx, model, {"x": x})


def test_reverse_sequence(ctx):
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    lens = np.array([4, 2, 1], np.int64)
    model = one_node_model("ReverseSequence", {"x": x, "l": lens}, ["y"], batch_axis=1,
                           time_axis=0)  # fmt: skip
    check(ctx, model, {"x": x, "l": lens})


@pytest.mark.parametrize("axis", [None, 0, -1])
def test_compress_with_a_constant_condition(ctx, axis):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    attrs = {} if axis is None else {"axis": axis}
    cond = np.array([True, False, True], bool)
    model = one_node_model("Compress", {"x": x}, ["y"], inits={"c": cond}, **attrs)
    check(ctx, model, {"x": x})


def _after(first: str, model):
    """`model` with its one node's first input computed by a `first` node from the graph
    input of that name: a value the device computes, unless an example input gives that
    graph input (then the value is folded as the input is)."""
    node = model.graph.node[0]
    src = node.input[0]
    node.input[0] = f"{src}_computed"
    model.graph.node.insert(0, helper.make_node(first, [src], [f"{src}_computed"]))
    return model


def _compress_of_not_c():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    c = np.array([False, True, False])
    model = one_node_model("Compress", {"x": x, "c": c}, ["y"], axis=0)
    model.graph.node[0].input[1] = "c_computed"  # Compress(input, Not(c))
    model.graph.node.insert(0, helper.make_node("Not", ["c"], ["c_computed"]))
    return model, x, c


def test_compress_with_a_condition_the_device_computes_is_refused_by_name():
    model, x, _ = _compress_of_not_c()
    with pytest.raises(UnsupportedModelError, match="condition"):
        from_onnx(model, {"x": x})  # no example for c: Not(c) is the device's


def test_a_condition_computed_from_an_example_input_is_folded(ctx):
    """Not(c) of an example c is folded with c, as c itself would be."""
    model, x, c = _compress_of_not_c()
    compiled = ctx.compile(model, {"x": x, "c": c})
    assert compiled.input_names == ["x"]
    np.testing.assert_array_equal(compiled({"x": x})["y"].cpu(), x[[0, 2]])


def test_a_condition_given_as_an_example_input_is_folded_and_kept(ctx):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    c = np.array([True, False, True])
    model = one_node_model("Compress", {"x": x, "c": c}, ["y"], axis=0)
    compiled = ctx.compile(model, {"x": x, "c": c})
    assert compiled.input_names == ["x"]
    np.testing.assert_array_equal(compiled({"x": x, "c": c})["y"].cpu(), x[[0, 2]])
    with pytest.raises(mnrt.InvalidArgumentError, match="'c' was folded into the program"):
        compiled({"x": x, "c": ~c})


@pytest.mark.parametrize("op,outs", [("NonZero", ["y"]), ("Unique", ["y", "i", "inv", "n"])])
def test_data_dependent_ops_are_refused_by_name_on_computed_values(op, outs):
    x = np.array([[1, 0], [3, 1]], np.int64)
    model = _after("Neg", one_node_model(op, {"x": x}, outs))
    with pytest.raises(UnsupportedModelError, match=f"input of {op}"):
        from_onnx(model)  # no example for x: Neg(x) is the device's


def test_data_dependent_op_of_an_example_input_is_computed_at_import(ctx):
    """NonZero of c * x, x given by an example input: folded with x, the output is a
    constant and the compiled model takes no input; without the example it is refused."""
    from onnx import numpy_helper

    c = np.array([[1, 0], [3, 1]], np.float32)
    nodes = [helper.make_node("Mul", ["c", "x"], ["m"]), helper.make_node("NonZero", ["m"], ["y"])]
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info("x", 1, [])],
        [helper.make_tensor_value_info("y", 7, None)], [numpy_helper.from_array(c, "c")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(UnsupportedModelError, match="input of NonZero"):
        from_onnx(model)
    compiled = ctx.compile(model, {"x": np.array(2.0, np.float32)})
    assert compiled.input_names == []
    np.testing.assert_array_equal(compiled({})["y"].cpu(), np.array(np.nonzero(c)))


def _non_max_suppression() -> tuple[object, dict[str, np.ndarray]]:
    """NonMaxSuppression over two batches of six boxes (corners; the second nearly the
    first) and two classes, IoU above 0.5 suppressed, scores below 0.2 dropped."""
    from onnx import numpy_helper

    rng = np.random.default_rng(7)
    boxes = rng.uniform(0, 1, (2, 6, 4)).astype(np.float32)
    boxes[..., 2:] = boxes[..., :2] + rng.uniform(0.2, 0.6, (2, 6, 2)).astype(np.float32)
    boxes[:, 1] = boxes[:, 0] + 0.01  # nearly the same box as the first
    scores = rng.uniform(0.3, 1, (2, 2, 6)).astype(np.float32)
    scores[0, 0, 5] = 0.1  # below the threshold
    limits = {"k": np.array([6], np.int64), "iou": np.array([0.5], np.float32)}
    limits["floor"] = np.array([0.2], np.float32)
    feeds = {"boxes": boxes, "scores": scores}
    node = helper.make_node("NonMaxSuppression", [*feeds, *limits], ["y"])
    graph = helper.make_graph(
        [node], "t",
        [helper.make_tensor_value_info(n, 1, a.shape) for n, a in feeds.items()],
        [helper.make_tensor_value_info("y", 7, None)],
        [numpy_helper.from_array(v, k) for k, v in limits.items()],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), feeds


def test_non_max_suppression_of_example_inputs_is_computed_at_import(ctx):
    """The boxes kept decide the output's shape: with boxes and scores given by example
    inputs the node is evaluated at import, as onnxruntime computes it."""
    model, feeds = _non_max_suppression()
    want = onnxruntime_outputs(model, feeds)["y"]
    assert 0 < len(want) <= 2 * 2 * 5  # in each batch and class, box 0 or 1 suppressed
    compiled = ctx.compile(model, feeds)
    np.testing.assert_array_equal(compiled({})["y"].cpu(), want)


def test_non_max_suppression_of_computed_scores_is_refused_by_name():
    model, _ = _non_max_suppression()
    model.graph.node[0].input[1] = "computed"
    model.graph.node.insert(0, helper.make_node("Sigmoid", ["scores"], ["computed"]))
    with pytest.raises(UnsupportedModelError, match="input of NonMaxSuppression"):
        from_onnx(model)


def test_range_takes_its_bounds_from_example_inputs(ctx):
    bounds = {"s": np.array(10, np.int32), "l": np.array(-2, np.int32), "d": np.array(-3, np.int32)}
    model = one_node_model("Range", bounds, ["y"])
    with pytest.raises(UnsupportedModelError, match="Range.s start, limit and delta"):
        from_onnx(model)
    graph = from_onnx(model, bounds)
    assert not graph.inputs  # the bounds are folded: the output is a constant
    got = ctx.compile(graph, {})({})["y"].cpu()
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [10, 7, 4, 1])


def test_int64_indices_are_checked_in_full_width(ctx):
    """int64 indices are held as int64: 2**32 + 1 is out of range (as int32 it was 1)."""
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    i = np.array([0, 1], np.int64)
    model = one_node_model("Gather", {"w": w, "i": i}, ["y"], axis=0)
    compiled = ctx.compile(model, {"w": w, "i": i})
    got = compiled({"w": w, "i": np.array([3, -1], np.int64)})["y"].cpu()
    np.testing.assert_array_equal(got, w[[3, 3]])
    with pytest.raises(mnrt.MnrtError, match="index 4294967297 is out of range"):
        compiled({"w": w, "i": np.array([2**32 + 1, 0], np.int64)})["y"].cpu()


def _cache_update(mode: str, indices: np.ndarray | None, inits: bool = False):
    """TensorScatter of a (2, 3, 6, 4) cache by a (2, 3, 2, 4) update along axis 2, and a
    numpy reference of it."""
    cache = RNG.standard_normal((2, 3, 6, 4)).astype(np.float32)
    update = RNG.standard_normal((2, 3, 2, 4)).astype(np.float32)
    feeds = {"cache": cache, "update": update}
    extra = {"w": indices} if indices is not None else {}
    model = one_node_model("TensorScatter", {**feeds, **({} if inits else extra)}, ["y"],
                           inits=extra if inits else None, opset=24, mode=mode)  # fmt: skip

    def want(w: np.ndarray | None) -> np.ndarray:
        out = cache.copy()
        for b in range(2):
            for s in range(2):
                at = (0 if w is None else int(w[b])) + s
                out[b, :, at % 6 if mode == "circular" else at] = update[b, :, s]
        return out

    return model, feeds, want


def test_tensor_scatter_writes_at_the_indices_each_call_gives(ctx):
    """write_indices as a graph input (a decode step's): the compiled model takes it and
    computes the positions on the device, so each call writes where its indices say."""
    for mode, calls in (("linear", ([0, 3], [4, 1])), ("circular", ([5, 2], [1, 5]))):
        model, feeds, want = _cache_update(mode, np.array(calls[0], np.int64))
        compiled = ctx.compile(model, {**feeds, "w": np.array(calls[0], np.int64)})
        assert "w" in compiled.input_names
        for w in calls:
            got = compiled({**feeds, "w": np.array(w, np.int64)})["y"].cpu()
            np.testing.assert_array_equal(got, want(w))


def test_tensor_scatter_of_known_or_no_indices_is_one_scatter(ctx):
    """write_indices an initializer (or absent, meaning 0): the positions are worked out at
    import, and the device runs one scatter_elements."""
    for w in (np.array([5, 3], np.int64), None):
        model, feeds, want = _cache_update("circular", w, inits=True)
        assert [n.op for n in from_onnx(model).nodes] == ["scatter_elements"]
        np.testing.assert_array_equal(run(ctx, model, feeds)[0], want(w))


@pytest.mark.parametrize(
    "image,block,attrs",
    [((5, 6), (2, 3), {}),
     ((6, 7), (3, 2), {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 2, 1]}),
     ((4, 3, 5), (2, 2, 3), {"pads": [0, 1, 1, 1, 0, 2]})],
)  # fmt: skip
def test_col2im_adds_overlapping_blocks_into_the_image(ctx, image, block, attrs):
    """Col2Im (PyTorch's fold), overlapping blocks added, padding cropped, in 2 and 3
    spatial dimensions: a fill, two transposes and one scatter_nd (a slice with pads)."""
    d = len(image)
    pads = attrs.get("pads", [0] * 2 * d)
    counts = [
        (size + pads[a] + pads[a + d] - (dil * (b - 1) + 1)) // s + 1
        for a, (size, b, s, dil) in enumerate(zip(image, block, attrs.get("strides", [1] * d),
                                                    attrs.get("dilations", [1] * d)))
    ]  # fmt: skip
    x = RNG.standard_normal((2, 3 * int(np.prod(block)), int(np.prod(counts)))).astype(np.float32)
    inits = {"image": np.array(image, np.int64), "block": np.array(block, np.int64)}
    model = one_node_model("Col2Im", {"x": x}, ["y"], inits=inits, opset=18, **attrs)
    ops = [n.op for n in from_onnx(model).nodes if n.op != "reshape"]
    assert ops == ["transpose", "fill", "scatter_nd", "transpose", *(["slice"] * any(pads))]
    check(ctx, model, {"x": x})
