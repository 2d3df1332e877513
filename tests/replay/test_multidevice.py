"""Binaries that span devices: copies and events captured, verified and replayed."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_harness import assert_one_line_error, invoke_cli
from hostile import edited
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.format import jsonio
from mnrt.replay.plan import validate


def two_device_session() -> np.ndarray:
    """Device 0 computes, copies to device 1, which waits on the copy's event and computes
    on; the host reads device 1's result. Returns it."""
    rng = np.random.default_rng(3)
    with mnrt.open_device(0) as d0, mnrt.open_device(1) as d1:
        q0, q1 = d0.command_queue(0), d1.command_queue(0)
        x = d0.create_buffer((8, 16), "float", name="x")
        w = d0.create_buffer((16, 16), "float", name="w")
        h = d0.create_buffer((8, 16), "float", name="h")
        h1 = d1.create_buffer((8, 16), "float", name="h_on_1")
        y = d1.create_buffer((8, 16), "float", name="y")
        first = d0.create_program([mnrt.Kernel("gemm", ["x", "w"], ["h"])], name="stage0")
        second = d1.create_program([mnrt.Kernel("tanh", ["h"], ["y"])], name="stage1")
        q0.enqueue_write_buffer(x, rng.standard_normal((8, 16)).astype(np.float32))
        q0.enqueue_write_buffer(w, rng.standard_normal((16, 16)).astype(np.float32))
        q0.enqueue_program(first, {"x": x, "w": w, "h": h})
        q0.enqueue_copy_buffer(h, h1)
        q1.wait_event(q0.record_event())
        q1.enqueue_program(second, {"h": h1, "y": y})
        return q1.enqueue_read_buffer(y)


def pipeline_binary(devices: int = 4) -> mnrt.LightBinary:
    """Four (`devices`) devices in a chain, each adding one and copying on, the last read
    back."""
    mnrt.begin_capture()
    devs = [mnrt.open_device(i) for i in range(devices)]
    try:
        bufs = [d.create_buffer((6,), "float", name=f"x{i}") for i, d in enumerate(devs)]
        qs = [d.command_queue(0) for d in devs]
        one = [d.create_buffer((6,), "float", name=f"one{i}") for i, d in enumerate(devs)]
        progs = [d.create_program([mnrt.Kernel("add", ["x", "one"], ["x"])]) for d in devs]
        qs[0].enqueue_write_buffer(bufs[0], np.arange(6, dtype=np.float32))
        for i in range(devices):
            qs[i].enqueue_write_buffer(one[i], np.ones(6, np.float32))
            qs[i].enqueue_program(progs[i], {"x": bufs[i], "one": one[i]})
            if i < devices - 1:
                qs[i].enqueue_copy_buffer(bufs[i], bufs[i + 1])
                qs[i + 1].wait_event(qs[i].record_event())
        qs[-1].enqueue_read_buffer(bufs[-1])
    finally:
        for d in devs:
            d.close()
    return mnrt.end_capture()


@pytest.fixture
def two_device_binary():
    mnrt.begin_capture()
    live = two_device_session()
    return mnrt.end_capture(), live


def types(binary) -> list[str]:
    return [
        json.loads(jsonio.dumps(binary))["commands"][i]["cmd"]["type"] for i in range(len(binary))
    ]


def test_two_device_capture_replays_bit_for_bit(two_device_binary):
    binary, live = two_device_binary
    assert binary.version == mnrt.format.FORMAT_VERSION and binary.device["device_count"] == 2
    kinds = types(binary)
    assert {"CopyBuffer", "RecordEvent", "WaitEvent"} <= set(kinds)
    assert kinds.index("CopyBuffer") < kinds.index("RecordEvent") < kinds.index("WaitEvent")
    report = mnrt.replay(binary)
    assert report.passed
    np.testing.assert_array_equal(report.outputs["y"], live)


