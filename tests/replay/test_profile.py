"""Replay profiles (`replay(..., profile=True)`, `mnrt run --profile`): Chrome trace-event JSON
that Perfetto opens. The checks are the rules a trace viewer relies on (slices on one thread
nest, flows join two slices) and that the trace tells the truth about the replay (one slice
per command, per kernel, modelled times that add up to the report's)."""

from __future__ import annotations

import contextlib
import itertools
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from binaries import three_device_capture
from click.testing import CliRunner

import mnrt
from mnrt.errors import EXIT_GOLDEN_MISMATCH, EXIT_USAGE, MnrtError
from mnrt.format.files import write_atomically
from mnrt.replay.executor import COMMAND_NAMES
from mnrt.runner.cli import cli

KERNELS = ("exp", "relu")


@pytest.fixture
def traced_binary():
    """Every kind of queue command: writes, a two-kernel program run directly and through a
    device trace, reads with goldens, and a buffer freed midway."""
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture()
        a = dev.create_buffer((4, 8), "float", name="a")
        t = dev.create_buffer((4, 8), "float", name="t")
        y = dev.create_buffer((4, 8), "float", name="y")
        scratch = dev.create_buffer((1024,), "float", name="scratch")
        prog = dev.create_program(
            [mnrt.Kernel("exp", ["a"], ["t"]), mnrt.Kernel("relu", ["t"], ["y"])], name="p"
        )
        q.enqueue_write_buffer(a, np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8))
        q.enqueue_program(prog, {"a": a, "t": t, "y": y})
        q.enqueue_read_buffer(y)
        scratch.deallocate()
        tid = q.begin_trace_capture()
        q.enqueue_program(prog, {"a": y, "t": t, "y": a})
        q.end_trace_capture(tid)
        q.replay_trace(tid)
        q.enqueue_read_buffer(a)
        return mnrt.end_capture()


def _slices(trace: dict) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def test_profile_is_strict_json_with_one_slice_per_command_and_kernel(traced_binary, assert_nested):
    loops = 2
    report = mnrt.replay(traced_binary, loops=loops, profile=True)
    assert report.passed
    trace = json.loads(json.dumps(report.profile.to_trace(), allow_nan=False))
    slices = _slices(trace)
    assert all(s["ts"] >= 0 and s["dur"] >= 0 for s in slices)
    assert_nested(slices)

    host = [s for s in slices if s["pid"] == 0]
    assert [s["name"] for s in host if s["name"].startswith("loop")] == ["loop 1", "loop 2"]
    replayed = Counter(s["name"] for s in host if s["name"] in COMMAND_NAMES.values())
    expected = Counter(COMMAND_NAMES[c.cmdType] for c in traced_binary.commands)
    assert replayed == Counter({k: loops * n for k, n in expected.items()})
    assert {s["args"]["buffer"] for s in host if s["name"] == "create_buffer"} == {
        "a", "t", "y", "scratch"
    }  # fmt: skip

    devices = [s for s in slices if s["pid"] != 0]
    wall = [s for s in devices if s["tid"] % 2 == 1]
    modelled = [s for s in devices if s["tid"] % 2 == 0]
    # The program ran directly (its kernels timed one by one) and inside the device trace.
    assert Counter(s["name"] for s in wall if s["name"] in KERNELS) == {"exp": loops, "relu": loops}
    assert Counter(s["name"] for s in modelled if s["name"] in KERNELS) == {
        "exp": loops, "relu": loops
    }  # fmt: skip
    assert sum(s["name"].startswith("replay_trace") for s in wall) == loops
    kernel = next(s for s in wall if s["name"] == "exp")
    assert kernel["args"]["inputs"] == ["a float[4, 8]"]
    assert kernel["args"]["modelled_us"] > 0


