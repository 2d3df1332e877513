"""Bad input to the compiler: malformed ONNX models, unreadable files, wrong inputs, options
and output paths. Each is an MnrtError naming what is wrong (never a Python traceback, a
silently wrong result or a huge host allocation), and `mnrt compile` prints it on one line."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

import mnrt
from mnrt.runner.cli import cli

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from mnrt.compiler.onnx_frontend import (  # noqa: E402
    InvalidModelError,
    UnsupportedModelError,
    from_onnx,
)

F = TensorProto.FLOAT


def vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def make(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "bad", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def on_x(node, inits=(), shape=(2, 3, 4), opset=17):
    """A one-node model reading input x."""
    return make([node], [vi("x", list(shape))], [vi("y", None)], inits, opset)


def relu_model():
    return make([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3])])


def ints(*values):
    return np.array(values, np.int64)


# --- graph structure ---------------------------------------------------------------------------

STRUCTURE = {
    "undefined value": (
        [helper.make_node("Add", ["x", "nope"], ["y"], name="n")],
        [vi("y", None)],
        r"n \(Add\) reads 'nope', which no graph input",
    ),
    "cycle": (
        [
            helper.make_node("Add", ["x", "b"], ["a"], name="n"),
            helper.make_node("Relu", ["a"], ["b"]),
        ],
        [vi("a", None)],
        "topological order, without cycles",
    ),
    "value defined twice": (
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"], name="n")],
        [vi("y", None)],
        r"n \(Neg\) defines 'y' again",
    ),
    "output listed twice": (
        [helper.make_node("Relu", ["x"], ["y"])],
        [vi("y", None), vi("y", None)],
        "graph output 'y' is listed twice",
    ),
    "output never defined": (
        [helper.make_node("Relu", ["x"], ["y"])],
        [vi("z", None)],
        "graph output 'z' is not defined",
    ),
    "no outputs": ([helper.make_node("Relu", ["x"], ["y"])], [], "declares no graph outputs"),
}


@pytest.mark.parametrize("case", sorted(STRUCTURE))
def test_malformed_graph_structure_is_named(case):
    nodes, outputs, message = STRUCTURE[case]
    with pytest.raises(InvalidModelError, match=message):
        from_onnx(make(nodes, [vi("x", [2])], outputs))


def test_two_outputs_of_one_value_both_compile(ctx):
    """Identity makes two ONNX names of one value; both are outputs."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Identity", ["a"], ["b"])]
    model = make(nodes, [vi("x", [3])], [vi("a", [3]), vi("b", [3])])
    x = np.array([-1, 0, 2], np.float32)
    out = ctx.compile(model, {"x": x})({"x": x})
    np.testing.assert_array_equal(out["a"].cpu(), [0, 0, 2])
    np.testing.assert_array_equal(out["b"].cpu(), [0, 0, 2])


# --- nodes that break the ONNX spec --------------------------------------------------------------


def _conv3d():
    w = np.ones((2, 2, 3, 3, 3), np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="n")
    return on_x(node, [init("w", w)], shape=(1, 2, 2, 4, 4))


