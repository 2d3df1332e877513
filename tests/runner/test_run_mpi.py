"""`mpiexec -n N mnrt run --mpi FILE`: distributed replay equals the in-process one bit for
bit, every rank exits with one code, and a rank that fails (a bad file, a device error, an
error mid-replay, a kill) ends every rank, never a hang (tests/mpi_harness.py guards it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from binaries import perturbed, three_device_capture
from cli_harness import invoke_cli
from mpi_harness import mnrt_command, run_mpi, run_mpmd

import mnrt
from mnrt.replay.plan import validate

SAMPLES = Path(__file__).parents[2] / "samples"
# The ring's matrices: from this size on, OpenBLAS rounds a float32 product differently on
# another thread count, so a rank that chose its own count would not match bit for bit.
SIDE = 128


def ring_binary(path: Path, devices: int = 4) -> Path:
    """Each device computes, pushes its result to the next device (copy on the sender's
    queue) and pulls the previous device's result (copy on the receiver's queue), in both
    directions around a ring, with events ordering every hand-over; goldens on each device.
    Captured through the host API; the last step is a device trace, replayed twice."""
    rng = np.random.default_rng(11)
    shape = (SIDE, SIDE)
    with mnrt.capture(path):
        devs = [mnrt.open_device(i) for i in range(devices)]
        try:
            qs = [d.command_queue(0) for d in devs]
            x = [d.create_buffer(shape, "float", name=f"x{i}") for i, d in enumerate(devs)]
            y = [d.create_buffer(shape, "float", name=f"y{i}") for i, d in enumerate(devs)]
            got = [d.create_buffer(shape, "float", name=f"in{i}") for i, d in enumerate(devs)]
            pulled = [d.create_buffer(shape, "float", name=f"pull{i}") for i, d in enumerate(devs)]
            out = [d.create_buffer(shape, "float", name=f"out{i}") for i, d in enumerate(devs)]
            step = [d.create_program([mnrt.Kernel("tanh", ["x"], ["y"])]) for d in devs]
            mix = [
                d.create_program(
                    [mnrt.Kernel("gemm", ["a", "b"], ["t"]), mnrt.Kernel("add", ["t", "c"], ["o"])]
                )
                for d in devs
            ]
            tmp = [d.create_buffer(shape, "float", name=f"t{i}") for i, d in enumerate(devs)]
            for i in range(devices):
                qs[i].enqueue_write_buffer(x[i], rng.standard_normal(shape).astype(np.float32))
                qs[i].enqueue_program(step[i], {"x": x[i], "y": y[i]})
            ready = [q.record_event() for q in qs]
            for i in range(devices):
                nxt, prv = (i + 1) % devices, (i - 1) % devices
                qs[i].enqueue_copy_buffer(y[i], got[nxt])  # push
                qs[i].wait_event(ready[prv])
                qs[i].enqueue_copy_buffer(y[prv], pulled[i])  # pull
            pushed = [q.record_event() for q in qs]
            for i in range(devices):
                qs[i].wait_event(pushed[(i - 1) % devices])
                tid = qs[i].begin_trace_capture()
                qs[i].enqueue_program(
                    mix[i], {"a": got[i], "b": pulled[i], "c": y[i], "t": tmp[i], "o": out[i]}
                )
                qs[i].end_trace_capture(tid)
                qs[i].replay_trace(tid)
                qs[i].replay_trace(tid)
            for i in range(devices):
                qs[i].enqueue_read_buffer(out[i])
        finally:
            for d in devs:
                d.close()
    return path


def saved(folder: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(folder.glob("*.npy"))}


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    return ring_binary(tmp_path_factory.mktemp("ring") / "ring.mnlb")


def in_process_outputs(binary: Path, folder: Path) -> dict[str, bytes]:
    code, out = invoke_cli("run", binary, "--save-outputs", folder, "--report", f"{folder}.json")
    assert code == 0, out
    return saved(folder)


@pytest.mark.parametrize("ranks", [2, 4])
def test_distributed_replay_equals_the_in_process_one_bit_for_bit(ring, tmp_path, ranks):
    expected = in_process_outputs(ring, tmp_path / "local")
    report = tmp_path / "report.json"
    r = run_mpi(
        ranks, *mnrt_command(), "run", "--mpi", ring, "--save-outputs", tmp_path / "mpi",
        "--report", report,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("PASS") == 1  # rank 0 alone prints the verdict
    assert saved(tmp_path / "mpi") == expected and len(expected) == 4
    doc = json.loads(report.read_text())
    local = json.loads((tmp_path / "local.json").read_text())
    assert doc["ranks"] == ranks and doc["passed"] and len(doc["checks"]) == 4
    assert [c["name"] for c in doc["checks"]] == [c["name"] for c in local["checks"]]
    assert doc["modelled"] == local["modelled"]  # the captured topology's timeline
    for total in ("device_time_s", "energy_j"):  # a copy between ranks is priced as a copy
        assert doc["timings"][total] == pytest.approx(local["timings"][total], rel=1e-12)
    assert len(doc["modelled_as_run"]["devices"]) == 4  # each rank's devices are its own


def test_a_fold_joins_the_devices_of_one_rank(ring, tmp_path):
    """Four logical devices on two ranks folded onto two runner devices: each rank replays
    its two on one device of its own, as the in-process fold does."""
    expected = in_process_outputs(ring, tmp_path / "local")
    report = tmp_path / "report.json"
    r = run_mpi(
        2, *mnrt_command(), "run", "--mpi", ring, "--devices", "2",
        "--save-outputs", tmp_path / "mpi", "--report", report,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert saved(tmp_path / "mpi") == expected
    code, out = invoke_cli("run", ring, "--devices", "2", "--json")
    assert code == 0, out
    doc = json.loads(report.read_text())
    assert doc["modelled_as_run"] == json.loads(out)["modelled_as_run"]
    assert len(doc["modelled_as_run"]["devices"]) == 2


def test_locate_over_ranks_names_the_kernel_the_in_process_locate_names(tmp_path):
    """z (device 2, rank 2) is perturbed: device 1's add (rank 1) is the first divergent
    kernel; rank 1 saves its arrays and rank 0 names them."""
    binary = three_device_capture(fingerprints=True)
    z = next(g for g, b in validate(binary, blobs=False).buffers.items() if b.name == "z")
    path = tmp_path / "bad.mnlb"
    perturbed(binary, z).save(path)
    code, out = invoke_cli("run", path, "--locate", "--json", "--locate-dir", tmp_path / "here")
    assert code == 1, out
    here = json.loads(out)["locate"]
    r = run_mpi(
        3, *mnrt_command(), "run", "--mpi", path, "--locate", "--json",
        "--locate-dir", tmp_path / "ranks",
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    there = json.loads(r.stdout)["locate"]
    assert there["first_divergent"] == here["first_divergent"]
    assert there["first_divergent"]["op"] == "add"
    assert (there["compared"], there["divergent"]) == (2, 1)
    folder = Path(there["saved_to"])
    assert folder.parent == tmp_path / "ranks" and (folder / "site.json").is_file()
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        p.name for p in Path(here["saved_to"]).iterdir()
    )


def test_a_pipeline_sample_replays_on_two_ranks(tmp_path):
    expected = in_process_outputs(SAMPLES / "pipeline.mnlb", tmp_path / "local")
    r = run_mpi(
        2, *mnrt_command(), "run", "--mpi", SAMPLES / "pipeline.mnlb", "--loops", "3",
        "--save-outputs", tmp_path / "mpi",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert saved(tmp_path / "mpi") == expected


def test_each_rank_writes_the_profile_of_its_own_devices(tmp_path):
    trace = tmp_path / "trace.json"
    r = run_mpi(
        2, *mnrt_command(), "run", "--mpi", SAMPLES / "two_devices.mnlb", "--profile", trace
    )
    assert r.returncode == 0, r.stderr
    for path, device in ((trace, "device 0"), (tmp_path / "trace.rank1.json", "device 1")):
        events = json.loads(path.read_text())["traceEvents"]
        processes = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
        assert any(p.startswith(device) for p in processes), processes
        assert not any(p.startswith("device") and not p.startswith(device) for p in processes)


def per_rank_exit(folder: Path, *command) -> list[str]:
    """A rank's command wrapped to leave its own exit code in folder/exit.<rank>."""
    script = f'"$@"; echo $? > {folder}/exit.$PMI_RANK'
    return ["sh", "-c", script, "sh", *map(str, command)]


