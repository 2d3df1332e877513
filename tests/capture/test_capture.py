"""Capture: what gets recorded, and that replay reproduces the live run bit for bit."""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest
from binaries import concat_in_place

import mnrt
from mnrt.capture.recorder import Recorder
from mnrt.format import jsonio
from mnrt.format.fb.CommandUnion import CommandUnion as U
from mnrt.host import CommandQueue, observe
from mnrt.host.commands import ReplayTrace
from mnrt.replay.costs import kernel_costs

NAMES = {v: k for k, v in vars(U).items() if not k.startswith("_") and isinstance(v, int)}


def command_types(binary: mnrt.LightBinary) -> list[str]:
    return [NAMES[c.cmdType] for c in binary.commands]


def mlp_session(dev, q, dtype="half"):
    rng = np.random.default_rng(5)
    x = dev.create_buffer((8, 16), dtype, name="x")
    w = dev.create_buffer((16, 4), dtype, name="w")
    y = dev.create_buffer((8, 4), "float", name="y")
    prog = dev.create_program(
        [mnrt.Kernel("gemm", ["x", "w"], ["y"]), mnrt.Kernel("gelu", ["y"], ["y"])], name="fc"
    )
    q.enqueue_write_buffer(x, rng.standard_normal((8, 16)).astype(np.float32))
    q.enqueue_write_buffer(w, rng.standard_normal((16, 4)).astype(np.float32))
    q.enqueue_program(prog, {"x": x, "w": w, "y": y})
    return q.enqueue_read_buffer(y)


def test_capture_save_load_replay_matches_live_bit_for_bit(dev, q, tmp_path):
    mnrt.begin_capture()
    live = mlp_session(dev, q)
    binary = mnrt.end_capture()
    path = tmp_path / "mlp.mnlb"
    binary.save(path)
    dev.close()
    report = mnrt.replay(path)
    assert report.passed
    np.testing.assert_array_equal(report.outputs["y"], live)
    assert report.checks[0].max_abs_err == 0 and report.checks[0].pcc == pytest.approx(1.0)


def test_every_command_type_is_recorded_and_round_trips(dev, q, tmp_path):
    with mnrt.capture(tmp_path / "all.mnlb"):
        q1 = dev.command_queue(1)
        a = dev.create_buffer((4,), "float", name="a")
        b = dev.create_buffer((4,), "float", name="b")
        tmp = dev.create_buffer((2,), "int32", name="tmp")
        inc = dev.create_program([mnrt.Kernel("add", ["a", "b"], ["a"])], name="inc")
        q.enqueue_write_buffer(a, np.zeros(4, np.float32))
        q.enqueue_write_buffer(b, np.ones(4, np.float32), blocking=True)
        q1.enqueue_write_buffer(tmp, np.array([1, 2], np.int32))
        q1.finish()
        tid = q.begin_trace_capture()
        q.enqueue_program(inc, {"a": a, "b": b})
        q.end_trace_capture(tid)
        q.replay_trace(tid)
        q.replay_trace(tid, blocking=True)
        dev.release_trace(tid)
        q.enqueue_program(inc, {"a": a, "b": b}, blocking=True)
        q.enqueue_copy_buffer(a, b)
        q1.wait_event(q.record_event())
        q.finish()
        result = q.enqueue_read_buffer(a)
        check = mnrt.compare_to_golden(q, a, np.full(4, 3.0, np.float32), name="three")
        tmp.deallocate()
    assert check.passed and list(result) == [3, 3, 3, 3]
    binary = mnrt.LightBinary.load(tmp_path / "all.mnlb")
    assert set(command_types(binary)) == set(NAMES.values()) - {"NONE"}
    doc = json.loads(jsonio.dumps(binary))
    again = jsonio.from_json(doc)
    assert again.to_bytes() == binary.to_bytes()
    dev.close()
    report = mnrt.replay(binary)
    assert report.passed and [c.name for c in report.checks] == ["a", "three"]


