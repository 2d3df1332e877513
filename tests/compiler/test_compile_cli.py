"""`mnrt compile MODEL.onnx`: goldens from ONNX's reference evaluator, replayed by mnrt run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import mnrt
from mnrt.runner.cli import cli

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def small_model(path):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Softmax", ["r"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], [w],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("float_dtype", ["float", "mixed"])
def test_compile_cli_writes_a_binary_that_mnrt_run_verifies(tmp_path, float_dtype):
    model = tmp_path / "small.onnx"
    small_model(model)
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32))
    out = tmp_path / "small.mnlb"
    cg = tmp_path / "cg"
    args = ["compile", str(model), "-o", str(out), "--float-dtype", float_dtype,
            "--codegen-dir", str(cg), "--input", f"x={x}", "--option", "scheduler=anneal",
            "--option", "sa_expected_run_iters=20"]  # fmt: skip
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    written = json.loads((cg / "option.json").read_text())["args"]
    assert "--scheduler=anneal" in written and "--sa_expected_run_iters=20" in written
    r = CliRunner().invoke(cli, ["run", str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["checks"][0]["name"] == "y"
    assert (cg / "report.json").is_file()


def test_compile_cli_errors(tmp_path):
    model = tmp_path / "small.onnx"
    small_model(model)
    r = CliRunner().invoke(cli, ["compile", str(model), "-o", str(tmp_path / "o.mnlb"),
                                 "--input", "z=random"])  # fmt: skip
    assert r.exit_code == 2 and "unknown input(s) z" in r.output
    r = CliRunner().invoke(cli, ["compile", str(model), "-o", str(tmp_path / "o.mnlb"),
                                 "--input", "x"])  # fmt: skip
    assert r.exit_code == 2
    r = CliRunner().invoke(cli, ["compile", str(model), "-o", str(tmp_path / "o.mnlb"),
                                 "--option", "schedular=anneal"])  # fmt: skip
    assert r.exit_code == 2 and "unknown compile option 'schedular'" in r.output
    assert "valid options are" in r.output


def test_the_reference_of_an_onnx_model_comes_from_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    model = tmp_path / "small.onnx"
    small_model(model)
    x = np.random.default_rng(2).standard_normal((3, 8)).astype(np.float32)
    with mnrt.Context() as ctx:
        compiled = ctx.compile(str(model), {"x": x})
        session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        want = session.run(None, {"x": x})[0]
        np.testing.assert_array_equal(compiled.reference({"x": x})["y"], want)


def test_integer_inputs_given_no_data_are_valid_indices(tmp_path):
    # An embedding lookup: random indices (standard normal, cast) would be negative or past
    # the table and fail on the device; zeros always fit.
    table = numpy_helper.from_array(np.arange(4, dtype=np.float32).reshape(1, 4), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)], "embed",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 4])], [table],
    )  # fmt: skip
    model = tmp_path / "embed.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    out = tmp_path / "embed.mnlb"
    r = CliRunner().invoke(cli, ["compile", str(model), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert CliRunner().invoke(cli, ["run", str(out)]).exit_code == 0


@pytest.mark.parametrize(
    ("node", "opset"),
    [
        (helper.make_node("LRN", ["x"], ["y"], size=3), 17),
        (helper.make_node("Softmax", ["x"], ["y"], axis=1), 11),
    ],
    ids=["lrn", "softmax-opset11"],
)
def test_goldens_avoid_the_reference_evaluators_known_mistakes(tmp_path, node, opset):
    # ONNX's evaluator sums LRN over the batch and ignores Softmax's 2-D coercion before
    # opset 13; goldens from it would fail a correct replay.
    graph = helper.make_graph(
        [node], "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 2, 2])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    x = np.random.default_rng(3).standard_normal((1, 5, 2, 2)).astype(np.float32)
    with mnrt.Context() as ctx:
        compiled = ctx.compile(model, {"x": x})
        compiled.save_binary(tmp_path / "m.mnlb")
    assert mnrt.replay(tmp_path / "m.mnlb").passed