def test_modelled_track_adds_up_to_the_reported_device_time(traced_binary):
    report = mnrt.replay(traced_binary, profile=True)
    trace = report.profile.to_trace()
    kernels = set(KERNELS)
    top = [s for s in _slices(trace) if s["pid"] != 0 and s["tid"] % 2 == 0]
    commands = [s for s in top if s["name"] not in kernels]
    total_us = sum(s["dur"] for s in commands)
    assert total_us == pytest.approx(report.timings["device_time_s"] * 1e6, abs=1e-3 * len(top))
    # Back to back: each command starts where the one before it ended.
    commands.sort(key=lambda s: s["ts"])
    for before, after in itertools.pairwise(commands):
        assert after["ts"] == pytest.approx(before["ts"] + before["dur"], abs=2e-3)


def test_flows_join_the_enqueueing_command_to_the_queue_command_it_made(traced_binary):
    trace = mnrt.replay(traced_binary, profile=True).profile.to_trace()
    events = trace["traceEvents"]
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts and starts.keys() == finishes.keys()
    slices = _slices(trace)

    def holder(e):
        return [
            s
            for s in slices
            if (s["pid"], s["tid"]) == (e["pid"], e["tid"])
            and s["ts"] <= e["ts"] <= s["ts"] + s["dur"]
        ]

    for flow_id, s in starts.items():
        names = {h["name"] for h in holder(s)}
        assert names & {"write_buffer", "read_buffer", "enqueue_program", "replay_trace"}, names
        f = finishes[flow_id]
        assert f["bp"] == "e" and any(h["ts"] == f["ts"] for h in holder(f))


def test_memory_counter_follows_allocations_and_ends_at_zero(traced_binary):
    trace = mnrt.replay(traced_binary, profile=True).profile.to_trace()
    samples = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    used = [e["args"]["bytes"] for e in sorted(samples, key=lambda e: e["ts"])]
    assert used[-1] == 0
    assert max(used) >= 3 * 4 * 8 * 4 + 1024 * 4  # all four buffers at once
    assert used[used.index(max(used)) + 1] < max(used)  # the scratch buffer was freed
    names = {e["args"].get("name") for e in trace["traceEvents"] if e["ph"] == "M"}
    assert "queue 0: modelled MN-Core time" in names and "mnrt replay (host)" in names


@pytest.fixture
def wrong_golden_binary():
    """A capture whose user-supplied golden is wrong, so every replay of it fails."""
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture()
        y = dev.create_buffer((3,), "float", name="y")
        q.enqueue_write_buffer(y, np.ones(3, np.float32))
        mnrt.compare_to_golden(q, y, np.zeros(3, np.float32), name="wrong")
        return mnrt.end_capture()


def test_a_failed_golden_shows_in_the_trace(wrong_golden_binary):
    report = mnrt.replay(wrong_golden_binary, profile=True)
    assert not report.passed
    slices = _slices(report.profile.to_trace())
    verify = next(s for s in slices if s["name"] == "verify goldens")
    assert verify["args"]["wrong"]["passed"] is False
    assert verify["args"]["wrong"]["mismatches"] == 3
    assert next(s for s in slices if s["name"] == "loop 1")["args"]["passed"] is False


def test_no_profile_unless_asked(small_binary):
    assert mnrt.replay(small_binary).profile is None


def test_cli_writes_the_profile_even_when_goldens_mismatch(
    tmp_path, small_binary, wrong_golden_binary
):
    out = tmp_path / "trace.json"
    for binary, code in ((small_binary, 0), (wrong_golden_binary, EXIT_GOLDEN_MISMATCH)):
        path = tmp_path / "m.mnlb"
        binary.save(path)
        out.unlink(missing_ok=True)
        result = CliRunner().invoke(cli, ["run", str(path), "--loops", "2", "--profile", str(out)])
        assert result.exit_code == code, result.output
        trace = json.loads(out.read_text())
        assert trace["otherData"]["loops"] == 2
        assert sum(s["name"] == "verify goldens" for s in _slices(trace)) == 2


def test_cli_profile_to_an_unwritable_place_is_one_line(tmp_path, small_binary):
    path = tmp_path / "m.mnlb"
    small_binary.save(path)
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = CliRunner().invoke(cli, ["run", str(path), "--profile", str(blocker / "t.json")])
    assert result.exit_code == EXIT_USAGE
    assert result.output.count("\n") == 1 and "cannot write" in result.output


