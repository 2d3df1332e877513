"""`mnrt compile MODEL.onnx --devices N --microbatches M --schedule S`: a pipelined compile
from the command line, whose multi-device binary `mnrt run` replays."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import mnrt
from mnrt.runner.cli import cli

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def layered_model(path, layers=4):
    """MatMul + Relu per layer, nodes named /layer<i>/..., as exporters name them."""
    rng = np.random.default_rng(0)
    weights, nodes, h = [], [], "x"
    for i in range(layers):
        w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), f"w{i}")
        weights.append(w)
        nodes += [
            helper.make_node("MatMul", [h, f"w{i}"], [f"m{i}"], name=f"/layer{i}/MatMul"),
            helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"/layer{i}/Relu"),
        ]
        h = f"r{i}"
    nodes.append(helper.make_node("Softmax", [h], ["y"], axis=-1, name="/head/Softmax"))
    graph = helper.make_graph(
        nodes,
        "layered",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 8])],
        weights,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize(
    "flags, stages",
    [
        (["--devices", "4", "--microbatches", "8", "--schedule", "gpipe"], 4),
        (["--devices", "2", "--microbatches", "4", "--schedule", "circular", "--stages", "4"], 4),
        (
            [
                "--devices",
                "2",
                "--stage-assignment",
                "/layer0/=0",
                "--stage-assignment",
                "/layer1/=0",
                "--stage-assignment",
                "/layer2/=1",
            ],
            2,
        ),
    ],
)
def test_pipelined_compile_writes_a_binary_mnrt_run_replays(tmp_path, flags, stages):
    layered_model(tmp_path / "m.onnx")
    out = tmp_path / "m.mnlb"
    r = CliRunner().invoke(
        cli,
        [
            "compile",
            str(tmp_path / "m.onnx"),
            "-o",
            str(out),
            "--json",
            "--codegen-dir",
            str(tmp_path / "cg"),
            *flags,
        ],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert sorted(f["stage"] for f in doc["fragments"]) == list(range(stages))
    assert doc["modelled"]["makespan_s"] > 0
    # every microbatch's output checked against the model's reference
    assert doc["accuracy"]["reference"] in ("onnxruntime", "float64 graph")
    assert len(doc["accuracy"]["outputs"]) == doc["mpmd"]["microbatches"]
    assert all(o["passed"] for o in doc["accuracy"]["outputs"].values()), doc["accuracy"]
    assert (tmp_path / "cg" / "mpmd" / "00_import.txt").is_file()
    # the codegen_dir's report holds the same check, as a single-device compile's does
    phases = json.loads((tmp_path / "cg" / "report.json").read_text())["phases"]
    phase = next(p for p in phases if p["name"] == "light binary")
    assert phase["accuracy"]["outputs"].keys() == doc["accuracy"]["outputs"].keys()
    r = CliRunner().invoke(cli, ["run", str(out)])
    assert r.exit_code == 0, r.output
    assert "goldens matched" in r.output


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--devices", "2", "--schedule", "1f1b"], "no backward pass"),
        (["--microbatches", "4"], "give --devices N"),
        (["--devices", "2", "--stages", "3"], "use 'circular'"),
        (["--devices", "2", "--stage-assignment", "/layer0/=x"], "STAGE is a number"),
        (["--devices", "4", "--stages", "12", "--schedule", "circular"], "9 nodes, too few"),
    ],
)
def test_pipelined_compile_usage_errors_exit_2_on_one_line(tmp_path, flags, message):
    layered_model(tmp_path / "m.onnx")
    r = CliRunner().invoke(
        cli, ["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.mnlb"), *flags]
    )
    assert r.exit_code == 2 and message in r.output
    assert "Traceback" not in r.output


def test_an_input_file_of_every_microbatch_is_the_recorded_run(tmp_path):
    """--input x=xs.npy with a leading microbatch axis, as `mnrt run` takes the pipelined
    binary's input: the binary records a run on those microbatches (its goldens are the
    model's outputs on each), and so does the codegen_dir's; its first is the compile's
    example. One microbatch's example of the declared shape is repeated for each."""
    layered_model(tmp_path / "m.onnx")
    xs = np.random.default_rng(1).standard_normal((3, 3, 8)).astype(np.float32)
    np.save(tmp_path / "xs.npy", xs)
    out = tmp_path / "m.mnlb"
    args = ["compile", str(tmp_path / "m.onnx"), "-o", str(out), "--devices", "2"]
    stacked = ["--input", f"x={tmp_path / 'xs.npy'}", "--codegen-dir", str(tmp_path / "cg")]
    r = CliRunner().invoke(cli, [*args, "--microbatches", "3", *stacked])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["diff", str(out), str(tmp_path / "cg" / "model.mnlb")])
    assert r.exit_code == 0, r.output
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(tmp_path / "m.onnx"))
    report = mnrt.replay(mnrt.LightBinary.load(out), rtol=0, atol=0)
    assert report.passed
    for m in range(3):
        want = session.run(None, {"x": xs[m]})[0]
        np.testing.assert_allclose(report.outputs[f"y#{m}"], want, rtol=1e-5, atol=1e-6)
    assert not np.array_equal(report.outputs["y#0"], report.outputs["y#1"])
    r = CliRunner().invoke(
        cli, [*args, "--microbatches", "2", "--input", f"x={tmp_path / 'xs.npy'}"]
    )
    assert (
        r.exit_code == 2
        and "holds 3 microbatches along its first axis; the pipeline runs 2" in r.output
    )
    np.save(tmp_path / "x.npy", xs[2])
    r = CliRunner().invoke(
        cli, [*args, "--microbatches", "3", "--input", f"x={tmp_path / 'x.npy'}"]
    )
    assert r.exit_code == 0, r.output
    report = mnrt.replay(mnrt.LightBinary.load(out))
    np.testing.assert_array_equal(report.outputs["y#0"], report.outputs["y#2"])