INVALID = {
    "required attribute missing": (
        lambda: on_x(helper.make_node("Concat", ["x", "x"], ["y"], name="n")),
        r"n \(Concat\): Required attribute 'axis' is missing",
    ),
    "attribute of the wrong type": (
        lambda: on_x(helper.make_node("Softmax", ["x"], ["y"], name="n", axis=1.5)),
        r"n \(Softmax\): Mismatched attribute type",
    ),
    "too few inputs": (
        lambda: on_x(helper.make_node("Add", ["x"], ["y"], name="n")),
        r"n \(Add\): .*input size 1 not in range",
    ),
    "axis out of range (old softmax)": (
        lambda: on_x(helper.make_node("Softmax", ["x"], ["y"], name="n", axis=5), opset=11),
        r"n \(Softmax\): axis 5 is out of range for rank 3",
    ),
    "flatten axis out of range": (
        lambda: on_x(helper.make_node("Flatten", ["x"], ["y"], name="n", axis=9)),
        r"n \(Flatten\): axis 9 is out of range",
    ),
    "reshape with two -1": (
        lambda: on_x(
            helper.make_node("Reshape", ["x", "s"], ["y"], name="n"), [init("s", ints(-1, -1))]
        ),
        "more than one -1",
    ),
    "reshape 0 past the input rank": (
        lambda: on_x(
            helper.make_node("Reshape", ["x", "s"], ["y"], name="n"),
            [init("s", ints(1, 1, 1, 0, 24))],
        ),
        "has only 3 dimensions",
    ),
    "split sizes not summing": (
        lambda: make(
            [helper.make_node("Split", ["x", "s"], ["a", "b"], name="n", axis=1)],
            [vi("x", [2, 3])],
            [vi("a", None), vi("b", None)],
            [init("s", ints(1, 1))],
        ),
        r"n \(Split\): split sizes \[1, 1\] .* add up to 3",
    ),
    "split into zero outputs": (
        lambda: make(
            [helper.make_node("Split", ["x"], ["a"], name="n", axis=0, num_outputs=0)],
            [vi("x", [2])],
            [vi("a", None)],
            opset=18,
        ),
        "num_outputs=0",
    ),
    "squeeze of a wide axis": (
        lambda: on_x(
            helper.make_node("Squeeze", ["x", "a"], ["y"], name="n"), [init("a", ints(1))]
        ),
        "removes only axes of size 1",
    ),
    "unsqueeze naming an axis twice": (
        lambda: on_x(
            helper.make_node("Unsqueeze", ["x", "a"], ["y"], name="n"), [init("a", ints(0, 0))]
        ),
        "name an axis twice",
    ),
    "pads of the wrong length": (
        lambda: on_x(helper.make_node("Pad", ["x", "p"], ["y"], name="n"), [init("p", ints(0, 1))]),
        r"pads \[0, 1\] has 2 values; padding 3 axes needs 6",
    ),
    "pool kernel of the wrong length": (
        lambda: on_x(
            helper.make_node("MaxPool", ["x"], ["y"], name="n", kernel_shape=[2]),
            shape=(1, 2, 4, 4),
        ),
        r"kernel_shape \[2\] has 1 values",
    ),
    "conv pads of the wrong length": (
        lambda: on_x(
            helper.make_node("Conv", ["x", "w"], ["y"], name="n", pads=[1]),
            [init("w", np.ones((4, 3, 3, 3), np.float32))],
            shape=(1, 3, 8, 8),
        ),
        r"pads \[1\] has 1 values",
    ),
    "conv3d kernel deeper than the input": (_conv3d, "does not fit the padded input depth 2"),
    "expand to a shape it does not broadcast to": (
        lambda: on_x(
            helper.make_node("Expand", ["x", "s"], ["y"], name="n"), [init("s", ints(5, 3, 4))]
        ),
        r"\(2, 3, 4\) does not broadcast to \(5, 3, 4\)",
    ),
    "constant gather index out of range": (
        lambda: on_x(
            helper.make_node("Gather", ["x", "i"], ["y"], name="n", axis=1), [init("i", ints(0, 7))]
        ),
        r"indices \[7\] are out of range for axis 1 of size 3",
    ),
    "conv transpose group not dividing the channels": (
        lambda: on_x(
            helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="n", group=3),
            [init("w", np.ones((2, 2, 3, 3), np.float32))],
            shape=(1, 2, 4, 4),
        ),
        "group=3 dividing C",
    ),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_node_is_named_with_its_op(case):
    build, message = INVALID[case]
    with pytest.raises(InvalidModelError, match=message) as info:
        from_onnx(build())
    assert "invalid node(s)" in str(info.value)


def test_invalid_and_unsupported_nodes_are_listed_together():
    nodes = [
        helper.make_node("Foo", ["x"], ["a"], name="foo"),
        helper.make_node("Concat", ["x", "x"], ["b"], name="cat"),
        helper.make_node("Hardmax", ["x"], ["c"], name="hm"),
    ]
    model = make(nodes, [vi("x", [2])], [vi("a", None), vi("b", None), vi("c", None)])
    with pytest.raises(InvalidModelError) as info:
        from_onnx(model)
    msg = str(info.value)
    assert "1 invalid and 2 unsupported node(s)" in msg
    assert "cat (Concat)" in msg and "foo (Foo)" in msg and "hm (Hardmax)" in msg


def test_a_subgraph_reading_an_outer_value_is_not_called_invalid():
    """ONNX's node checker cannot see outer scopes: nodes with subgraphs are not given to it."""
    then = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["t"])], "then", [], [vi("t", [2])]
    )
    node = helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=then)
    model = make([node], [vi("x", [2])], [vi("y", None)], [init("c", np.array(True))])
    with pytest.raises(UnsupportedModelError, match=r"if \(If\): op If is not supported"):
        from_onnx(model)