def exits(folder: Path, ranks: int) -> list[int]:
    return [int((folder / f"exit.{r}").read_text()) for r in range(ranks)]


def test_every_rank_exits_with_the_code_of_a_golden_mismatch(ring, tmp_path):
    wrong = tmp_path / "wrong.npy"
    np.save(wrong, np.zeros((SIDE, SIDE), np.float32))
    command = [*mnrt_command(), "run", "--mpi", ring, "--expected", f"out3={wrong}"]
    r = run_mpi(2, *per_rank_exit(tmp_path, *command))
    assert exits(tmp_path, 2) == [1, 1], r.stderr
    assert "FAIL" in r.stdout


@pytest.mark.parametrize(
    ("ranks", "options", "message"),
    [
        (3, [], "3 ranks for a binary of 2 logical device(s): each rank replays at least one"),
        (2, ["--device-map", "zero"], "--device-map entry 'zero' is not LOGICAL:DEVICE"),
        (2, ["--device", "x"], "--device 'x': use 'auto' or a device index"),
        (
            2,
            ["--devices", "1"],
            "devices=1, but 2 ranks replay the binary, each on devices of its own process; "
            "give at least 2",
        ),
        (
            2,
            ["--device-map", "0:1,1:1"],
            "device_map puts logical devices 0 and 1 on runner device 1, but ranks 0 and 1",
        ),
    ],
)
def test_a_job_refused_before_the_replay_ends_every_rank_with_one_line(
    tmp_path, ranks, options, message
):
    command = [*mnrt_command(), "run", "--mpi", SAMPLES / "two_devices.mnlb", *options]
    r = run_mpi(ranks, *per_rank_exit(tmp_path, *command))
    assert exits(tmp_path, ranks) == [2] * ranks, r.stderr
    assert r.stderr.count("mnrt: error:") == 1  # rank 0 says it, once
    assert message in r.stderr