def test_only_outermost_calls_are_recorded(dev, q):
    b = dev.create_buffer((2,), "float", name="b")

    @observe.api("user_helper")
    def helper():  # a host API call that makes other host API calls
        q.enqueue_write_buffer(b, np.ones(2, np.float32))
        return q.enqueue_read_buffer(b)

    mnrt.begin_capture()
    helper()
    q.enqueue_write_buffer(b, np.zeros(2, np.float32))
    binary = mnrt.end_capture()
    assert command_types(binary).count("WriteBuffer") == 1
    assert "ReadBuffer" not in command_types(binary)


def test_mid_program_capture_snapshots_objects_at_first_use(dev, q):
    w = dev.create_buffer((3, 3), "half", name="w")
    x = dev.create_buffer((1, 3), "half", name="x")
    y = dev.create_buffer((1, 3), "float", name="y")
    prog = dev.create_program([mnrt.Kernel("gemm", ["x", "w"], ["y"])], name="proj")
    q.enqueue_write_buffer(w, np.arange(9, dtype=np.float32).reshape(3, 3) / 7)
    q.enqueue_write_buffer(x, np.array([[1.0, -2.0, 0.5]], np.float32))
    mnrt.begin_capture()  # the device, queue, buffers and program all predate the capture
    q.enqueue_program(prog, {"x": x, "w": w, "y": y})
    live = q.enqueue_read_buffer(y)
    binary = mnrt.end_capture()
    types = command_types(binary)
    assert types[:2] == ["OpenDevice", "OpenQueue"]
    # x and w carry their contents; y is created bare, as the program writes it before
    # anything reads it.
    assert types.count("CreateBuffer") == 3 and types.count("WriteBuffer") == 2
    dev.close()
    report = mnrt.replay(binary)
    assert report.passed
    np.testing.assert_array_equal(report.outputs["y"], live)


def test_a_buffer_the_program_reads_first_keeps_its_snapshot(dev, q):
    acc = dev.create_buffer((2,), "float", name="acc")
    one = dev.create_buffer((2,), "float", name="one")
    inc = dev.create_program([mnrt.Kernel("add", ["acc", "one"], ["acc"])])
    q.enqueue_write_buffer(acc, np.array([5.0, 7.0], np.float32))
    q.enqueue_write_buffer(one, np.ones(2, np.float32))
    mnrt.begin_capture()
    q.enqueue_program(inc, {"acc": acc, "one": one})
    q.enqueue_read_buffer(acc)
    binary = mnrt.end_capture()
    assert command_types(binary).count("WriteBuffer") == 2
    dev.close()
    np.testing.assert_array_equal(mnrt.replay(binary).outputs["acc"], [6.0, 8.0])


def test_a_buffer_slot_views_write_whole_needs_no_snapshot_and_one_they_do_not_does(dev, q):
    prog, bufs = concat_in_place(dev)  # `left` and `right` cover `whole`
    q.enqueue_write_buffer(bufs["a"], np.ones((2, 3), np.float32))
    q.enqueue_write_buffer(bufs["b"], np.ones((2, 2), np.float32))
    q.enqueue_write_buffer(bufs["whole"], np.full((2, 5), 7.0, np.float32))
    mnrt.begin_capture()  # everything predates it: snapshots where a kernel reads first
    q.enqueue_program(prog, bufs)
    binary = mnrt.end_capture()
    written = [c.cmd.bufferId for c in binary.commands if c.cmdType == U.WriteBuffer]
    assert len(written) == 2  # a and b; not `whole`, which the parts write whole
    partial = dev.create_program(
        [mnrt.Kernel("neg", ["a"], ["left"]), mnrt.Kernel("neg", ["flat"], ["y"])],
        views={k: v for k, v in prog.views.items() if k != "right"},
    )
    mnrt.begin_capture()
    q.enqueue_program(partial, {k: v for k, v in bufs.items() if k != "b"})
    live = q.enqueue_read_buffer(bufs["y"])
    binary = mnrt.end_capture()
    assert sum(c.cmdType == U.WriteBuffer for c in binary.commands) == 2  # a and `whole`
    dev.close()
    np.testing.assert_array_equal(mnrt.replay(binary).outputs["y"], live)
    np.testing.assert_array_equal(live, [1, 1, 1, 1, 1, 1, -1, -1, -1, -1])  # right: relu(b)


