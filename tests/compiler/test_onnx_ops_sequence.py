"""ONNX sequences, resolved at import time (ops/sequence.py): what a PyTorch export makes of
a list (split, insert, erase, index, length, concatenate or stack) against onnxruntime, on
values the device computes and on constants, and the refusals: a sequence as a graph input
or output, read where a tensor is, or passed out of a subgraph; positions out of range or
not known at import time."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper
from onnx_one_node import onnxruntime_outputs, run

from mnrt.compiler.onnx import InvalidModelError, UnsupportedModelError, from_onnx

RNG = np.random.default_rng(43)
FLOAT = TensorProto.FLOAT


def _model(nodes, inputs: dict[str, np.ndarray], outputs: list[str], inits=None):
    """A model of `nodes` (the first reads x through Relu's result `r`, a value the device
    computes) with graph inputs `inputs`, initializers `inits` and tensor outputs."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), *nodes], "t",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in inputs.items()],
        [helper.make_empty_tensor_value_info(n) for n in outputs],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _against_onnxruntime(ctx, model, feeds) -> None:
    want = onnxruntime_outputs(model, feeds)
    got = run(ctx, model, feeds)
    assert len(got) == len(want)
    for g, (name, w) in zip(got, want.items()):
        assert g.shape == w.shape, name
        np.testing.assert_array_equal(g, w, err_msg=name)


def _int(name: str, value: int | list[int]):
    return numpy_helper.from_array(np.array(value, np.int64), name)


@pytest.mark.parametrize(
    ("split", "attrs"),
    [(None, {}), (None, {"keepdims": 0}), (None, {"axis": -1, "keepdims": 0}),
     (2, {"axis": 1}), ([1, 3, 1], {"axis": 1}), ([0, 2, 0, 1], {"axis": 0})],
    ids=["ones", "ones-squeezed", "last-axis", "chunks", "sizes", "empty-pieces"],
)  # fmt: skip
def test_split_insert_erase_at_and_concatenate_match_onnxruntime(ctx, split, attrs):
    """Split x into a sequence, put y at the front, drop the second, then read the
    sequence every way: an element (counted from the end), its length, and the whole
    concatenated and stacked (where the elements' shapes allow)."""
    x = RNG.standard_normal((3, 5, 4)).astype(np.float32)
    inits = {} if split is None else {"split": np.array(split, np.int64)}
    nodes = [
        helper.make_node("SplitToSequence", ["r", *inits], ["s"], **attrs),
        helper.make_node("SequenceAt", ["s", "first"], ["e0"]),
        helper.make_node("Neg", ["e0"], ["y"]),
        helper.make_node("SequenceInsert", ["s", "y", "front"], ["s2"]),
        helper.make_node("SequenceErase", ["s2", "second"], ["s3"]),
        helper.make_node("SequenceAt", ["s3", "last"], ["at"]),
        helper.make_node("SequenceLength", ["s3"], ["n"]),
        helper.make_node("Add", ["n", "n"], ["twice"]),  # a constant the device need not hold
    ]
    outputs = ["at", "n", "twice", "cat"]
    # the pieces differ along the split axis only (squeezed, they are all alike)
    axis = attrs.get("axis", 0) % 3 if attrs.get("keepdims", 1) else 0
    nodes.append(helper.make_node("ConcatFromSequence", ["s3"], ["cat"], axis=axis))
    if split is None:
        stack = helper.make_node("ConcatFromSequence", ["s3"], ["stack"], axis=-1, new_axis=1)
        nodes.append(stack)
        outputs.append("stack")
    model = _model(nodes, {"x": x}, outputs, inits)
    model.graph.initializer.extend([_int("first", 0), _int("front", 0), _int("second", 1),
                                    _int("last", -1)])  # fmt: skip
    _against_onnxruntime(ctx, model, {"x": x})


def test_without_positions_insert_appends_and_erase_drops_the_last(ctx):
    x = RNG.standard_normal((3, 2)).astype(np.float32)
    nodes = [
        helper.make_node("SplitToSequence", ["r"], ["s"]),  # rows r0, r1, r2
        helper.make_node("Neg", ["r"], ["n"]),
        helper.make_node("SequenceInsert", ["s", "n"], ["s2"]),  # r0, r1, r2, -r
        helper.make_node("SequenceErase", ["s2"], ["s3"]),  # r0, r1, r2
        helper.make_node("SequenceErase", ["s3"], ["s4"]),  # r0, r1
        helper.make_node("SequenceInsert", ["s4", "n"], ["s5"]),  # r0, r1, -r
        helper.make_node("ConcatFromSequence", ["s5"], ["y"], axis=0),
    ]
    model = _model(nodes, {"x": x}, ["y"])
    _against_onnxruntime(ctx, model, {"x": x})
    (y,) = run(ctx, model, {"x": x})
    r = np.maximum(x, 0)
    np.testing.assert_array_equal(y, np.concatenate([r[:2], -r]))