def test_a_bad_file_on_one_rank_ends_every_rank_with_its_code(ring, tmp_path):
    bad = tmp_path / "bad.mnlb"
    bad.write_bytes(ring.read_bytes()[:100])
    good, broken = ([*mnrt_command(), "run", "--mpi", path] for path in (ring, bad))
    r = run_mpmd(per_rank_exit(tmp_path, *good), per_rank_exit(tmp_path, *broken))
    assert exits(tmp_path, 2) == [2, 2], r.stderr
    line = next(x for x in r.stderr.splitlines() if x.startswith("mnrt: error:"))
    assert line.startswith("mnrt: error: rank 1: ")
    r = run_mpmd([*good, "--json"], [*broken, "--json"])
    assert r.returncode == 2, r.stderr
    error = json.loads(r.stdout)["error"]  # rank 0's one document names rank 1's error
    assert error["type"] == "InvalidBinaryError" and error["message"].startswith("rank 1: ")


def test_ranks_given_different_binaries_are_refused(ring, tmp_path):
    other = ring_binary(tmp_path / "other.mnlb", devices=2)
    r = run_mpmd(
        per_rank_exit(tmp_path, *mnrt_command(), "run", "--mpi", SAMPLES / "two_devices.mnlb"),
        per_rank_exit(tmp_path, *mnrt_command(), "run", "--mpi", other),
    )
    assert exits(tmp_path, 2) == [2, 2], r.stderr
    assert "the ranks were given different binaries" in r.stderr


def test_a_device_error_on_one_rank_ends_every_rank(tmp_path):
    """Rank 1's process has one emulated device for its two logical ones: it fails as the
    replay begins, while rank 0 already waits for its copies."""
    command = [*mnrt_command(), "run", "--mpi", SAMPLES / "pipeline.mnlb"]
    r = run_mpmd(command, ["env", "MNRT_DEVICE_COUNT=1", *map(str, command)])
    assert r.returncode == 3, r.stderr  # the failing rank's code, through MPI_Abort
    assert "mnrt: error: rank 1:" in r.stderr


FAIL_MID_REPLAY = """
import sys
from mnrt.errors import DeviceExecutionError
from mnrt.replay import executor
from mnrt.runner.cli import main
calls = []
real = executor.Executor.enqueue_program
def failing(self, c):
    calls.append(c)
    if len(calls) == 3:
        raise DeviceExecutionError("the PE array of this rank failed")
    return real(self, c)
executor.Executor.enqueue_program = failing
sys.argv = ["mnrt", *sys.argv[1:]]
main()
"""