def test_trace_captured_before_capture_is_recorded_in_full(dev, q):
    acc = dev.create_buffer((2,), "float", name="acc")
    one = dev.create_buffer((1,), "float", name="one")
    inc = dev.create_program([mnrt.Kernel("add", ["acc", "one"], ["acc"])])
    q.enqueue_write_buffer(acc, np.zeros(2, np.float32))
    q.enqueue_write_buffer(one, np.ones(1, np.float32))
    tid = q.begin_trace_capture()
    q.enqueue_program(inc, {"acc": acc, "one": one})
    q.enqueue_program(inc, {"acc": acc, "one": one})
    q.end_trace_capture(tid)
    mnrt.begin_capture()
    for _ in range(3):
        q.replay_trace(tid)
    live = q.enqueue_read_buffer(acc)
    binary = mnrt.end_capture()
    types = command_types(binary)
    begin = types.index("BeginTraceCapture")
    assert types[begin : begin + 4] == [
        "BeginTraceCapture",
        "EnqueueProgram",
        "EnqueueProgram",
        "EndTraceCapture",
    ]
    assert types.count("ReplayTrace") == 3 and list(live) == [6, 6]
    dev.close()
    assert mnrt.replay(binary).passed


def test_reads_record_goldens_unless_turned_off(dev, q):
    b = dev.create_buffer((2,), "float")
    mnrt.begin_capture(goldens=False)
    q.enqueue_write_buffer(b, np.ones(2, np.float32))
    q.enqueue_read_buffer(b)
    binary = mnrt.end_capture()
    read = next(c.cmd for c in binary.commands if c.cmdType == U.ReadBuffer)
    assert read.golden == 0
    dev.close()
    assert mnrt.replay(binary).checks == []


def test_non_blocking_read_golden_is_the_final_data(dev, q):
    b = dev.create_buffer((3,), "float", name="late")
    mnrt.begin_capture()
    q.enqueue_write_buffer(b, np.arange(3, dtype=np.float32))
    out = q.enqueue_read_buffer(b, blocking=False)
    binary = mnrt.end_capture()  # finishes the queue before taking the golden
    dev.close()
    report = mnrt.replay(binary)
    assert report.passed and list(out) == [0, 1, 2]


def test_a_read_that_failed_records_no_golden_and_a_read_out_after_it_its_own(dev, q):
    b = dev.create_buffer((2,), "float", name="b")
    fill_in = type(b)._fill_in
    failing = [True]

    def once_broken(buf):
        if failing and buf is b:
            failing.clear()
            raise RuntimeError("read broke")
        fill_in(buf)

    type(b)._fill_in = once_broken
    try:
        mnrt.begin_capture()
        q.enqueue_write_buffer(b, np.ones(2, np.float32))  # b is known: no snapshot
        with pytest.raises(mnrt.DeviceExecutionError, match="read broke"):
            q.enqueue_read_buffer(b)
        mine = q.enqueue_read_buffer(b)
        mine[:] = 7  # the caller's array: the golden is a copy made as the read ran
        binary = mnrt.end_capture()
    finally:
        type(b)._fill_in = fill_in
    reads = [c.cmd for c in binary.commands if c.cmdType == U.ReadBuffer]
    assert [r.golden != 0 for r in reads] == [False, True]
    dev.close()
    report = mnrt.replay(binary)
    assert report.passed and [c.mismatches for c in report.checks] == [0]