def test_an_event_recorded_before_capture_began_is_recorded_at_its_first_use():
    with mnrt.open_device(0) as d0, mnrt.open_device(1) as d1:
        q0, q1 = d0.command_queue(0), d1.command_queue(0)
        a = d0.create_buffer((4,), "float", name="a")
        b = d1.create_buffer((4,), "float", name="b")
        q0.enqueue_write_buffer(a, np.arange(4, dtype=np.float32))
        ev = q0.record_event()
        mnrt.begin_capture()
        q1.wait_event(ev)
        q1.enqueue_copy_buffer(a, b)
        ev.wait()
        out = q1.enqueue_read_buffer(b)
        binary = mnrt.end_capture()
    kinds = types(binary)
    assert kinds.index("RecordEvent") < kinds.index("WaitEvent") < kinds.index("CopyBuffer")
    assert "Finish" in kinds  # the host's ev.wait()
    report = mnrt.replay(binary)
    assert report.passed
    np.testing.assert_array_equal(report.outputs["b"], out)


def _command(doc: dict, kind: str) -> dict:
    return next(c["cmd"] for c in doc["commands"] if c["cmd"]["type"] == kind)


def _ids(doc: dict, kind: str, field: str) -> int:
    return next(c["cmd"][field] for c in doc["commands"] if c["cmd"]["type"] == kind)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: _command(d, "WaitEvent").update(event_id=9999), "event id 9999 is used before"),
        (
            lambda d: _command(d, "WaitEvent").update(event_id=_ids(d, "CopyBuffer", "src_id")),
            "is a buffer, not a event",
        ),
        (
            lambda d: _command(d, "CopyBuffer").update(dst_id=_ids(d, "CopyBuffer", "src_id") - 1),
            "needs equal shapes and dtypes",
        ),
        (lambda d: _command(d, "CopyBuffer").update(copy_id=0), "copy id 0 is reserved"),
        (
            lambda d: _command(d, "CopyBuffer").update(copy_id=_ids(d, "RecordEvent", "event_id")),
            "defined twice",
        ),
        (
            lambda d: _command(d, "RecordEvent").update(event_id=_ids(d, "CopyBuffer", "src_id")),
            "defined twice",
        ),
    ],
)
def test_the_verifier_checks_every_id_of_the_new_commands(two_device_binary, edit, message):
    binary, _ = two_device_binary
    bad = edited(binary, edit)
    with pytest.raises(mnrt.InvalidBinaryError, match=message) as info:
        validate(bad)
    assert info.value.command is not None


def test_a_copy_on_a_third_devices_queue_is_refused(two_device_binary):
    binary, _ = two_device_binary

    def third_device(doc):
        cmds = doc["commands"]
        top = max(c["cmd"].get(k, 0) for c in cmds for k in c["cmd"] if k.endswith("_id"))
        extra = [
            {"cmd": {"type": "OpenDevice", "device_id": top + 1, "index": 2}},
            {"cmd": {"type": "OpenQueue", "queue_id": top + 2, "device_id": top + 1, "index": 0}},
        ]
        at = next(i for i, c in enumerate(cmds) if c["cmd"]["type"] == "CopyBuffer")
        cmds[at:at] = extra
        cmds[at + 2]["cmd"]["queue_id"] = top + 2

    with pytest.raises(mnrt.InvalidBinaryError, match="src buffer id .* dst buffer id"):
        validate(edited(binary, third_device))


def test_waiting_on_an_event_of_a_device_the_capture_closed_is_refused(two_device_binary):
    binary, _ = two_device_binary

    def reopen(doc):
        cmds = doc["commands"]
        at = next(i for i, c in enumerate(cmds) if c["cmd"]["type"] == "WaitEvent")
        cmds.insert(at, {"cmd": {"type": "OpenDevice", "device_id": 9000, "index": 0}})

    with pytest.raises(mnrt.InvalidBinaryError, match="closed before this wait"):
        validate(edited(binary, reopen))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_id_in_the_new_commands_verifies_or_is_refused_cleanly(two_device_binary, data):
    """Whatever ids a hostile file puts in the new commands, replay either runs or raises an
    MnrtError: never another exception, never a hang."""
    binary, _ = two_device_binary
    kind = data.draw(st.sampled_from(["CopyBuffer", "RecordEvent", "WaitEvent"]))
    fields = {"CopyBuffer": ["queue_id", "src_id", "dst_id", "copy_id"]}.get(
        kind, ["queue_id", "event_id"]
    )
    field = data.draw(st.sampled_from(fields))
    value = data.draw(st.integers(0, 20) | st.integers(0, 2**32 - 1))
    bad = edited(binary, lambda d: _command(d, kind).update({field: value}))
    try:
        report = mnrt.replay(bad)
    except mnrt.MnrtError:
        return
    assert isinstance(report.passed, bool)


