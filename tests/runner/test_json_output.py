"""Machine output: `--json` on info, verify, convert, compile, run and bench prints one JSON
document on stdout, errors included (with their exit code); a failed run still writes its
`--report`; `mnrt bench` exits 1 when a golden fails."""

from __future__ import annotations

import base64
import contextlib
import json

import numpy as np
import pytest
from click.testing import CliRunner

import mnrt
from mnrt.format import jsonio
from mnrt.runner.cli import cli


def invoke(*args):
    """The CLI with stdout and stderr apart: --json output must be the one document there."""
    try:
        runner = CliRunner(mix_stderr=False)  # click 8.1
    except TypeError:
        runner = CliRunner()  # click 8.2 on keeps them apart anyway
    return runner.invoke(cli, [str(a) for a in args])


@pytest.fixture
def binary(tmp_path):
    path = tmp_path / "b.mnlb"
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        with mnrt.capture(path):
            a = dev.create_buffer((2, 3), "float", name="a")
            y = dev.create_buffer((2, 3), "float", name="y")
            prog = dev.create_program([mnrt.Kernel("exp", ["a"], ["y"])])
            q.enqueue_write_buffer(a, np.arange(6, dtype=np.float32).reshape(2, 3) / 10)
            q.enqueue_program(prog, {"a": a, "y": y})
            q.enqueue_read_buffer(y)
    return path


@pytest.fixture
def mismatching(binary, tmp_path):
    """The binary with one golden value off by one."""
    doc = jsonio.to_json(mnrt.LightBinary.load(binary))
    read = next(c for c in doc["commands"] if c["cmd"]["type"] == "ReadBuffer")
    blob = doc["blobs"][read["cmd"]["golden"] - 1]
    values = np.frombuffer(base64.b64decode(blob["base64"]), np.float32).copy()
    values[4] += 1.0
    blob["base64"] = base64.b64encode(values.tobytes()).decode()
    del blob["hash"]
    path = tmp_path / "mismatch.mnlb"
    jsonio.from_json(doc).save(path)
    return path


def _doc(result) -> dict:
    return json.loads(result.stdout)


def test_info_verify_convert_and_run_print_one_json_document(binary, tmp_path):
    assert _doc(invoke("info", binary, "--json"))["outputs"][0]["name"] == "y"
    doc = _doc(invoke("verify", binary, "--json"))
    assert doc["ok"] is True and doc["buffers"] == 2 and doc["programs"] == 1
    doc = _doc(invoke("convert", binary, tmp_path / "b.json", "--json"))
    assert doc["to"] == "json" and doc["commands"] == len(mnrt.LightBinary.load(binary))
    doc = _doc(invoke("convert", tmp_path / "b.json", tmp_path / "c.mnlb", "--json"))
    assert doc["to"] == "binary" and doc["bytes"] == (tmp_path / "c.mnlb").stat().st_size
    doc = _doc(invoke("run", binary, "--json"))
    assert doc["passed"] and doc["verdict"] == "PASS" and doc["outputs"]["y"]["shape"] == [2, 3]


def test_errors_with_json_are_json_with_their_exit_code(tmp_path):
    r = invoke("info", tmp_path / "missing.mnlb", "--json")
    assert r.exit_code == 2 and r.stderr == ""
    assert _doc(r)["error"]["exit_code"] == 2 and "no such file" in _doc(r)["error"]["message"]
    r = invoke("verify", "--json", "--bogus", tmp_path)
    assert r.exit_code == 2 and _doc(r)["error"]["type"] == "UsageError"
    # Without --json: one line on stderr, as before.
    r = invoke("info", tmp_path / "missing.mnlb")
    assert r.stdout == "" and r.stderr.startswith("mnrt: error: no such file")


def test_a_mismatch_writes_its_report_and_exits_1(mismatching, tmp_path):
    report = tmp_path / "r.json"
    r = invoke("run", mismatching, "--report", report, "--json")
    assert r.exit_code == 1
    doc = json.loads(report.read_text())
    assert doc == _doc(r) and doc["verdict"] == "FAIL"
    assert doc["checks"][0]["message"] and doc["checks"][0]["worst"][0]["index"] == [1, 1]


def test_an_invalid_binary_still_writes_its_report(binary, tmp_path):
    data = bytearray(binary.read_bytes())
    data[8:12] = b"XXXX"
    bad = tmp_path / "bad.mnlb"
    bad.write_bytes(bytes(data))
    report = tmp_path / "r.json"
    r = invoke("run", bad, "--report", report)
    assert r.exit_code == 2 and r.stderr.startswith("mnrt: error:")
    doc = json.loads(report.read_text())
    assert doc["passed"] is False and doc["error"]["type"] == "InvalidBinaryError"
    assert doc["error"]["exit_code"] == 2 and doc["binary"] == str(bad)
    r = invoke("run", bad, "--json")
    assert r.exit_code == 2 and _doc(r)["error"]["type"] == "InvalidBinaryError"


def test_a_device_error_still_writes_its_report_and_exits_3(tmp_path, failing_gather):
    path = tmp_path / "fails.mnlb"
    with mnrt.open_device(0) as dev:
        q = dev.command_queue()
        with mnrt.capture(path):
            failing_gather(dev, q)
        with contextlib.suppress(mnrt.DeviceExecutionError):
            q.finish()
    report = tmp_path / "r.json"
    r = invoke("run", path, "--report", report, "--json")
    assert r.exit_code == 3
    doc = json.loads(report.read_text())
    assert doc == _doc(r) and doc["error"]["type"] == "DeviceExecutionError"
    assert doc["verdict"] == "ERROR (DeviceExecutionError)" and doc["commands"] > 0


def test_bench_exits_1_when_a_golden_fails(binary, mismatching):
    assert invoke("bench", binary, "--loops", 2).exit_code == 0
    r = invoke("bench", mismatching, "--loops", 2)
    assert r.exit_code == 1 and "FAIL: 2 of 2 loops failed their goldens: y (" in r.stdout
    doc = _doc(invoke("bench", mismatching, "--loops", 2, "--json"))
    assert doc["passed"] is False and doc["failed_checks"][0]["name"] == "y"
    assert invoke("bench", mismatching, "--loops", 2, "--no-verify").exit_code == 0


def test_compile_json(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
    r = invoke("compile", model, "-o", tmp_path / "relu.mnlb", "--json")
    assert r.exit_code == 0, r.output
    doc = _doc(r)
    assert doc["kernels"] == 1 and [i["shape"] for i in doc["inputs"]] == [[2, 3]]
    r = invoke("compile", model, "-o", tmp_path / "relu.mnlb", "--input", "z=random", "--json")
    assert r.exit_code == 2 and "unknown input" in _doc(r)["error"]["message"]