def test_written_data_is_copied_at_the_call(dev, q):
    b = dev.create_buffer((2,), "float", name="b")
    data = np.array([1.0, 2.0], np.float32)
    mnrt.begin_capture()
    q.enqueue_write_buffer(b, data, blocking=True)
    data[:] = 99  # the caller reuses its array after the write
    expected = q.enqueue_read_buffer(b)
    binary = mnrt.end_capture()
    dev.close()
    assert list(expected) == [1, 2] and mnrt.replay(binary).passed


def test_capture_context_writes_only_on_success(dev, q, tmp_path):
    target = tmp_path / "x.mnlb"
    with pytest.raises(RuntimeError), mnrt.capture(target):
        dev.create_buffer((2,), "float")
        raise RuntimeError("user code failed")
    assert not target.exists() and list(tmp_path.iterdir()) == []
    assert observe.current() is None
    with mnrt.capture(target):
        dev.create_buffer((2,), "float")
    assert mnrt.LightBinary.load(target).commands


def test_capture_rules(dev, q):
    with pytest.raises(mnrt.CaptureError, match="without begin_capture"):
        mnrt.end_capture()
    mnrt.begin_capture()
    try:
        with pytest.raises(mnrt.CaptureError, match="already running"):
            mnrt.begin_capture()
        with pytest.raises(mnrt.CaptureError, match=r"clear\(\) cannot be captured"):
            dev.clear(zero=True)
        with pytest.raises(mnrt.CaptureError, match=r"reset\(\) cannot be captured"):
            dev.reset()
    finally:
        mnrt.end_capture()


def test_a_replay_inside_a_capture_is_refused_and_nothing_is_saved(tmp_path):
    """Its host calls would be recorded and the data it writes would not: the capture of a
    replay of samples/mlp.mnlb replayed with every golden failing. Any replay (mnrt.replay,
    or a tool's, through the same executor) is refused; the capture saves nothing."""
    path = tmp_path / "c.mnlb"
    refused = pytest.raises(mnrt.CaptureError, match="cannot be replayed while a capture")
    with refused, mnrt.capture(path):
        mnrt.replay("samples/mlp.mnlb")
    assert not path.exists()
    mnrt.begin_capture()
    try:
        with pytest.raises(mnrt.CaptureError, match="cannot be replayed while a capture"):
            kernel_costs(mnrt.LightBinary.load("samples/mlp.mnlb"))
    finally:
        mnrt.end_capture()
    assert mnrt.replay("samples/mlp.mnlb").passed  # and after it, as before


def test_compare_to_golden_live_result_and_errors(dev, q):
    b = dev.create_buffer((3,), "int32", name="n")
    q.enqueue_write_buffer(b, np.array([1, 2, 3], np.int32))
    ok = mnrt.compare_to_golden(q, b, np.array([1, 2, 3]))
    bad = mnrt.compare_to_golden(q, b, np.array([1, 5, 3]))
    assert ok.passed and not bad.passed and bad.first_mismatch == (1,) and bad.mismatches == 1
    with pytest.raises(mnrt.InvalidArgumentError, match="does not match buffer 'n'"):
        mnrt.compare_to_golden(q, b, np.zeros(4))


def test_replay_on_another_device(dev, q):
    mnrt.begin_capture()
    mlp_session(dev, q)
    binary = mnrt.end_capture()
    report = mnrt.replay(binary, device=5)  # device 0 is still open here
    assert report.passed
    with pytest.raises(mnrt.DeviceNotFoundError):
        mnrt.replay(binary, device=42)


def test_consecutive_captures_reusing_a_binding(dev, q):
    # enqueue_program notes the capture's ids on the bound plan; a later capture must not
    # trust what an earlier one noted, and must snapshot the now pre-existing objects.
    x = dev.create_buffer((3,), "float", name="x")
    y = dev.create_buffer((3,), "float", name="y")
    neg = dev.create_program([mnrt.Kernel("neg", ["x"], ["y"])], name="neg")
    q.enqueue_write_buffer(x, np.array([1.0, -2.0, 3.0], np.float32))
    binaries = []
    for _ in range(2):
        mnrt.begin_capture()
        q.enqueue_program(neg, {"x": x, "y": y})
        q.enqueue_read_buffer(y)
        binaries.append(mnrt.end_capture())
    assert command_types(binaries[1]).count("CreateBuffer") == 2
    dev.close()
    for binary in binaries:
        report = mnrt.replay(binary)
        assert report.passed and list(report.outputs["y"]) == [-1, 2, -3]