@pytest.mark.parametrize(
    ("placement", "runner_devices"),
    [
        ({"device_map": {0: 0, 1: 0, 2: 1, 3: 1}}, [0, 1]),
        ({"devices": 2}, [0, 1]),
        ({"devices": 1}, [0]),
        ({"device_map": {0: 5, 1: 2, 2: 5, 3: 2}}, [2, 5]),
    ],
)
def test_folded_placements_give_the_same_goldens_and_both_timelines(placement, runner_devices):
    binary = pipeline_binary()
    alone = mnrt.replay(binary)
    folded = mnrt.replay(binary, **placement)
    assert folded.passed and alone.passed
    np.testing.assert_array_equal(folded.outputs["x3"], alone.outputs["x3"])
    np.testing.assert_array_equal(folded.outputs["x3"], np.arange(6) + 4)
    assert folded.modelled == alone.modelled
    assert [d["index"] for d in alone.modelled["devices"]] == [0, 1, 2, 3]
    as_run = folded.modelled_as_run
    assert [d["index"] for d in as_run["devices"]] == runner_devices
    assert set(as_run) == {"makespan_s", "energy_j", "idle_energy_j", "bubble_fraction", "devices"}
    assert set(as_run["devices"][0]) == {"index", "busy_s", "energy_j", "idle_energy_j"}
    doc = json.loads(folded.to_json())
    assert doc["modelled"] == json.loads(json.dumps(folded.modelled))
    assert doc["modelled_as_run"]["devices"][0]["index"] == runner_devices[0]


def test_a_fold_keeps_folded_queues_apart():
    """Two logical devices on one runner device get two of its queues."""
    binary = pipeline_binary()
    seen = []
    real = mnrt.Device.command_queue

    def spy(self, index=0, *args, **kwargs):
        seen.append((self.index, index))
        return real(self, index, *args, **kwargs)

    mnrt.Device.command_queue = spy
    try:
        assert mnrt.replay(binary, devices=1).passed
    finally:
        mnrt.Device.command_queue = real
    assert sorted(set(seen)) == [(0, 0), (0, 1), (0, 2), (0, 3)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device-map", "0:0,1:0"], "leaves logical device 2, 3 unplaced"),
        (["--device-map", "0:0,1:0,2:1,3:99"], "no emulated device 99"),
        (["--device-map", "0:0,1:0,2:1,3:1,7:1"], "names logical device 7"),
        (["--device-map", "0-0"], "not LOGICAL:DEVICE"),
        (["--devices", "5"], "only 4 logical device"),
        (["--devices", "0"], "devices must be a whole number >= 1"),
        (["--devices", "2", "--device", "1"], "either device"),
    ],
)
def test_a_bad_placement_is_exit_2_with_one_line(tmp_path, args, message):
    path = tmp_path / "pipe.mnlb"
    pipeline_binary().save(path)
    assert_one_line_error(*invoke_cli("run", path, *args), message)