def test_a_non_tensor_input_is_listed_once():
    x = helper.make_tensor_sequence_value_info("x", F, [2])
    model = make([helper.make_node("Relu", ["x"], ["y"])], [x], [vi("y", None)])
    with pytest.raises(UnsupportedModelError, match="1 unsupported") as info:
        from_onnx(model)
    assert "input 'x' is a sequence_type, not a tensor" in str(info.value)


def test_an_opset_newer_than_onnx_knows_is_refused():
    model = on_x(helper.make_node("Relu", ["x"], ["y"]), opset=onnx.defs.onnx_opset_version() + 2)
    with pytest.raises(InvalidModelError, match="export the model with an opset"):
        from_onnx(model)


def test_a_huge_constant_is_refused_before_it_is_allocated():
    nodes = [
        helper.make_node("ConstantOfShape", ["s"], ["c"], name="big"),
        helper.make_node("Add", ["x", "c"], ["y"]),
    ]
    model = make(nodes, [vi("x", [1, 1])], [vi("y", None)], [init("s", ints(2**20, 2**20))])
    with pytest.raises(InvalidModelError, match=r"big \(ConstantOfShape\).*more than the device"):
        from_onnx(model)


def test_an_int64_constant_beyond_int32_is_not_wrapped():
    node = helper.make_node("Add", ["x", "w"], ["y"], name="n")
    model = make(
        [node], [vi("x", [2], TensorProto.INT64)], [vi("y", None)], [init("w", ints(2**40, 1))]
    )
    with pytest.raises(UnsupportedModelError, match="n \\(Add\\): .*outside int32"):
        from_onnx(model)


# --- files that are not (complete) ONNX models ---------------------------------------------------


def _external(tmp_path, location):
    model = make(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [vi("x", [2, 3])],
        [vi("y", None)],
        [init("w", np.ones((3, 4), np.float32))],
    )
    w = model.graph.initializer[0]
    onnx.external_data_helper.set_external_data(w, location=location)
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    return model.SerializeToString()