def test_nested_enqueue_program_is_not_recorded(dev, q):
    x = dev.create_buffer((2,), "float", name="x")
    prog = dev.create_program([mnrt.Kernel("relu", ["x"], ["x"])])

    @observe.api("user_step")
    def step():
        q.enqueue_program(prog, {"x": x})

    mnrt.begin_capture()
    step()
    q.enqueue_program(prog, {"x": x})
    binary = mnrt.end_capture()
    assert command_types(binary).count("EnqueueProgram") == 1


def test_one_binding_enqueued_on_two_queues_and_blocking(dev, q):
    x = dev.create_buffer((2,), "float", name="x")
    prog = dev.create_program([mnrt.Kernel("relu", ["x"], ["x"])])
    q1 = dev.command_queue(1)
    mnrt.begin_capture()
    q.enqueue_program(prog, {"x": x})
    q1.enqueue_program(prog, {"x": x}, blocking=True)
    q.enqueue_program(prog, {"x": x}, blocking=True)
    binary = mnrt.end_capture()
    runs = [c.cmd for c in binary.commands if c.cmdType == U.EnqueueProgram]
    queues = {c.cmd.queueId: c.cmd.index for c in binary.commands if c.cmdType == U.OpenQueue}
    assert [queues[r.queueId] for r in runs] == [0, 1, 0]
    assert [bool(r.blocking) for r in runs] == [False, True, True]


def test_user_golden_in_another_dtype_is_stored_as_the_buffer_stores(dev, q):
    b = dev.create_buffer((3,), "float", name="b")
    q.enqueue_write_buffer(b, np.array([1.0, 2.0, 3.0], np.float32))
    mnrt.begin_capture()
    assert mnrt.compare_to_golden(q, b, np.array([1.0, 2.0, 3.0]), name="f64").passed
    binary = mnrt.end_capture()
    dev.close()
    report = mnrt.replay(binary)
    assert report.passed and report.checks[0].name == "f64"


def commands(binary: mnrt.LightBinary) -> list[dict]:
    return [c["cmd"] for c in json.loads(jsonio.dumps(binary))["commands"]]


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
    # Outputs are one per buffer (its last read), named by the buffer: a buffer whose name
    # looks like a repeat's suffix keeps it, and the other buffer read twice is one output.
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
    assert sorted(report.outputs) == ["b", "b#8"]
    assert report.outputs["b#8"].tolist() == [7, 7] and report.outputs["b"].tolist() == [1, 2]


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


HANG_S = 10  # a hang guard, not a timing


def _replay_strict(binary) -> mnrt.ReplayReport:
    return mnrt.replay(binary, rtol=0, atol=0)


def test_capture_arguments_are_checked_before_anything_runs(dev, q, tmp_path):
    ran = []
    missing = tmp_path / "missing" / "a.mnlb"
    with pytest.raises(mnrt.InvalidArgumentError, match="no directory"), mnrt.capture(missing):
        ran.append(1)
    with pytest.raises(mnrt.InvalidArgumentError, match="str or os.PathLike"), mnrt.capture(3):
        ran.append(1)
    with pytest.raises(mnrt.InvalidArgumentError, match="goldens"):
        mnrt.begin_capture(goldens="no")
    assert not ran and observe.current() is None
    mnrt.begin_capture()
    with pytest.raises(mnrt.InvalidArgumentError, match="description"):
        mnrt.end_capture(description=5)
    q.enqueue_read_buffer(dev.create_buffer((2,), "float"))
    assert mnrt.end_capture().commands  # the capture survived the bad call