def test_a_sequence_of_constants_stays_constant(ctx):
    """A sequence of initializers split and indexed at import: an element can be a shape
    (Reshape needs it then), and pieces of unequal size stay pieces (ONNX's evaluator,
    which folds constants, gives a list a tensor cannot hold)."""
    x = RNG.standard_normal((2, 6)).astype(np.float32)
    w = RNG.standard_normal((3, 6)).astype(np.float32)
    nodes = [
        helper.make_node("SequenceConstruct", ["shape_a", "shape_b"], ["shapes"]),
        helper.make_node("SequenceAt", ["shapes", "one"], ["shape"]),
        helper.make_node("SplitToSequence", ["w", "sizes"], ["rows"]),
        helper.make_node("SequenceAt", ["rows", "one"], ["two_rows"]),
        helper.make_node("Add", ["r", "two_rows"], ["sum"]),
        helper.make_node("Reshape", ["sum", "shape"], ["y"]),
    ]
    inits = {"w": w, "shape_a": np.array([12], np.int64), "shape_b": np.array([3, 4], np.int64),
             "one": np.array(1, np.int64), "sizes": np.array([1, 2], np.int64)}  # fmt: skip
    model = _model(nodes, {"x": x}, ["y"], inits)
    _against_onnxruntime(ctx, model, {"x": x})
    graph = from_onnx(model, {"x": x})
    assert [n.op for n in graph.nodes].count("slice") == 0  # split of a constant: no kernel


def _refused(nodes, error, match, inputs=None, outputs=("y",), inits=None) -> None:
    x = np.ones((2, 3), np.float32)
    model = _model(nodes, {"x": x, **(inputs or {})}, list(outputs), inits)
    with pytest.raises(error, match=match):
        from_onnx(model)


