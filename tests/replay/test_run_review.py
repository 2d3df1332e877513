"""Review of `mnrt run` and mnrt.replay's arguments and outputs: outputs never land on the
binary or on each other and are checked before the run, Ctrl-C has its own exit code, the
API refuses what it cannot take, and reports name what failed in any loop."""

from __future__ import annotations

import collections
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import mnrt
from mnrt.errors import EXIT_INTERRUPTED
from mnrt.format import LightBinary
from mnrt.host.golden import compare
from mnrt.runner.cli import cli

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
HANG_S = 60  # a hang guard, not a timing


@pytest.fixture
def mlp(tmp_path) -> Path:
    path = tmp_path / "mlp.mnlb"
    shutil.copy(SAMPLES / "mlp.mnlb", path)
    return path


def invoke(*args) -> tuple[int, str]:
    r = CliRunner().invoke(cli, [str(a) for a in args])
    return r.exit_code, r.output


@pytest.mark.parametrize("flag", ["--report", "--profile", "--save-outputs"])
def test_no_output_may_overwrite_the_binary(mlp, flag):
    before = mlp.read_bytes()
    code, out = invoke("run", mlp, flag, mlp.parent / "." / mlp.name)
    assert code == 2 and ("the binary being replayed" in out or "is a file" in out), out
    assert mlp.read_bytes() == before


def test_two_outputs_may_not_share_a_file(mlp, tmp_path):
    code, out = invoke(
        "run", mlp, "--report", tmp_path / "o.json", "--profile", tmp_path / "o.json"
    )
    assert code == 2 and "is also --report" in out
    assert not (tmp_path / "o.json").exists()


def test_an_output_that_cannot_be_written_fails_before_any_is_written(mlp, tmp_path):
    code, out = invoke("run", mlp, "--report", tmp_path / "r.json", "--profile", mlp / "p.json")
    assert code == 2 and "is not a directory" in out
    assert not (tmp_path / "r.json").exists()


def test_ctrl_c_exits_130_with_one_line(mlp):
    p = subprocess.Popen(
        [sys.executable, "-m", "mnrt", "run", str(mlp), "--loops", "1000000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(3)  # into the loops (a signal during start-up is Python's, not mnrt's)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=HANG_S)
    assert p.returncode == EXIT_INTERRUPTED and err == "mnrt: error: interrupted\n", err


def test_a_file_that_is_not_a_light_binary_is_called_that(mlp, tmp_path):
    text = tmp_path / "t.mnlb"
    text.write_text("hello world this is text\n")
    code, out = invoke("run", text)
    assert code == 2 and "not a light binary" in out
    assert invoke("convert", mlp, tmp_path / "m.json")[0] == 0
    code, out = invoke("run", tmp_path / "m.json")
    assert code == 2 and "mnrt convert" in out


def test_the_report_shows_the_checks_of_the_loop_that_failed():
    report = mnrt.ReplayReport(binary=LightBinary.load(SAMPLES / "mlp.mnlb"), load_s=0.0)
    bad = mnrt.Check("y", False, "float", (2,), 0, 0, 1.0, 1.0, 0.5, 1, (0,), [(0,)])
    good = mnrt.Check("y", True, "float", (2,), 0, 0, 0.0, 0.0, 1.0, 0, None, [])
    report.add_loop(0.001, 0.0, 0.0, [bad], {})
    report.add_loop(0.001, 0.0, 0.0, [good], {})
    assert not report.passed and report.checks == [bad]


def test_a_check_with_nothing_finite_to_correlate_is_not_a_perfect_correlation():
    got = np.array([np.nan, np.inf, 1, 2], np.float32)
    golden = np.array([1, 2, np.inf, np.nan], np.float32)
    check = compare("x", got, golden, mnrt.float32)
    assert not check.passed and check.mismatches == 4 and check.pcc == 0.0
    same = compare("x", got, got.copy(), mnrt.float32)
    assert same.passed and same.pcc == 1.0


@pytest.mark.parametrize(
    "arg", [5, {}, None, [1], 3.5, "a\x00b", b"not a binary"],
    ids=["int", "dict", "None", "list", "float", "nul", "bytes"],
)  # fmt: skip
def test_replay_refuses_what_is_not_a_binary_with_an_mnrt_error(arg):
    with pytest.raises(mnrt.MnrtError):
        mnrt.replay(arg)


def test_replay_takes_a_binarys_bytes():
    assert mnrt.replay((SAMPLES / "mlp.mnlb").read_bytes()).passed


def test_replay_checks_its_progress_callback_first():
    with pytest.raises(mnrt.InvalidArgumentError, match="progress must be a function"):
        mnrt.replay(SAMPLES / "mlp.mnlb", progress=5)


@pytest.mark.parametrize("mapping", [{"0": 1}, {5: 3}])
def test_a_device_mapping_of_devices_the_binary_never_captured_is_refused(mapping):
    with pytest.raises(mnrt.InvalidArgumentError, match="did not capture"):
        mnrt.replay(SAMPLES / "mlp.mnlb", device=mapping)


def test_auto_replays_on_several_threads_never_pick_the_same_device():
    binary = LightBinary.load(SAMPLES / "traced_loop.mnlb")
    results: collections.Counter = collections.Counter()
    start = threading.Barrier(6)

    def work() -> None:
        start.wait(HANG_S)
        for _ in range(8):
            try:
                results["passed" if mnrt.replay(binary, loops=2).passed else "failed"] += 1
            except mnrt.MnrtError as e:
                results[str(e)] += 1

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_S)
    assert results == {"passed": 48}


def test_a_run_without_verification_does_not_say_pass(mlp):
    code, out = invoke("run", mlp, "--no-verify")
    assert code == 0 and out.startswith("RAN, NOT VERIFIED"), out
    report = mnrt.replay(mlp, verify=False)
    assert report.to_dict()["verified"] is False


@pytest.mark.parametrize("flag", ["verify", "profile"])
def test_replay_takes_its_switches_as_bools_only(flag):
    with pytest.raises(mnrt.InvalidArgumentError, match=f"{flag} must be True or False"):
        mnrt.replay(SAMPLES / "mlp.mnlb", **{flag: "no"})
