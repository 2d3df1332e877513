"""Review of `mnrt compile` and Context.compile against hostile or malformed models, inputs
and option files: each is a one-line error (or an MnrtError from the API), never a
traceback, a hang or a huge host allocation."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

import mnrt
from mnrt.compiler.onnx_frontend import InvalidModelError
from mnrt.runner.cli import cli

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

HANG_S = 60  # a hang guard, not a timing
HUGE = np.array([10**6, 10**6], np.int64)  # 3.6 TiB of float32


def model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def relu_model(path, name="x"):
    onnx.save(model([helper.make_node("Relu", [name], ["y"])], [vi(name, [2, 3])],
                    [vi("y", [2, 3])]), path)  # fmt: skip
    return str(path)


def compile_cli(*args):
    """The CLI in-process: (exit code, its one error line)."""
    r = CliRunner().invoke(cli, ["compile", *map(str, args)])
    lines = r.output.strip().splitlines()
    assert r.exit_code == 0 or (len(lines) == 1 and lines[0].startswith("mnrt: error: ")), r.output
    return r.exit_code, r.output


def compile_cli_guarded(*args):
    """The CLI in a child process, for inputs that once hung it."""
    run = subprocess.run([sys.executable, "-m", "mnrt", "compile", *map(str, args)],
                         capture_output=True, text=True, timeout=HANG_S)  # fmt: skip
    assert "Traceback" not in run.stderr, run.stderr
    return run.returncode, run.stderr


def folded_to_huge(op):
    """`op` of a constant by a shape that is itself computed from constants, so ONNX shape
    inference cannot size it before constant folding does."""
    inits = [numpy_helper.from_array(HUGE, "a"),
             numpy_helper.from_array(np.zeros(2, np.int64), "b"),
             numpy_helper.from_array(np.ones((1, 1), np.float32), "c")]  # fmt: skip
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node(op, ["c", "s"], ["e"]),
             helper.make_node("Add", ["x", "e"], ["y"])]  # fmt: skip
    return model(nodes, [vi("x", [1, 1])], [vi("y", None)], inits)


@pytest.mark.parametrize("op", ["Expand", "Tile"])
def test_constants_folded_to_a_huge_shape_are_refused_before_allocating(tmp_path, op):
    with mnrt.Context() as ctx, pytest.raises(mnrt.MnrtError, match="more than the device"):
        ctx.compile(folded_to_huge(op), {"x": np.zeros((1, 1), np.float32)})
    onnx.save(folded_to_huge(op), tmp_path / "m.onnx")
    assert compile_cli(tmp_path / "m.onnx", "-o", tmp_path / "o.mnlb")[0] == 2


def test_an_npy_input_whose_header_promises_more_than_the_file_holds(tmp_path):
    npy = tmp_path / "huge.npy"
    with open(npy, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (10**6, 10**6)}
        )
        f.write(b"\0" * 24)
    code, out = compile_cli(relu_model(tmp_path / "m.onnx"), "-o", tmp_path / "o.mnlb",
                            "--input", f"x={npy}")  # fmt: skip
    assert code == 2 and "only 24 bytes follow" in out


@pytest.mark.parametrize("what", ["model", "input", "option_json"])
def test_a_fifo_given_as_a_file_is_refused_not_waited_on(tmp_path, what):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    args = {
        "model": [fifo, "-o", tmp_path / "o.mnlb"],
        "input": [relu_model(tmp_path / "m.onnx"), "-o", tmp_path / "o.mnlb", "--input",
                  f"x={fifo}"],
        "option_json": [relu_model(tmp_path / "m.onnx"), "-o", tmp_path / "o.mnlb", "-O", fifo],
    }[what]  # fmt: skip
    code, err = compile_cli_guarded(*args)
    assert code == 2 and "not a regular file" in err, err


@pytest.mark.parametrize("name", ["file", "allow_pickle"])
def test_inputs_named_like_savez_parameters_are_kept_in_the_codegen_dir(tmp_path, name):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with mnrt.Context() as ctx:
        ctx.compile(onnx.load(relu_model(tmp_path / "m.onnx", name)), {name: x},
                    codegen_dir=tmp_path / "cg")  # fmt: skip
        again = ctx.load_codegen_dir(tmp_path / "cg")
    np.testing.assert_array_equal(again.example_inputs[name], x)


def gather_model():
    return model([helper.make_node("Gather", ["x", "i"], ["y"])],
                 [vi("x", [2, 3]), vi("i", [2], TensorProto.INT64)], [vi("y", None)])  # fmt: skip


def test_inputs_the_reference_evaluator_cannot_run_are_an_mnrt_error(tmp_path):
    inputs = {"x": np.zeros((2, 3), np.float32), "i": np.array([5, 0])}  # 5: out of range
    with mnrt.Context() as ctx:
        compiled = ctx.compile(gather_model(), inputs)
        with pytest.raises(mnrt.InvalidArgumentError, match="reference evaluator.*IndexError"):
            compiled.save_binary(tmp_path / "o.mnlb")
    onnx.save(gather_model(), tmp_path / "g.onnx")
    np.save(tmp_path / "i.npy", inputs["i"])
    code, out = compile_cli(tmp_path / "g.onnx", "-o", tmp_path / "o.mnlb", "--input",
                            f"i={tmp_path / 'i.npy'}")  # fmt: skip
    assert code == 2 and "reference evaluator" in out


def test_an_op_version_the_reference_evaluator_lacks_is_an_mnrt_error(tmp_path):
    m = model([helper.make_node("Reshape", ["x"], ["y"], shape=[3, 2])], [vi("x", [2, 3])],
              [vi("y", None)], opset=1)  # fmt: skip
    with mnrt.Context() as ctx:
        compiled = ctx.compile(m, {"x": np.zeros((2, 3), np.float32)})
        with pytest.raises(mnrt.InvalidArgumentError, match="reference evaluator"):
            compiled.save_binary(tmp_path / "o.mnlb")


def test_a_pad_axis_out_of_range_is_an_invalid_model():
    inits = [numpy_helper.from_array(np.array([1, 1], np.int64), "p"),
             numpy_helper.from_array(np.array([17], np.int64), "ax")]  # fmt: skip
    m = model([helper.make_node("Pad", ["x", "p", "", "ax"], ["y"])], [vi("x", [2, 3])],
              [vi("y", None)], inits, opset=18)  # fmt: skip
    with mnrt.Context() as ctx, pytest.raises(InvalidModelError, match="Pad axis 17"):
        ctx.compile(m, {"x": np.zeros((2, 3), np.float32)})


def test_concat_at_opset_1_defaults_its_axis_to_1():
    m = model([helper.make_node("Concat", ["x", "x"], ["y"])], [vi("x", [2, 3])],
              [vi("y", None)], opset=1)  # fmt: skip
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with mnrt.Context() as ctx:
        got = ctx.compile(m, {"x": x})({"x": x})["y"].cpu()
    np.testing.assert_array_equal(got, np.concatenate([x, x], axis=1))


def test_a_deeply_nested_option_json_is_a_one_line_error(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    code, out = compile_cli(relu_model(tmp_path / "m.onnx"), "-o", tmp_path / "o.mnlb",
                            "-O", deep)  # fmt: skip
    assert code == 2 and "not valid JSON" in out