def test_compare_to_golden_arguments(dev, q):
    buf = dev.create_buffer((4,), "float", name="b")
    with pytest.raises(mnrt.InvalidArgumentError, match="CommandQueue"):
        mnrt.compare_to_golden(None, buf, np.zeros(4))
    with pytest.raises(mnrt.InvalidArgumentError, match="must be numbers"):
        mnrt.compare_to_golden(q, buf, np.array(["a"] * 4))
    ml_dtypes = pytest.importorskip("ml_dtypes")  # onnx's arrays of bfloat16 tensors
    q.enqueue_write_buffer(buf, np.array([1.5, -2.0, 0.25, 3.0], np.float32))
    check = mnrt.compare_to_golden(q, buf, np.array([1.5, -2.0, 0.25, 3.0], ml_dtypes.bfloat16))
    assert check.passed
    with pytest.raises(mnrt.InvalidArgumentError, match="rtol must be a number"):
        mnrt.compare_to_golden(q, buf, np.zeros(4), rtol="tight")
    with pytest.raises(mnrt.InvalidArgumentError, match="atol must be a finite"):
        mnrt.compare_to_golden(q, buf, np.zeros(4), atol=-1.0)
    ints = dev.create_buffer((2,), "int32", name="i")
    with pytest.raises(mnrt.InvalidArgumentError, match="int32 cannot"):
        mnrt.compare_to_golden(q, ints, np.array([1.5, 2.0]))


def test_rejected_compare_to_golden_calls_leave_the_capture_intact(dev, q):
    with mnrt.open_device("auto") as other:
        buf = dev.create_buffer((4,), "float", name="b")
        q.enqueue_write_buffer(buf, np.arange(4, dtype=np.float32))
        mnrt.begin_capture()
        gone = dev.create_buffer((2,), "float", name="gone")
        gone.deallocate()
        bad_calls = [
            lambda: mnrt.compare_to_golden(q, buf, np.arange(4), name=5),
            lambda: mnrt.compare_to_golden(q, gone, np.zeros(2)),
            lambda: mnrt.compare_to_golden(other.command_queue(0), buf, np.arange(4)),
        ]
        for call in bad_calls:
            with pytest.raises(mnrt.MnrtError):
                call()
        assert mnrt.compare_to_golden(q, buf, np.arange(4)).passed
        binary = mnrt.end_capture()
    dev.close()
    report = _replay_strict(binary)
    assert report.passed and [c.name for c in report.checks] == ["b"]


@pytest.mark.parametrize(("dtype", "value"), [("float", 0.1), ("half", 0.1)])
def test_compare_to_golden_verdict_is_the_same_live_and_replayed(dev, q, dtype, value):
    buf = dev.create_buffer((1,), dtype, name="b")
    q.enqueue_write_buffer(buf, np.array([value], np.float32))
    mnrt.begin_capture()
    live = mnrt.compare_to_golden(q, buf, np.array([value]), rtol=0, atol=0)
    binary = mnrt.end_capture()
    dev.close()
    (replayed,) = mnrt.replay(binary).checks
    assert live.passed == replayed.passed


def test_a_golden_check_costs_no_modelled_time_live_or_replayed_and_a_read_does(dev, q):
    """A golden check is the runner verifying the workload, not the workload: which values
    a binary checks (a compiled one checks the temporary its last kernel read, which the
    preset's fusion makes larger or smaller) must not change its modelled makespan."""
    big = dev.create_buffer((512, 1024), "float", name="big")
    data = np.ones((512, 1024), np.float32)
    q.enqueue_write_buffer(big, data)
    q.finish()
    mnrt.begin_capture()
    mnrt.compare_to_golden(q, big, data)
    q.finish()
    binary = mnrt.end_capture()
    check = q.history[-1]
    assert check.kind == "read_buffer" and check.modelled.time_s == 0
    assert check.modelled.energy_j == 0
    mnrt.begin_capture()
    q.enqueue_read_buffer(big)
    read_binary = mnrt.end_capture()
    read = q.history[-1]
    assert read.modelled.time_s == pytest.approx(big.nbytes / dev.spec.host_link_bandwidth)
    dev.close()
    checked, reading = mnrt.replay(binary), mnrt.replay(read_binary)
    assert checked.passed and reading.passed
    assert checked.modelled["makespan_s"] < reading.modelled["makespan_s"]
    assert reading.modelled["makespan_s"] - checked.modelled["makespan_s"] == pytest.approx(
        read.modelled.time_s
    )