STUCK_MID_REPLAY = """
import sys, time
from mnrt.replay import executor
from mnrt.runner.cli import main
real = executor.Executor.enqueue_program
def stuck(self, c):
    time.sleep(60)
    return real(self, c)
executor.Executor.enqueue_program = stuck
sys.argv = ["mnrt", *sys.argv[1:]]
main()
"""

KILLED_MID_REPLAY = """
import os, signal, sys, threading
from mnrt.runner.cli import main
threading.Timer(2.0, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
sys.argv = ["mnrt", *sys.argv[1:]]
main()
"""


def test_an_error_mid_replay_on_one_rank_ends_every_rank(ring):
    args = ["run", "--mpi", ring, "--loops", "1000000"]
    r = run_mpmd([*mnrt_command(), *args], [sys.executable, "-c", FAIL_MID_REPLAY, *map(str, args)])
    assert r.returncode == 3, r.stderr
    assert "mnrt: error: rank 1: the PE array of this rank failed" in r.stderr


def test_a_failure_mid_replay_is_a_json_document_and_rank_0_writes_its_report(ring, tmp_path):
    report = tmp_path / "report.json"
    args = ["run", "--mpi", ring, "--loops", "1000000", "--json", "--report", report]
    failing = [sys.executable, "-c", FAIL_MID_REPLAY, *map(str, args)]
    r = run_mpmd([*mnrt_command(), *args], failing)  # rank 1 fails: its document
    assert r.returncode == 3, r.stderr
    doc = json.loads(r.stdout)
    assert doc["error"]["rank"] == 1 and doc["error"]["type"] == "DeviceExecutionError"
    r = run_mpmd(failing, [*mnrt_command(), *args])  # rank 0 fails: the report so far
    assert r.returncode == 3, r.stderr
    written = json.loads(report.read_text())
    assert written == json.loads(r.stdout)
    assert written["error"]["message"] == "the PE array of this rank failed"
    assert written["rank"] == 0 and written["ranks"] == 2


def test_a_wait_past_mpi_timeout_ends_the_job(ring):
    """Rank 1 hangs in its first program; rank 0 gives up waiting for it after 1 s."""
    args = ["run", "--mpi", ring, "--mpi-timeout", "1"]
    r = run_mpmd([*mnrt_command(), *args], [sys.executable, "-c", STUCK_MID_REPLAY, *args])
    assert r.returncode == 3, r.stderr
    assert "mnrt: error: rank 0: waited 1 s for" in r.stderr


def test_a_rank_killed_mid_replay_ends_every_rank(ring):
    args = ["run", "--mpi", ring, "--loops", "1000000"]
    r = run_mpmd(
        [*mnrt_command(), *args], [sys.executable, "-c", KILLED_MID_REPLAY, *map(str, args)]
    )
    assert r.returncode != 0
    assert "signal 9" in r.stdout + r.stderr


def test_mpi_without_the_extra_is_a_usage_error_naming_it(tmp_path):
    """A fresh process where mpi4py cannot be imported: exit 2, pip install mnrt[mpi]; and a
    plain `mnrt run` there never imports it."""
    script = """
import sys
sys.modules["mpi4py"] = None  # as if not installed
from mnrt.runner.cli import main
sys.argv = ["mnrt", *sys.argv[1:]]
try:
    main()
finally:
    print("mpi4py loaded:", sys.modules.get("mpi4py") is not None)
"""
    sample = SAMPLES / "two_devices.mnlb"
    r = subprocess.run(
        [sys.executable, "-c", script, "run", "--mpi", sample], capture_output=True, text=True
    )
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "pip install mnrt[mpi]" in r.stderr
    r = subprocess.run(
        [sys.executable, "-c", script, "run", sample], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert "mpi4py loaded: False" in r.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mpi-timeout", "5"], "--mpi-timeout applies to --mpi runs only"),
        (["--mpi", "--mpi-timeout", "0"], "--mpi-timeout"),
        (["--mpi", "--mpi-timeout", "nan"], "is not a finite number"),
    ],
)
def test_mpi_options_that_do_not_fit_are_refused(args, message):
    code, out = invoke_cli("run", SAMPLES / "two_devices.mnlb", *args)
    assert code == 2 and message in out, out