def test_mnrt_run_folds_and_reports_both_timelines(tmp_path):
    path = tmp_path / "pipe.mnlb"
    pipeline_binary().save(path)
    code, out = invoke_cli("run", path, "--device-map", "0:0,1:0,2:1,3:1", "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["passed"] and len(doc["modelled"]["devices"]) == 4
    assert len(doc["modelled_as_run"]["devices"]) == 2


def test_info_and_dump_show_copies_and_events(tmp_path, two_device_binary):
    binary, _ = two_device_binary
    path = tmp_path / "two.mnlb"
    binary.save(path)
    code, out = invoke_cli("info", path)
    assert code == 0 and "captured as 0, 1" in out
    assert "copies:    0 on one device, 1 between devices (512 B); events: 1" in out
    code, out = invoke_cli("info", path, "--json")
    assert json.loads(out)["copies"] == {"local": 0, "cross_device": 1, "cross_device_bytes": 512}
    code, out = invoke_cli("dump", path, "--json")
    commands = [c["cmd"] for c in json.loads(out)["commands"]]
    copy = next(c for c in commands if c["type"] == "CopyBuffer")
    record = next(c for c in commands if c["type"] == "RecordEvent")
    wait = next(c for c in commands if c["type"] == "WaitEvent")
    assert set(copy) == {"type", "queue_id", "src_id", "dst_id", "blocking", "copy_id"}
    assert wait["event_id"] == record["event_id"] and wait["queue_id"] != record["queue_id"]


def test_a_snapshot_another_devices_queue_copies_from_lands_before_the_copy():
    """A buffer made before capture began is snapshotted through its device's queue; when
    only another device's queue uses it (a pulling copy), the snapshot must block on replay
    or the copy could read the buffer before it."""
    with mnrt.open_device(0) as d0, mnrt.open_device(1) as d1:
        a = d0.create_buffer((1024,), "float", name="a")
        d0.command_queue(0).enqueue_write_buffer(a, np.arange(1024, dtype=np.float32))
        mnrt.begin_capture()
        b = d1.create_buffer((1024,), "float", name="b")
        q1 = d1.command_queue(0)
        q1.enqueue_copy_buffer(a, b)
        q1.enqueue_read_buffer(b)
        binary = mnrt.end_capture()
    doc = json.loads(jsonio.dumps(binary))
    writes = [c["cmd"] for c in doc["commands"] if c["cmd"]["type"] == "WriteBuffer"]
    assert len(writes) == 1 and writes[0]["blocking"]
    for _ in range(5):
        assert mnrt.replay(binary).passed


def test_a_runner_with_fewer_devices_than_the_binary_folds_it(monkeypatch):
    binary = pipeline_binary()
    monkeypatch.setenv("MNRT_DEVICE_COUNT", "2")
    with pytest.raises(mnrt.DeviceBusyError, match="--devices N"):
        mnrt.replay(binary)
    report = mnrt.replay(binary, devices=2)
    assert report.passed and [d["index"] for d in report.modelled_as_run["devices"]] == [0, 1]


def test_devices_that_allocate_while_another_captures_a_trace_are_not_folded_together():
    """Capture puts allocations ahead of a trace being captured; a binary made otherwise
    (device 1 allocating while device 0 captures) replays on two devices, not on one."""
    mnrt.begin_capture()
    with mnrt.open_device(0) as d0, mnrt.open_device(1) as d1:
        q0 = d0.command_queue(0)
        x = d0.create_buffer((2,), "float", name="x")
        inc = d0.create_program([mnrt.Kernel("add", ["x", "x"], ["x"])])
        q0.enqueue_write_buffer(x, np.ones(2, np.float32))
        y = d1.create_buffer((2,), "float", name="y")
        tid = q0.begin_trace_capture()
        q0.enqueue_program(inc, {"x": x})
        q0.end_trace_capture(tid)
        q0.replay_trace(tid)
        d1.command_queue(0).enqueue_write_buffer(y, np.ones(2, np.float32))
        q0.enqueue_read_buffer(x)
    binary = mnrt.end_capture()

    def allocate_inside(doc):
        cmds = doc["commands"]
        at = next(i for i, c in enumerate(cmds) if c["cmd"].get("desc", {}).get("name") == "y")
        create = cmds.pop(at)
        begin = next(i for i, c in enumerate(cmds) if c["cmd"]["type"] == "BeginTraceCapture")
        cmds.insert(begin + 1, create)

    inside = edited(binary, allocate_inside)
    assert mnrt.replay(inside).passed
    with pytest.raises(mnrt.InvalidArgumentError, match="cannot share runner device 0"):
        mnrt.replay(inside, devices=1)
    assert mnrt.replay(inside, device_map={0: 1, 1: 0}).passed


def test_mnrt_bench_folds_too(tmp_path):
    path = tmp_path / "pipe.mnlb"
    pipeline_binary().save(path)
    code, out = invoke_cli("bench", path, "--devices", "1", "--loops", "2", "--json")
    assert code == 0, out
    assert json.loads(out)["passed"]
    assert invoke_cli("bench", path, "--device-map", "0:0")[0] == 2
