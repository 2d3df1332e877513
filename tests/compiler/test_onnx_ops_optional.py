"""ONNX optionals, resolved at import time (ops/optional.py): an optional of a tensor or a
sequence, an empty one, one an If gives; and the refusals: an empty optional's element, or
an optional as a graph input or output. Against onnxruntime (ONNX's reference evaluator,
onnx 1.23, gets optionals wrong: OptionalGetElement gives a list, an If's empty optional
holds an element)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import TensorProto, helper
from onnx_one_node import run_both

import mnrt
from mnrt.compiler.onnx import InvalidModelError, UnsupportedModelError, from_onnx

X = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
FLOAT_TENSOR = helper.make_tensor_type_proto(TensorProto.FLOAT, None)


def _model(nodes, outputs: list[str], inputs=None):
    """Nodes after Relu of graph input x (r: a value the device computes)."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), *nodes], "t",
        inputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_empty_tensor_value_info(n) for n in outputs],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for name, w in want.items():
        assert got[name].shape == w.shape, name
        np.testing.assert_array_equal(got[name], w, err_msg=name)


def test_an_optional_of_a_tensor_holds_it(ctx):
    nodes = [helper.make_node("Optional", ["r"], ["o"]),
             helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("OptionalGetElement", ["o"], ["e"]),
             helper.make_node("Neg", ["e"], ["y"]),
             helper.make_node("OptionalHasElement", ["r"], ["tensor_has"])]  # fmt: skip
    model = _model(nodes, ["has", "y", "tensor_has"])
    unreliable = ["OptionalGetElement", "OptionalHasElement"]
    assert mnrt.compiler.onnx.evaluator_unreliable_ops(model) == unreliable
    got, want = run_both(ctx, model, {"x": X})
    _same(got, want)
    assert got["has"] and got["tensor_has"]


def test_an_empty_optional_and_one_of_a_sequence(ctx):
    """Empty (given by an If, as a scripted `None` is), and holding a sequence."""
    empty = helper.make_node("Optional", [], ["none"], type=FLOAT_TENSOR)
    branch = helper.make_graph([empty], "b", [], [helper.make_empty_tensor_value_info("none")])
    branch.output[0].type.optional_type.elem_type.CopyFrom(FLOAT_TENSOR)
    nodes = [helper.make_node("If", ["yes"], ["maybe"], then_branch=branch, else_branch=branch),
             helper.make_node("OptionalHasElement", ["maybe"], ["has"]),
             helper.make_node("OptionalHasElement", [], ["absent"]),
             helper.make_node("SplitToSequence", ["r"], ["s"]),
             helper.make_node("Optional", ["s"], ["o"]),
             helper.make_node("OptionalGetElement", ["o"], ["got"]),
             helper.make_node("SequenceLength", ["got"], ["n"])]  # fmt: skip
    model = _model(nodes, ["has", "absent", "n"])
    model.graph.initializer.append(helper.make_tensor("yes", TensorProto.BOOL, [], [True]))
    got, want = run_both(ctx, model, {"x": X})
    _same(got, want)
    assert not got["has"] and not got["absent"] and got["n"] == 2


def test_an_empty_optional_s_element_or_output_is_refused_by_name():
    empty = helper.make_node("Optional", [], ["o"], type=FLOAT_TENSOR)
    get = helper.make_node("OptionalGetElement", ["o"], ["y"])
    with pytest.raises(InvalidModelError, match="'o' is an empty optional: it has no element"):
        from_onnx(_model([empty, get], ["y"]))
    with pytest.raises(UnsupportedModelError, match="output 'o': 'o' is an empty optional"):
        from_onnx(_model([empty], ["o"]))


def test_an_optional_graph_input_is_refused_by_name():
    o = helper.make_value_info("o", helper.make_optional_type_proto(FLOAT_TENSOR))
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    with pytest.raises(UnsupportedModelError, match="input 'o' is a optional_type, not a tensor"):
        from_onnx(_model(nodes, ["y"], [x, o]))