def _types(binary) -> list[int]:
    return [c.cmdType for c in binary.commands]


def test_open_device_is_observed_and_fork_during_capture_is_quiet(capfd, in_forked_child):
    mnrt.begin_capture()
    with mnrt.open_device("auto"):
        assert in_forked_child(lambda: 0) == 0
    binary = mnrt.end_capture()
    assert _types(binary) == [U.OpenDevice]
    assert "Traceback" not in capfd.readouterr().err


def test_end_capture_in_a_forked_child_does_not_wait_for_the_parents_workers(
    dev, q, in_forked_child
):
    buf = dev.create_buffer((2,), "float")
    mnrt.begin_capture()
    q.enqueue_write_buffer(buf, np.ones(2, np.float32))

    def child() -> int:
        mnrt.end_capture()
        return 0

    assert in_forked_child(child) == 0
    mnrt.end_capture()


def test_a_call_still_running_when_capture_ends_leaves_no_ids_behind(dev, q):
    inside, release = threading.Event(), threading.Event()
    allocate = dev._backend.allocate

    def slow_allocate(*args, **kwargs):
        inside.set()
        release.wait(HANG_S)
        return allocate(*args, **kwargs)

    dev._backend.allocate = slow_allocate
    mnrt.begin_capture()
    made: list = []
    t = threading.Thread(target=lambda: made.append(dev.create_buffer((4,), "float")))
    t.start()
    inside.wait(HANG_S)
    mnrt.end_capture()
    release.set()
    t.join(HANG_S)
    dev._backend.allocate = allocate
    (late,) = made
    assert late.tag == 0 and dev.tag == 0
    mnrt.begin_capture()
    q.enqueue_write_buffer(late, np.ones(4, np.float32))
    live = q.enqueue_read_buffer(late)
    binary = mnrt.end_capture()
    dev.close()
    report = _replay_strict(binary)
    assert report.passed
    np.testing.assert_array_equal(report.outputs[late.name], live)


def _counter(dev, q):
    a = dev.create_buffer((4,), "float", name="a")
    b = dev.create_buffer((4,), "float", name="b")
    inc = dev.create_program([mnrt.Kernel("add", ["a", "b"], ["a"])], name="inc")
    q.enqueue_write_buffer(a, np.zeros(4, np.float32))
    q.enqueue_write_buffer(b, np.ones(4, np.float32))
    return a, b, inc


def test_capture_begun_while_a_device_trace_is_open(dev, q):
    a, b, inc = _counter(dev, q)
    tid = q.begin_trace_capture()
    q.enqueue_program(inc, {"a": a, "b": b})
    mnrt.begin_capture()
    q.enqueue_program(inc, {"a": a, "b": b})  # recorded into the trace, not run
    q.end_trace_capture(tid)
    q.replay_trace(tid)
    live = q.enqueue_read_buffer(a)
    binary = mnrt.end_capture()
    assert list(live) == [2, 2, 2, 2]
    dev.close()
    assert _replay_strict(binary).passed


def test_capture_ended_while_a_device_trace_is_open_still_replays(dev, q):
    a, b, inc = _counter(dev, q)
    mnrt.begin_capture()
    q.enqueue_read_buffer(a)
    tid = q.begin_trace_capture()
    q.enqueue_program(inc, {"a": a, "b": b})
    binary = mnrt.end_capture()
    q.end_trace_capture(tid)
    dev.close()
    assert _replay_strict(binary).passed


