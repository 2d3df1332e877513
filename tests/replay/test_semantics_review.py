"""Semantic review of capture and replay: a binary captured from a real host program replays
to what the live run did (queues, threads, snapshots, device fill), on the devices asked for."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

import mnrt
from mnrt.capture.recorder import Recorder
from mnrt.format import jsonio
from mnrt.format.fb.CommandUnion import CommandUnion as U
from mnrt.host import CommandQueue
from mnrt.host.commands import ReplayTrace


def commands(binary: mnrt.LightBinary) -> list[dict]:
    return [c["cmd"] for c in json.loads(jsonio.dumps(binary))["commands"]]


def two_device_binary(indices=(0, 1)) -> mnrt.LightBinary:
    devs = [mnrt.open_device(i) for i in indices]
    mnrt.begin_capture()
    for d in devs:
        q = d.command_queue(0)
        b = d.create_buffer((4,), "float", name=f"b{d.index}")
        q.enqueue_write_buffer(b, np.arange(4, dtype=np.float32) + d.index)
        q.enqueue_read_buffer(b)
    binary = mnrt.end_capture()
    for d in devs:
        d.close()
    return binary


def test_snapshot_is_in_place_before_another_queue_uses_the_buffer(dev):
    # w was written before the capture; live, both queues' programs read its contents. On
    # replay its snapshot is written through q1: it must be in place before q0 reads it.
    q0, q1 = dev.command_queue(0), dev.command_queue(1)
    n = 1 << 16
    w = dev.create_buffer((n,), "float", name="w")
    y0 = dev.create_buffer((n,), "float", name="y0")
    y1 = dev.create_buffer((n,), "float", name="y1")
    e = dev.create_program([mnrt.Kernel("exp", ["a"], ["y"])], name="e")
    q0.enqueue_write_buffer(w, np.ones(n, np.float32), blocking=True)
    mnrt.begin_capture()
    q1.enqueue_program(e, {"a": w, "y": y1})
    q0.enqueue_program(e, {"a": w, "y": y0})  # both only read w: no race live
    q0.finish()
    q1.finish()
    q0.enqueue_read_buffer(y0)
    q1.enqueue_read_buffer(y1)
    binary = mnrt.end_capture()
    snapshot = next(c for c in commands(binary) if c["type"] == "WriteBuffer")
    assert snapshot["blocking"] is True
    dev.close()
    assert all(mnrt.replay(binary).passed for _ in range(3))


def test_threads_sharing_a_queue_are_logged_in_queue_order(dev, q, monkeypatch):
    # Thread A's write and thread B's program race for one queue; however the recording of
    # A's call is delayed, the log must hold the two in the order the queue ran them.
    x = dev.create_buffer((4,), "float", name="x")
    y = dev.create_buffer((4,), "float", name="y")
    double = dev.create_program([mnrt.Kernel("add", ["x", "x"], ["y"])], name="double")
    a_in_hook, b_done = threading.Event(), threading.Event()
    write = Recorder.write

    def slow_write(self, *args):
        if threading.current_thread().name == "A":
            a_in_hook.set()
            assert b_done.wait(10)
        return write(self, *args)

    mnrt.begin_capture()
    q.enqueue_write_buffer(x, np.zeros(4, np.float32))
    q.finish()
    monkeypatch.setattr(Recorder, "write", slow_write)
    a = threading.Thread(target=q.enqueue_write_buffer, args=(x, np.ones(4, np.float32)), name="A")
    a.start()
    assert a_in_hook.wait(10)
    q.enqueue_program(double, {"x": x, "y": y})
    b_done.set()
    a.join()
    q.finish()
    live = q.enqueue_read_buffer(y)
    binary = mnrt.end_capture()
    monkeypatch.undo()
    dev.close()
    report = mnrt.replay(binary)
    assert report.passed
    np.testing.assert_array_equal(report.outputs["y"], live)


def test_partial_device_mapping_puts_the_other_devices_elsewhere():
    binary = two_device_binary((0, 1))
    # Captured device 1 on runner 0: captured device 0 must not take runner 0 first.
    report = mnrt.replay(binary, device={1: 0})
    assert report.passed
    report = mnrt.replay(two_device_binary((5, 2)), device={2: 0})
    assert report.passed


def test_too_few_runner_devices_are_refused_before_anything_runs(monkeypatch):
    binary = two_device_binary((0, 1))
    monkeypatch.setenv("MNRT_DEVICE_COUNT", "1")
    with pytest.raises(mnrt.DeviceBusyError, match="uses 2 devices"):
        mnrt.replay(binary)
    with pytest.raises(mnrt.InvalidArgumentError, match="two captured devices on one"):
        mnrt.replay(binary, device={0: 0, 1: 0})


def test_fresh_buffers_read_zeros_on_a_runner_device_cleared_to_a_pattern(dev, q):
    mnrt.begin_capture()
    fresh = dev.create_buffer((4,), "float", name="fresh")
    assert not q.enqueue_read_buffer(fresh).any()
    binary = mnrt.end_capture()
    with mnrt.open_device(3) as other:
        other.clear(pattern=0x3F800000)  # 1.0f
    report = mnrt.replay(binary, device=3)
    assert report.passed and not report.outputs["fresh"].any()


def test_device_closed_and_reopened_during_capture_replays_on_one_device():
    mnrt.begin_capture()
    results = []
    for value in (1.0, 2.0):
        with mnrt.open_device(0) as d:
            q = d.command_queue(0)
            b = d.create_buffer((4,), "float", name="b")
            q.enqueue_write_buffer(b, np.full(4, value, np.float32))
            results.append(q.enqueue_read_buffer(b))
    binary = mnrt.end_capture()
    for device in ("auto", 0, {0: 2}):
        report = mnrt.replay(binary, device=device)
        assert report.passed and len(report.checks) == 2


def test_output_names_stay_unique_when_a_buffer_is_named_like_a_repeat(dev, q):
    # A second read of b is named b#<its command index>: here that of a buffer read before.
    mnrt.begin_capture()
    odd = dev.create_buffer((2,), "int32", name="b#8")
    b = dev.create_buffer((2,), "int32", name="b")
    q.enqueue_write_buffer(odd, np.array([7, 7], np.int32))
    q.enqueue_write_buffer(b, np.array([1, 2], np.int32))
    q.enqueue_read_buffer(odd)
    q.enqueue_read_buffer(b)
    q.enqueue_read_buffer(b)
    binary = mnrt.end_capture()
    dev.close()
    reads = [i for i, c in enumerate(commands(binary)) if c["type"] == "ReadBuffer"]
    assert reads[2] == 8
    report = mnrt.replay(binary)
    assert len(report.outputs) == 3 and report.outputs["b#8"].tolist() == [7, 7]


def test_a_replayed_trace_is_logged_where_it_ran_among_other_threads_commands(dev, q, monkeypatch):
    # Thread A's replay_trace is put on the queue, then held before it returns; meanwhile
    # thread B enqueues a program reading what the trace changes. The log must hold A's
    # replay first, as it ran, not after B's program.
    x = dev.create_buffer((4,), "float", name="x")
    y = dev.create_buffer((4,), "float", name="y")
    double_x = dev.create_program([mnrt.Kernel("add", ["x", "x"], ["x"])], name="double_x")
    y_of_x = dev.create_program([mnrt.Kernel("add", ["x", "x"], ["y"])], name="y_of_x")
    tid = q.begin_trace_capture()
    q.enqueue_program(double_x, {"x": x})
    q.end_trace_capture(tid)
    a_put, b_done = threading.Event(), threading.Event()
    submit = CommandQueue._submit

    def held_submit(self, cmd, *args):
        submit(self, cmd, *args)
        if threading.current_thread().name == "A" and isinstance(cmd, ReplayTrace):
            a_put.set()
            assert b_done.wait(10)

    mnrt.begin_capture()
    q.enqueue_write_buffer(x, np.ones(4, np.float32))
    q.finish()
    monkeypatch.setattr(CommandQueue, "_submit", held_submit)
    a = threading.Thread(target=q.replay_trace, args=(tid,), name="A")
    a.start()
    assert a_put.wait(10)
    q.enqueue_program(y_of_x, {"x": x, "y": y})
    b_done.set()
    a.join()
    live = q.enqueue_read_buffer(y)
    binary = mnrt.end_capture()
    monkeypatch.undo()
    dev.close()
    np.testing.assert_array_equal(live, np.full(4, 4, np.float32))
    report = mnrt.replay(binary)
    assert report.passed, report.summary()


def test_snapshot_writes_block_only_where_another_queue_could_overtake_them(dev, q):
    w = dev.create_buffer((4,), "float", name="w")
    q.enqueue_write_buffer(w, np.ones(4, np.float32))  # before capture: snapshotted
    y = dev.create_buffer((4,), "float", name="y")
    relu = dev.create_program([mnrt.Kernel("relu", ["x"], ["y"])])

    def snapshot_blocking(binary):  # the capture writes nothing but snapshots
        return [bool(c.cmd.blocking) for c in binary.commands if c.cmdType == U.WriteBuffer]

    mnrt.begin_capture()
    q.enqueue_program(relu, {"x": w, "y": y})
    q.enqueue_read_buffer(y)
    one_queue = mnrt.end_capture()
    mnrt.begin_capture()
    dev.command_queue(1).enqueue_program(relu, {"x": w, "y": y})
    dev.command_queue(1).finish()  # else the read races the program on the other queue
    q.enqueue_read_buffer(y)
    two_queues = mnrt.end_capture()
    assert snapshot_blocking(one_queue) == [False]  # in order on the only queue
    assert True in snapshot_blocking(two_queues)
    assert mnrt.replay(one_queue).passed and mnrt.replay(two_queues).passed


def test_replay_never_reads_the_device_state(small_binary, tmp_path, monkeypatch):
    # Replay fills fresh buffers with zeros whatever the state says, so a damaged state
    # file (which smi reports) must not stop a replay.
    home = tmp_path / "home"
    home.mkdir()
    (home / "devices.json").write_bytes(b"\xff not json")
    monkeypatch.setenv("MNRT_HOME", str(home))
    assert mnrt.replay(small_binary).passed