BAD_FILES = {
    "garbage": (lambda p: b"this is not a protobuf at all", "not a readable ONNX model"),
    "empty": (lambda p: b"", "is empty, not an ONNX model"),
    "truncated": (lambda p: relu_model().SerializeToString()[:20], "not a readable ONNX model"),
    "missing external data": (lambda p: _external(p, "gone.bin"), "gone.bin"),
    "external data outside": (lambda p: _external(p, "../../x.bin"), "outside the directory"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_an_unreadable_model_file_is_an_error(tmp_path, ctx, case):
    content, message = BAD_FILES[case]
    path = tmp_path / "m.onnx"
    path.write_bytes(content(tmp_path))
    with pytest.raises(InvalidModelError, match=message):
        ctx.compile(str(path), {"x": np.zeros((2, 3), np.float32)})
    r = CliRunner().invoke(cli, ["compile", str(path), "-o", str(tmp_path / "o.mnlb")])
    assert r.exit_code == 2 and r.output.startswith("mnrt: error: "), r.output
    assert len(r.output.splitlines()) == 1


def test_bad_initializers_are_named():
    short = TensorProto(name="w", data_type=F, dims=[3, 4], raw_data=b"\0" * 8)
    model = make(
        [helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", [3, 4])], [vi("y", None)], [short]
    )
    with pytest.raises(InvalidModelError, match=r"initializer 'w' \(dims \[3, 4\]\)"):
        from_onnx(model)
    negative = TensorProto(name="w", data_type=F, dims=[-1, 3], float_data=[1, 2, 3])
    model.graph.initializer[0].CopyFrom(negative)
    with pytest.raises(InvalidModelError, match="initializer 'w' has negative dims"):
        from_onnx(model)


# --- compile arguments ---------------------------------------------------------------------------

BAD_INPUTS = {
    "a list": ([np.zeros((2, 3), np.float32)], "must be a dict of input name -> array"),
    "ragged": ({"x": [[1.0, 2.0, 3.0], [4.0]]}, "input 'x' is not an array"),
    "a string": ({"x": "hello"}, "input 'x' is str of dtype <U5; pass a numeric"),
    "a non-str name": ({"x": np.zeros((2, 3), np.float32), 0: 1}, "unknown 0"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_compile_inputs(ctx, case):
    inputs, message = BAD_INPUTS[case]
    with pytest.raises(mnrt.InvalidArgumentError, match=message):
        ctx.compile(relu_model(), inputs)


def test_int64_input_data_beyond_int32_is_not_wrapped(ctx):
    node = helper.make_node("Gather", ["w", "i"], ["y"])
    model = make(
        [node],
        [vi("i", [2], TensorProto.INT64)],
        [vi("y", None)],
        [init("w", np.ones((4, 3), np.float32))],
    )
    i = ints(2**32 + 1, 0)  # would run as index 1
    with pytest.raises(mnrt.InvalidArgumentError, match="does not fit the device's int32"):
        ctx.compile(model, {"i": ints(0, 1)})({"i": i})


BAD_OPTIONS = {
    "not a dict": (["float_dtype"], "options must be a dict"),
    "fractional integer": ({"sram_budget": 1.7}, "sram_budget=1.7: expected an integer"),
    "bool for an integer": ({"sram_budget": True}, "sram_budget=True: expected an integer"),
    "budget beyond the chip": ({"sram_budget": 2**40}, "more than the chip's"),
    "annealing that never ends": (
        {"scheduler": "anneal", "sa_expected_run_iters": 10**12},
        "at most 1000000 annealing steps",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
def test_bad_option_values(ctx, case):
    options, message = BAD_OPTIONS[case]
    with pytest.raises(mnrt.InvalidArgumentError, match=message):
        ctx.compile(relu_model(), {"x": np.zeros((2, 3), np.float32)}, options=options)


def test_option_json_args_must_be_a_list(ctx, tmp_path):
    path = tmp_path / "o.json"
    path.write_text('{"args": 5}')
    with pytest.raises(mnrt.InvalidArgumentError, match="args must be a list"):
        ctx.compile(
            relu_model(), {"x": np.zeros((2, 3), np.float32)}, options={"option_json": str(path)}
        )


def test_output_paths_that_cannot_be_written(ctx, tmp_path):
    a_file = tmp_path / "f"
    a_file.write_text("x")
    x = {"x": np.zeros((2, 3), np.float32)}
    with pytest.raises(mnrt.InvalidArgumentError, match="codegen_dir .*cannot create it"):
        ctx.compile(relu_model(), x, codegen_dir=a_file)
    with pytest.raises(mnrt.InvalidArgumentError, match="codegen_dir takes a directory path"):
        ctx.compile(relu_model(), x, codegen_dir=5)
    with pytest.raises(mnrt.InvalidArgumentError, match="cache directory .*cannot create it"):
        ctx.compile(relu_model(), x, cache_options=mnrt.CacheOptions(a_file))
    with pytest.raises(mnrt.InvalidArgumentError, match=r"takes mnrt.CacheOptions\(directory\)"):
        ctx.compile(relu_model(), x, cache_options=str(tmp_path))
    with pytest.raises(mnrt.InvalidArgumentError, match="out_onnx .*cannot write it"):
        ctx.compile(relu_model(), x, options={"out_onnx": str(tmp_path)})


# --- mnrt compile --------------------------------------------------------------------------------


def _cli(tmp_path, *args):
    model = tmp_path / "m.onnx"
    if not model.exists():
        onnx.save(relu_model(), model)
    return CliRunner().invoke(cli, ["compile", str(model), "-o", str(tmp_path / "o.mnlb"), *args])


def test_cli_refuses_an_npz_archive_and_a_twice_given_input(tmp_path):
    np.savez(tmp_path / "x.npz", x=np.zeros((2, 3), np.float32))
    r = _cli(tmp_path, "--input", f"x={tmp_path / 'x.npz'}")
    assert r.exit_code == 2 and "is an .npz archive" in r.output, r.output
    np.save(tmp_path / "x.npy", np.zeros((2, 3), np.float32))
    r = _cli(tmp_path, "--input", "x=random", "--input", f"x={tmp_path / 'x.npy'}")
    assert r.exit_code == 2 and "input x is given twice" in r.output, r.output


def test_cli_never_unpickles_an_input(tmp_path):
    np.save(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    r = _cli(tmp_path, "--input", f"x={tmp_path / 'o.npy'}")
    assert r.exit_code == 2 and "allow_pickle=False" in r.output, r.output


def test_cli_does_not_make_random_data_the_device_could_not_hold(tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(
        make([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2**40, 3])], [vi("y", None)]),
        model,
    )
    r = _cli(tmp_path)
    assert r.exit_code == 3 and "input x of shape (1099511627776, 3) needs" in r.output, r.output


def test_cli_reports_an_unwritable_codegen_dir_on_one_line(tmp_path):
    (tmp_path / "f").write_text("x")
    r = _cli(tmp_path, "--codegen-dir", str(tmp_path / "f" / "sub"))
    assert r.exit_code == 2 and r.output.startswith("mnrt: error: codegen_dir"), r.output