def test_non_blocking_read_golden_is_what_the_read_returned(dev, q):
    buf = dev.create_buffer((4,), "float", name="r")
    mnrt.begin_capture()
    q.enqueue_write_buffer(buf, np.arange(4, dtype=np.float32))
    out = q.enqueue_read_buffer(buf, blocking=False)
    q.finish()
    out *= 10  # the caller's array, changed in place once the read has run
    binary = mnrt.end_capture()
    dev.close()
    assert _replay_strict(binary).passed


def test_capture_whose_commands_were_skipped_is_refused(dev, q, tmp_path, failing_gather):
    path = tmp_path / "skipped.mnlb"
    with pytest.raises(mnrt.CaptureError, match="skipped"), mnrt.capture(path):
        data = failing_gather(dev, q)
        q.enqueue_write_buffer(data, np.ones(4, np.float32))  # skipped live
        with pytest.raises(mnrt.DeviceExecutionError):
            q.finish()
        q.enqueue_read_buffer(data)  # zeros live; replay would read ones
    assert not path.exists() and observe.current() is None


def test_buffers_holding_a_cleared_device_fill_replay_the_same(tmp_path):
    with mnrt.open_device(3) as dev:
        dev.clear(pattern=0xAB)
        mnrt.begin_capture()
        buf = dev.create_buffer((4,), "uint8", name="u")
        live = dev.command_queue(0).enqueue_read_buffer(buf)  # never written
        binary = mnrt.end_capture()
    assert list(live) == [0xAB] * 4
    report = _replay_strict(binary)  # on device 0, which reads zeros where unwritten
    assert report.passed
    np.testing.assert_array_equal(report.outputs["u"], live)


def test_saving_over_an_existing_file_replaces_it(dev, q, tmp_path):
    path = tmp_path / "a.mnlb"
    path.write_bytes(b"old")
    with mnrt.capture(path):
        q.enqueue_read_buffer(dev.create_buffer((2,), "float"))
    assert mnrt.LightBinary.load(path).commands
    assert os.listdir(tmp_path) == ["a.mnlb"]


@pytest.mark.parametrize("opened_before", [False, True])
def test_a_capture_of_several_devices_replays_bit_for_bit(opened_before):
    """Its kernels run with the share of the cores that a replay of the binary gives them
    (by the devices it uses), once every device has been used: products this large run on
    several BLAS threads where the process has them and round otherwise on fewer, so
    before, every GEMM differed from its fingerprint in replay (within tolerance)."""
    from threadpoolctl import threadpool_info

    blas = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
    rng = np.random.default_rng(3)
    a, w = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
    devices = [mnrt.open_device(i) for i in (0, 1)] if opened_before else []
    try:
        mnrt.begin_capture(fingerprints=True)
        devices = devices or [mnrt.open_device(i) for i in (0, 1)]
        buffers = []
        for d in devices:  # every device used before the first product, as a pipeline is
            q = d.command_queue(0)
            x, y = (d.create_buffer((256, 256), "float", name=n) for n in ("x", "w"))
            out = d.create_buffer((256, 256), "float", name="y")
            q.enqueue_write_buffer(x, a)
            q.enqueue_write_buffer(y, w)
            buffers.append((q, d.create_program([mnrt.Kernel("gemm", ["x", "w"], ["y"])]),
                            {"x": x, "w": y, "y": out}))  # fmt: skip
        for q, program, bound in buffers:
            for _ in range(3):
                q.enqueue_program(program, bound)
                q.enqueue_copy_buffer(bound["y"], bound["x"])
            q.enqueue_read_buffer(bound["y"])
        binary = mnrt.end_capture()
    finally:
        for d in devices:
            d.close()
    # the capture's share of the cores ends with it
    assert [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"] == blas
    report = mnrt.replay(binary, rtol=0.0, atol=0.0, locate=True)
    assert report.passed and report.locate.compared == 6, report.summary()
    assert report.locate.divergent == 0, report.locate.summary()