def test_a_sequence_output_or_input_is_refused_by_name():
    split = helper.make_node("SplitToSequence", ["r"], ["y"])
    _refused([split], UnsupportedModelError, r"output 'y': 'y' is a sequence \(of 2 tensors\)")
    graph = helper.make_graph(
        [helper.make_node("SequenceAt", ["s", "i"], ["y"])], "t",
        [helper.make_tensor_sequence_value_info("s", FLOAT, [2]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [])],
        [helper.make_empty_tensor_value_info("y")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(UnsupportedModelError, match="input 's' is a sequence_type, not a tensor"):
        from_onnx(model)


def test_a_sequence_read_as_a_tensor_is_refused_by_name():
    nodes = [helper.make_node("SplitToSequence", ["r"], ["s"]),
             helper.make_node("Identity", ["s"], ["y"])]  # fmt: skip
    _refused(nodes, UnsupportedModelError, r"\(Identity\): 's' is a sequence \(of 2 tensors\)")


@pytest.mark.parametrize(
    ("node", "position", "match"),
    [("SequenceAt", 2, r"position 2 is outside a sequence of 2 tensors \(-2 to 1\)"),
     ("SequenceAt", -3, r"position -3 is outside a sequence of 2 tensors \(-2 to 1\)"),
     ("SequenceErase", 2, r"position 2 is outside a sequence of 2 tensors \(-2 to 1\)"),
     ("SequenceInsert", 3, r"position 3 is outside a sequence of 2 tensors \(-2 to 2\)")],
)  # fmt: skip
def test_positions_outside_the_sequence_are_invalid(node, position, match):
    at = helper.make_node(node, ["s", *(["r"] if node == "SequenceInsert" else []), "p"], ["t"])
    nodes = [helper.make_node("SplitToSequence", ["r"], ["s"]), at,
             helper.make_node("SequenceLength" if node != "SequenceAt" else "Identity", ["t"],
                              ["y"])]  # fmt: skip
    _refused(nodes, InvalidModelError, match, inits={"p": np.array(position, np.int64)})


def test_a_position_the_device_computes_is_refused_by_name():
    nodes = [helper.make_node("SplitToSequence", ["r"], ["s"]),
             helper.make_node("Cast", ["r"], ["f"], to=TensorProto.INT64),
             helper.make_node("ReduceMax", ["f"], ["p"], keepdims=0),
             helper.make_node("SequenceAt", ["s", "p"], ["y"])]  # fmt: skip
    _refused(nodes, UnsupportedModelError, r"position \('p'\) must be known at import time")


def _loop_body(scan_a_sequence: bool = False):
    """A Loop body that appends r * i to the carried sequence (PyTorch's list.append in a
    loop), and scans out that product, or the sequence itself (which a scan cannot)."""
    out = "again" if scan_a_sequence else "scaled"
    return helper.make_graph(
        [helper.make_node("Cast", ["i"], ["f"], to=FLOAT),
         helper.make_node("Mul", ["r", "f"], ["scaled"]),
         helper.make_node("SequenceInsert", ["seq_in", "scaled"], ["grown"]),
         helper.make_node("SequenceInsert", ["seq_in", "scaled"], ["again"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("seq_in", FLOAT, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("grown", FLOAT, None),
         helper.make_empty_tensor_value_info(out)],
    )  # fmt: skip


def test_a_loop_grows_a_sequence_as_a_list_in_a_loop(ctx):
    """Loop-carried sequences, and an If whose branch gives one: unrolled at import, the
    list holds each iteration's tensor, then stacked (as torch.stack of the list)."""
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    branch = helper.make_graph(
        [helper.make_node("SequenceEmpty", [], ["empty"], dtype=FLOAT)], "then", [],
        [helper.make_tensor_sequence_value_info("empty", FLOAT, None)],
    )  # fmt: skip
    nodes = [
        helper.make_node("If", ["yes"], ["start"], then_branch=branch, else_branch=branch),
        helper.make_node("Loop", ["trips", "", "start"], ["seq", "scans"], body=_loop_body()),
        helper.make_node("ConcatFromSequence", ["seq"], ["stacked"], axis=0, new_axis=1),
        helper.make_node("SequenceLength", ["seq"], ["n"]),
    ]
    inits = {"trips": np.array(4, np.int64), "yes": np.array(True)}
    model = _model(nodes, {"x": x}, ["stacked", "scans", "n"], inits)
    _against_onnxruntime(ctx, model, {"x": x})


def test_a_sequence_scanned_out_of_a_loop_is_refused_by_name():
    nodes = [helper.make_node("SequenceEmpty", [], ["start"], dtype=FLOAT),
             helper.make_node("Loop", ["trips", "", "start"], ["seq", "y"],
                              body=_loop_body(scan_a_sequence=True))]  # fmt: skip
    _refused(nodes, UnsupportedModelError, "a scan output that is a sequence",
             inits={"trips": np.array(2, np.int64)})  # fmt: skip


def _map_body(*outputs: str):
    """A SequenceMap body: (e, w, f) -> e * w + f, and e's shape when asked."""
    nodes = [helper.make_node("Mul", ["e", "w"], ["ew"]),
             helper.make_node("Add", ["ew", "f"], ["o"]),
             helper.make_node("Shape", ["e"], ["shape"])]  # fmt: skip
    types = {"o": FLOAT, "shape": TensorProto.INT64}
    return helper.make_graph(
        nodes, "map",
        [helper.make_tensor_value_info(n, FLOAT, None) for n in ("e", "w", "f")],
        [helper.make_tensor_value_info(n, types[n], None) for n in outputs],
    )  # fmt: skip


def test_sequence_map_imports_its_body_once_per_element(ctx):
    """Over the pieces of a split, with a tensor every element takes and a sequence whose
    elements go with them; its sequences read as any other (the node suite's cases take
    sequences as graph inputs, which the device cannot)."""
    x = RNG.standard_normal((3, 2, 4)).astype(np.float32)
    w = RNG.standard_normal((2, 4)).astype(np.float32)
    nodes = [
        helper.make_node("SplitToSequence", ["r"], ["pieces"], keepdims=0),
        helper.make_node("SplitToSequence", ["x"], ["raw"], keepdims=0),
        helper.make_node("SequenceMap", ["pieces", "w", "raw"], ["mapped", "shapes"],
                         body=_map_body("o", "shape")),
        helper.make_node("ConcatFromSequence", ["mapped"], ["y"], axis=0, new_axis=1),
        helper.make_node("SequenceAt", ["shapes", "last"], ["shape"]),
    ]  # fmt: skip
    inits = {"w": w, "last": np.array(-1, np.int64)}
    _against_onnxruntime(ctx, _model(nodes, {"x": x}, ["y", "shape"], inits), {"x": x})


def test_sequence_map_over_sequences_of_other_lengths_is_invalid():
    nodes = [
        helper.make_node("SplitToSequence", ["r"], ["pieces"], keepdims=0),
        helper.make_node("SplitToSequence", ["r", "one"], ["columns"], axis=1),
        helper.make_node("SequenceMap", ["pieces", "r", "columns"], ["mapped"],
                         body=_map_body("o")),
        helper.make_node("SequenceLength", ["mapped"], ["y"]),
    ]  # fmt: skip
    _refused(nodes, InvalidModelError, "'columns' holds 3 tensors, the input sequence 2",
             inits={"one": np.array(1, np.int64)})  # fmt: skip
