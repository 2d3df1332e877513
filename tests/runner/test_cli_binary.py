"""`mnrt run|info|dump|verify|convert|bench` on real binaries."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from binaries import views_capture
from cli_harness import assert_one_line_error, invoke_cli
from click.testing import CliRunner

import mnrt
from mnrt.errors import EXIT_INTERRUPTED
from mnrt.format import jsonio
from mnrt.replay.executor import COMMAND_NAMES
from mnrt.runner.cli import cli
from mnrt.runner.run import _check_outputs

SAMPLE = "samples/mlp.mnlb"  # captured by an earlier mnrt: the compatibility corpus


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_run_prints_verdict_checks_and_device_time():
    r = invoke("run", SAMPLE)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith("PASS:") and "1/1 goldens matched" in lines[0]
    assert "ok   y float[64, 10]" in r.output and "modelled device time" in r.output


def test_run_report_outputs_loops_and_tolerances(tmp_path):
    # Zero tolerances: a replay reproduces a capture made by this mnrt bit for bit. (The
    # corpus binary holds within its recorded tolerances instead: kernels may move by an ulp
    # between versions.)
    fresh = tmp_path / "mlp.mnlb"
    sample = Path(__file__).resolve().parents[2] / "samples" / "mlp.py"
    env = {**os.environ, "MNRT_HOME": str(tmp_path / "home")}
    subprocess.run([sys.executable, sample, "--capture", fresh], check=True, env=env)
    report = tmp_path / "r.json"
    outputs = tmp_path / "out"
    r = invoke(
        "run",
        fresh,
        "--loops",
        3,
        "--report",
        report,
        "--save-outputs",
        outputs,
        "--rtol",
        0,
        "--atol",
        0,
        "--device",
        2,
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(report.read_text())
    assert doc["passed"] and doc["timings"]["loops"] == 3 and doc["checks"][0]["rtol"] == 0
    y = np.load(outputs / "y.npy")
    assert y.shape == (64, 10) and y.dtype == np.float32
    r = invoke("run", SAMPLE, "--json", "--no-verify")
    assert json.loads(r.output)["checks"] == []


def test_run_usage_errors_exit_2():
    assert invoke("run", SAMPLE, "--loops", 0).exit_code == 2
    assert invoke("run", SAMPLE, "--device", "gpu").exit_code == 2
    r = invoke("run", SAMPLE, "--device", 99)
    assert r.exit_code == 2 and "no emulated device 99" in r.output


def test_an_onnx_model_given_to_a_binary_command_is_sent_to_mnrt_compile(tmp_path):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x, y = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in "xy")
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = tmp_path / "model.onnx"
    model.write_bytes(helper.make_model(graph).SerializeToString())
    for command in (["run"], ["info"], ["bench"], ["run", "--locate"]):
        code, out = invoke_cli(*command, model)
        assert_one_line_error(code, out, "looks like an ONNX model: `mnrt compile MODEL")


def test_info_text_and_json():
    r = invoke("info", SAMPLE)
    assert r.exit_code == 0 and "format 1.0" in r.output and "WriteBuffer 7" in r.output
    doc = json.loads(invoke("info", SAMPLE, "--json").output)
    assert doc["commands"] == 27 and doc["programs"] == 1 and doc["compression_ratio"] >= 1.0
    assert doc["payload_bytes_stored"] < doc["payload_bytes_unique"]


def test_info_names_the_sample_fingerprint_statistics_were_taken_over():
    r = invoke("info", "samples/mlp_fingerprinted.mnlb")
    assert "8 kernel output fingerprints (statistics over 64 runs of 256)" in r.output
    doc = json.loads(invoke("info", "samples/mlp_fingerprinted.mnlb", "--json").output)
    assert doc["kernel_fingerprints"] == 8 and doc["fingerprint_sample"] == [64, 256]
    assert "0 kernel output fingerprints\n" in invoke("info", SAMPLE).output


def test_dump_json_lists_commands_and_blobs_without_payloads():
    doc = json.loads(invoke("dump", SAMPLE, "--json").output)
    assert doc["format"] == "mnrt-light-binary-json"
    assert doc["commands"][0]["cmd"]["type"] == "OpenDevice"
    assert all("base64" not in b for b in doc["blobs"])


def test_verify_and_bench():
    r = invoke("verify", SAMPLE)
    assert r.exit_code == 0 and r.output.startswith("OK:")
    # traced_loop: its goldens hold on any BLAS (mlp's float32 GEMMs may round otherwise).
    r = invoke("bench", "samples/traced_loop.mnlb", "--loops", 3)
    assert r.exit_code == 0 and "3 loops" in r.output and "median" in r.output
    assert "host time by command: " in r.output and "create_buffer" in r.output


def test_replay_times_the_host_per_command_type():
    binary = mnrt.LightBinary.load("samples/traced_loop.mnlb")
    report = mnrt.replay(binary, loops=2)
    by_command = report.timings["host_s_by_command"]
    kinds = Counter(COMMAND_NAMES[c.cmdType] for c in binary.commands)
    assert {k: v["count"] for k, v in by_command.items() if k != "final_finish"} == kinds
    assert by_command["replay_trace"]["count"] == 100 and by_command["final_finish"]["count"] == 1
    assert all(v["s"] >= 0 for v in by_command.values())
    # The loop's wall time is the sum of its parts, give or take the clock reads between them.
    assert sum(v["s"] for v in by_command.values()) <= report.timings["wall_min_s"] * 1.01


def _restamped(doc: dict) -> dict:
    """A binary's JSON form but its version, schema hash and integrity hash, which
    converting a JSON document back stamps anew (this mnrt's)."""
    return {k: v for k, v in doc.items() if k not in ("version", "schema_hash", "integrity")}


def test_convert_round_trip_inline_and_side_files(tmp_path):
    original = _restamped(jsonio.to_json(mnrt.LightBinary.load(SAMPLE)))
    for flags in ([], ["--blob-files"]):
        js = tmp_path / f"m{len(flags)}.json"
        back = tmp_path / f"m{len(flags)}.mnlb"
        again = tmp_path / f"m{len(flags)}-again.mnlb"
        assert invoke("convert", SAMPLE, js, *flags).exit_code == 0
        assert invoke("convert", js, back).exit_code == 0
        assert _restamped(jsonio.to_json(mnrt.LightBinary.load(back))) == original
        assert invoke("convert", back, js, *flags).exit_code == 0
        assert invoke("convert", js, again).exit_code == 0
        assert again.read_bytes() == back.read_bytes()


def test_convert_rejects_garbage(tmp_path):
    junk = tmp_path / "junk.json"
    junk.write_text('{"format": "something else"}')
    r = invoke("convert", junk, tmp_path / "x.mnlb")
    assert r.exit_code == 2 and "not a light binary JSON" in r.output
    junk.write_bytes(b"\xff\xfe\x00garbage")
    assert invoke("convert", junk, tmp_path / "x.mnlb").exit_code == 2


def test_device_error_exits_3(tmp_path, failing_gather):
    with mnrt.open_device(0) as dev:
        q = dev.command_queue()
        with mnrt.capture(tmp_path / "g.mnlb"):
            failing_gather(dev, q)
        with contextlib.suppress(mnrt.DeviceExecutionError):
            q.finish()
    r = invoke("run", tmp_path / "g.mnlb")
    assert r.exit_code == 3 and "index 9 is out of range" in r.output
    shutil.rmtree(tmp_path)


def test_save_outputs_keeps_reads_whose_names_make_the_same_file_name(tmp_path):
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture()
        for i, name in enumerate(["a/b", "a_b", "A_B"]):
            buf = dev.create_buffer((2,), "float", name=name)
            q.enqueue_write_buffer(buf, np.full(2, i, np.float32))
            q.enqueue_read_buffer(buf)
        binary = mnrt.end_capture()
    path = tmp_path / "names.mnlb"
    binary.save(path)
    r = invoke("run", path, "--save-outputs", tmp_path / "out")
    assert r.exit_code == 0, r.output
    saved = sorted((tmp_path / "out").iterdir())
    assert {p.name for p in saved} == {"a_b.npy", "a_b~2.npy", "A_B~3.npy"}
    assert sorted(float(np.load(p)[0]) for p in saved) == [0.0, 1.0, 2.0]


def test_usage_errors_are_one_line_too():
    for args in (["run", "--bogus"], ["run"], ["nosuch"], ["run", SAMPLE, "--loops", "0"]):
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 2 and r.output.count("\n") == 1, (args, r.output)
        assert r.output.startswith("mnrt: error: ") and "--help" in r.output
    bare = CliRunner().invoke(cli, [])
    assert "Commands:" in bare.output  # no command at all: the help itself


SAMPLES = Path(__file__).resolve().parents[2] / "samples"


HANG_S = 60  # a hang guard, not a timing


@pytest.fixture
def mlp(tmp_path) -> Path:
    path = tmp_path / "mlp.mnlb"
    shutil.copy(SAMPLES / "mlp.mnlb", path)
    return path


@pytest.mark.parametrize("flag", ["--report", "--profile", "--save-outputs"])
def test_no_output_may_overwrite_the_binary(mlp, flag):
    before = mlp.read_bytes()
    code, out = invoke_cli("run", mlp, flag, mlp.parent / "." / mlp.name)
    assert code == 2 and ("the binary being replayed" in out or "is a file" in out), out
    assert mlp.read_bytes() == before


def test_two_outputs_may_not_share_a_file(mlp, tmp_path):
    code, out = invoke_cli(
        "run", mlp, "--report", tmp_path / "o.json", "--profile", tmp_path / "o.json"
    )
    assert code == 2 and "is also --report" in out
    assert not (tmp_path / "o.json").exists()


def test_an_output_that_cannot_be_written_fails_before_any_is_written(mlp, tmp_path):
    code, out = invoke_cli("run", mlp, "--report", tmp_path / "r.json", "--profile", mlp / "p.json")
    assert code == 2 and "is not a directory" in out
    assert not (tmp_path / "r.json").exists()


def test_ctrl_c_exits_130_with_one_line(mlp):
    p = subprocess.Popen(
        [sys.executable, "-m", "mnrt", "run", str(mlp), "--loops", "1000000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(3)  # into the loops (a signal during start-up is Python's, not mnrt's)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=HANG_S)
    finally:  # one that failed must not replay on for the rest of the suite
        p.kill()
        p.communicate()
    assert p.returncode == EXIT_INTERRUPTED and err == "mnrt: error: interrupted\n", err


def test_a_file_that_is_not_a_light_binary_is_called_that(mlp, tmp_path):
    text = tmp_path / "t.mnlb"
    text.write_text("hello world this is text\n")
    code, out = invoke_cli("run", text)
    assert code == 2 and "not a light binary" in out
    assert invoke_cli("convert", mlp, tmp_path / "m.json")[0] == 0
    code, out = invoke_cli("run", tmp_path / "m.json")
    assert code == 2 and "mnrt convert" in out


def test_a_run_without_verification_does_not_say_pass(mlp):
    code, out = invoke_cli("run", mlp, "--no-verify")
    assert code == 0 and out.startswith("RAN, NOT VERIFIED"), out
    report = mnrt.replay(mlp, verify=False)
    assert report.to_dict()["verified"] is False


def _without_goldens(path) -> None:
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture(goldens=False)
        x = dev.create_buffer((4,), "float32", name="x")
        q.enqueue_write_buffer(x, np.arange(4, dtype=np.float32))
        q.enqueue_read_buffer(x)
        mnrt.end_capture().save(path)


def test_a_binary_without_goldens_is_not_a_pass(tmp_path):
    path = tmp_path / "nogold.mnlb"
    _without_goldens(path)
    report = mnrt.replay(path)
    assert report.passed and not report.verified and report.no_goldens
    assert report.verdict.startswith("NO GOLDENS")
    r = invoke("run", path)  # before: "PASS ... 0/0 goldens", exit 0
    assert r.exit_code == 4 and r.output.startswith("NO GOLDENS") and "PASS" not in r.output
    r = invoke("run", path, "--allow-no-goldens")
    assert r.exit_code == 0 and r.output.startswith("NO GOLDENS")
    r = invoke("run", path, "--json")
    assert r.exit_code == 4 and json.loads(r.output)["no_goldens"] is True


@pytest.mark.parametrize("loops", ["100000000000000000000000", "1e23", "0"])
def test_loops_are_bounded(loops):
    r = invoke("run", SAMPLE, "--loops", loops)
    assert r.exit_code == 2 and "--loops" in r.output
    with pytest.raises(mnrt.InvalidArgumentError, match="loops must be an integer from 1 to"):
        mnrt.replay(SAMPLE, loops=10**23)


@pytest.mark.parametrize(
    "args",
    [
        ["run", "{bin}", "--report", "{long}"],
        ["run", "{long}"],
        ["info", "{long}"],
        ["diff", "{bin}", "{long}"],
        ["run", "{bin}", "--profile", "{long}"],
        ["run", "{bin}", "--save-outputs", "{long}"],
        ["run", "{bin}", "--save-outputs", "{long}/y"],
        ["trim", "{bin}", "--commands", "0:3", "-o", "{long}"],
        ["optimize", "{bin}", "-o", "{long}"],
        ["reduce", "{bin}", "-o", "{long}"],
        ["dashboard", "{long}", "--export", "{tmp}/e"],
        ["dashboard", "{bin}", "{long}", "--export", "{tmp}/e"],
        ["clean", "{long}"],
    ],
)
def test_a_path_no_file_can_have_is_a_one_line_error(small_binary, tmp_path, args):
    """A name longer than the file system takes: asking whether it exists raised an
    OSError (a traceback) in each of these."""
    path = tmp_path / "b.mnlb"
    small_binary.save(path)
    long = tmp_path / ("x" * 300)
    given = [a.format(bin=path, long=long, tmp=tmp_path) for a in args]
    code, out = invoke_cli(*given)
    assert_one_line_error(code, out, "File name too long")


def test_save_outputs_may_name_the_root_folder(tmp_path):
    """The nearest folder that exists of / is / (it has no parents: was StopIteration).
    Only the check runs here: nothing is written to /."""
    binary = tmp_path / "b.mnlb"
    _check_outputs(binary, {}, Path("/"), [])


def test_a_codegen_dir_stands_for_its_model_mnlb(tmp_path):
    """`mnrt run out/cg` after a compile into out/cg: each command that reads a binary takes
    the codegen_dir for its model.mnlb; a directory without one is a one-line error."""
    from mnrt.compiler.models import MODELS

    builder, inputs = MODELS["mlp"]()
    with mnrt.Context() as ctx:
        ctx.compile(builder, inputs, codegen_dir=tmp_path / "cg")
    binary = tmp_path / "cg" / "model.mnlb"
    r = invoke("run", tmp_path / "cg", "--report", tmp_path / "r.json")
    assert r.exit_code == 0 and r.output.startswith("PASS:"), r.output
    assert json.loads((tmp_path / "r.json").read_text())["binary"] == str(binary)
    assert invoke("info", tmp_path / "cg").output == invoke("info", binary).output
    for args in (["verify"], ["bench"], ["dump", "--json"], ["diff", binary]):
        r = invoke(args[0], tmp_path / "cg", *args[1:])
        assert r.exit_code == 0, (args, r.output)
    r = invoke("optimize", tmp_path / "cg", "-o", tmp_path / "o.mnlb")
    assert r.exit_code == 0 and (tmp_path / "o.mnlb").is_file(), r.output
    (tmp_path / "empty").mkdir()
    code, out = invoke_cli("run", str(tmp_path / "empty"))
    assert_one_line_error(code, out, "is a directory without a model.mnlb")


def test_info_counts_the_slot_views(tmp_path):
    views_capture().save(tmp_path / "views.mnlb")
    r = invoke("info", tmp_path / "views.mnlb")
    assert "(kernels: neg 2, relu 1; 3 slot views)" in r.output, r.output
    assert json.loads(invoke("info", tmp_path / "views.mnlb", "--json").output)["slot_views"] == 3
    assert "slot views" not in invoke("info", SAMPLE).output