def test_write_atomic_leaves_the_old_file_when_the_write_fails(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    target.write_text("old")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("mnrt.format.files.os.replace", broken_replace)
    with pytest.raises(MnrtError, match="No space left"):
        write_atomically(target, b"new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temporary left behind


@pytest.fixture
def failing_binary(tmp_path, failing_gather):
    """A capture whose program fails on the device (a gather index out of range)."""
    path = tmp_path / "fails.mnlb"
    with mnrt.open_device(0) as dev:
        q = dev.command_queue()
        with mnrt.capture(path):
            failing_gather(dev, q)
        with contextlib.suppress(mnrt.DeviceExecutionError):
            q.finish()
    return path


def test_a_device_error_keeps_the_profile_up_to_the_failure(failing_binary, assert_nested):
    with pytest.raises(mnrt.DeviceExecutionError) as caught:
        mnrt.replay(failing_binary, profile=True)
    trace = caught.value.profile.to_trace()
    assert_nested(_slices(trace))
    loop = next(s for s in _slices(trace) if s["name"] == "loop 1")
    assert loop["args"]["passed"] is False and "out of range" in loop["args"]["error"]
    failed = sorted(s["name"] for s in _slices(trace) if s["args"].get("status") == "failed")
    assert len(failed) == 2 and failed[0] == "gather" and failed[1].startswith("program '")
    assert not any(s["name"] == "verify goldens" for s in _slices(trace))  # nothing checked


def test_cli_saves_the_partial_profile_and_exits_3(tmp_path, failing_binary):
    out = tmp_path / "trace.json"
    result = CliRunner().invoke(cli, ["run", str(failing_binary), "--profile", str(out)])
    assert result.exit_code == 3, result.output
    kernels = [s for s in _slices(json.loads(out.read_text())) if s["name"] == "gather"]
    assert [s["args"].get("status") for s in kernels] == ["failed"]


def test_a_nan_attribute_stays_strict_json(tmp_path):
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture(goldens=False)
        y = dev.create_buffer((2,), "float", name="y")
        nan = mnrt.Kernel("fill", [], ["y"], {"value": float("nan"), "shape": [2]})
        fill = dev.create_program([nan])
        q.enqueue_program(fill, {"y": y})
        q.finish()
        binary = mnrt.end_capture()
    out = tmp_path / "t.json"
    mnrt.replay(binary, profile=True).profile.save(out)
    trace = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    fills = [s for s in _slices(trace) if s["name"] == "fill"]
    assert fills and all(s["args"]["attrs"]["value"] == "nan" for s in fills)


def test_two_devices_with_two_queues_each_get_their_own_tracks(assert_nested):
    devices = [mnrt.open_device(0), mnrt.open_device(1)]
    mnrt.begin_capture()
    for d in devices:
        a = d.create_buffer((4,), "float", name=f"a{d.index}")
        y = d.create_buffer((4,), "float", name=f"y{d.index}")
        prog = d.create_program([mnrt.Kernel("exp", ["a"], ["y"])])
        d.command_queue(0).enqueue_write_buffer(a, np.ones(4, np.float32))
        d.command_queue(0).finish()
        d.command_queue(1).enqueue_program(prog, {"a": a, "y": y})
        d.command_queue(1).enqueue_read_buffer(y)
    binary = mnrt.end_capture()
    for d in devices:
        d.close()
    trace = mnrt.replay(binary, loops=2, profile=True).profile.to_trace()
    assert_nested(_slices(trace))
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {f"queue {i}: {what}" for i in (0, 1) for what in (
        "emulator (host wall time)", "modelled MN-Core time")} <= threads  # fmt: skip
    tracks = {(s["pid"], s["tid"]) for s in _slices(trace) if s["pid"]}
    assert tracks == {(pid, tid) for pid in (1, 2) for tid in (1, 2, 3, 4)}


@pytest.mark.parametrize("sample", ["mlp.mnlb", "traced_loop.mnlb"])
def test_profiles_of_the_committed_samples_are_well_formed(sample, assert_nested):
    path = Path(__file__).resolve().parents[2] / "samples" / sample
    report = mnrt.replay(path, profile=True)
    trace = json.loads(json.dumps(report.profile.to_trace(), allow_nan=False))
    assert_nested(_slices(trace))
    host = [s for s in _slices(trace) if s["pid"] == 0 and s["name"] in COMMAND_NAMES.values()]
    assert len(host) == len(report.binary)


def test_loops_past_the_traced_ones_are_counted_not_kept(traced_binary, monkeypatch):
    from mnrt.replay import profile as profile_module

    monkeypatch.setattr(profile_module, "MAX_TRACED_LOOPS", 2)
    trace = mnrt.replay(traced_binary, loops=5, profile=True).profile.to_trace()
    loops = [e["name"] for e in trace["traceEvents"] if e["name"].startswith("loop ")]
    assert loops == ["loop 1", "loop 2"]
    assert trace["otherData"]["loops"] == 5
    assert trace["otherData"]["passing_loops_not_traced"] == 3


def _two_devices_two_queues_binary() -> mnrt.LightBinary:
    devices = [mnrt.open_device(0), mnrt.open_device(1)]
    mnrt.begin_capture()
    for d in devices:
        a = d.create_buffer((4,), "float", name=f"a{d.index}")
        y = d.create_buffer((4,), "float", name=f"y{d.index}")
        prog = d.create_program([mnrt.Kernel("exp", ["a"], ["y"])])
        for queue in (0, 1):
            d.command_queue(queue).enqueue_write_buffer(a, np.ones(4, np.float32))
            d.command_queue(queue).finish()
            d.command_queue(queue).enqueue_program(prog, {"a": a, "y": y})
            d.command_queue(queue).enqueue_read_buffer(y)
    binary = mnrt.end_capture()
    for d in devices:
        d.close()
    return binary


@pytest.mark.parametrize("binary", ["traced", "two devices"])
def test_every_track_name_is_on_the_track_whose_events_it_names(traced_binary, binary):
    # A queue's track names were written with the process id as their thread id: the
    # names landed on other tracks (or twice on one) and left tracks unnamed.
    chosen = traced_binary if binary == "traced" else _two_devices_two_queues_binary()
    trace = mnrt.replay(chosen, profile=True).profile.to_trace()
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    threads = Counter((e["pid"], e["tid"]) for e in meta if e["name"] == "thread_name")
    processes = Counter(e["pid"] for e in meta if e["name"] == "process_name")
    assert max(threads.values()) == 1 and max(processes.values()) == 1  # one name a track
    slices = _slices(trace)
    assert set(threads) == {(s["pid"], s["tid"]) for s in slices}
    assert set(processes) == {s["pid"] for s in slices}
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    for s in slices:
        name = names[s["pid"], s["tid"]]
        if "emulator (host wall time)" in name:
            assert "status" in s["args"] or "kernel" in s["args"], (name, s)
        elif "modelled MN-Core time" in name:
            assert "status" not in s["args"] and "modelled_us" in s["args"], (name, s)
        else:
            assert s["pid"] == 0 and name == "replayed commands", (name, s)


@pytest.fixture
def three_device_binary():
    return three_device_capture()


def _enclosing(slices, pid, tid, ts):
    return [
        s for s in slices
        if (s["pid"], s["tid"]) == (pid, tid) and s["ts"] <= ts <= s["ts"] + s["dur"]
    ]  # fmt: skip


@pytest.mark.parametrize("devices", [None, 1], ids=["three devices", "folded onto one"])
def test_every_modelled_event_sits_on_its_devices_track_and_every_flow_has_both_ends(
    three_device_binary, assert_nested, devices
):
    report = mnrt.replay(three_device_binary, loops=2, profile=True, devices=devices)
    assert report.passed
    trace = json.loads(json.dumps(report.profile.to_trace(), allow_nan=False))
    events, slices = trace["traceEvents"], _slices(trace)
    assert_nested(slices)
    meta = [e for e in events if e["ph"] == "M"]
    process = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    thread = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    # One process per captured device, named for the runner device it replayed on.
    runner = [report.modelled_as_run["devices"][0]["index"]] * 3 if devices else range(3)
    assert sorted(n for p, n in process.items() if p) == [
        f"device {i} (mnc2emu{r})" for i, r in zip(range(3), runner)
    ]
    # One process per device, a modelled and a wall track per queue, named where they sit.
    for s in slices:
        assert (s["pid"], s["tid"]) in thread, s
        if "device" in s["args"]:  # a modelled slice: on the device it ran on
            assert process[s["pid"]].startswith(f"device {s['args']['device']} "), s
    modelled = [s for s in slices if "modelled" in thread[s["pid"], s["tid"]]]
    assert {thread[s["pid"], s["tid"]] for s in modelled} == {
        "queue 0: modelled MN-Core time",
        "queue 1: modelled MN-Core time",
        "link in: copies into this device (modelled)",
        "link out: copies out of this device (modelled)",
    }
    # Every flow has one start and one end, each on a slice of a named track.
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == ends.keys()
    assert len(starts) == sum(e["ph"] == "s" for e in events)
    for flow_id, s in starts.items():
        f = ends[flow_id]
        assert s["cat"] == f["cat"]
        for end in (s, f):
            assert _enclosing(slices, end["pid"], end["tid"], end["ts"]), end
    # Per loop: two copies, from the sender's device to the receiver's, and three waits.
    device_pid = {int(n.split()[1]): p for p, n in process.items() if p}
    copies = [(starts[i], ends[i]) for i in starts if starts[i]["cat"] == "copy"]
    assert sorted((s["pid"], f["pid"]) for s, f in copies) == sorted(
        2 * [(device_pid[0], device_pid[1]), (device_pid[2], device_pid[1])]
    )
    waits = [(starts[i], ends[i]) for i in starts if starts[i]["cat"] == "event"]
    assert len(waits) == 2 * 3
    for s, f in waits:
        source = {x["name"] for x in _enclosing(slices, s["pid"], s["tid"], s["ts"])}
        sink = {x["name"] for x in _enclosing(slices, f["pid"], f["tid"], f["ts"])}
        assert any(n.startswith("record_event") for n in source), source
        assert any(n.startswith("wait_event") for n in sink), sink
        assert f["ts"] >= s["ts"]


def test_the_modelled_tracks_follow_the_timeline_across_devices(three_device_binary):
    trace = mnrt.replay(three_device_binary, profile=True).profile.to_trace()
    slices = _slices(trace)
    modelled = [s for s in slices if "device" in s["args"] and "queue_command" in s["args"]]
    first = {s["name"]: s for s in modelled if s["tid"] % 2 == 0}
    add = next(s for n, s in first.items() if n.startswith("program"))
    copies = [s for n, s in first.items() if n.startswith("copy_buffer")]
    assert len(copies) == 2
    # Device 1's program starts only once both copies have landed; the copy pulled from
    # device 2 waited for device 2's write.
    assert all(add["ts"] >= c["ts"] + c["dur"] - 1e-3 for c in copies)
    write_z = next(s for n, s in first.items() if n == "write_buffer 'z'")
    pulled = next(c for c in copies if "'z'" in c["name"])
    assert pulled["ts"] >= write_z["ts"] + write_z["dur"] - 1e-3
    assert min(c["dur"] for c in copies) * 1e-6 >= mnrt.MNCORE2.link.latency_s - 1e-12


def test_each_rank_of_a_distributed_replay_profiles_its_own_devices(assert_nested):
    from test_multidevice import pipeline_binary
    from test_ranks import on_two_ranks

    reports, _ = on_two_ranks(pipeline_binary(), profile=True)
    assert reports[0].passed
    for rank, report in enumerate(reports):
        trace = json.loads(json.dumps(report.profile.to_trace(), allow_nan=False))
        slices = _slices(trace)
        assert_nested(slices)
        names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
        # Block distribution: devices 0, 1 on rank 0 and 2, 3 on rank 1.
        assert sorted(n.split(" (")[0] for n in names if n.startswith("device")) == [
            f"device {d}" for d in (2 * rank, 2 * rank + 1)
        ]
        starts = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "s"}
        ends = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "f"}
        assert starts.keys() == ends.keys()
        assert any(e["cat"] == "copy" for e in starts.values())  # between its own devices
        for end in [*starts.values(), *ends.values()]:
            assert _enclosing(slices, end["pid"], end["tid"], end["ts"]), end
