"""Misuse of the host API and capture: each case raises an MnrtError at the call, never a
raw Python error, a hang or a binary that replays other than the live run did."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import mnrt
from mnrt.format.fb.CommandUnion import CommandUnion as U
from mnrt.host import observe

HANG_S = 10  # a hang guard, not a timing


def _in_thread(fn) -> list:
    """Run fn() on a thread; return [result or exception]. Fails the test if it hangs."""
    out: list = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as e:
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(HANG_S)
    assert not t.is_alive(), "the call hung"
    return out


def _replay_strict(binary) -> mnrt.ReplayReport:
    return mnrt.replay(binary, rtol=0, atol=0)


# --- host arguments ----------------------------------------------------------------------


@pytest.mark.parametrize("spec", [5, None, [1], 1.5, (1, 2)])
def test_dtype_numpy_cannot_read_is_refused_not_taken_as_double(dev, spec):
    with pytest.raises(mnrt.DTypeError, match="unknown dtype"):
        dev.create_buffer((2,), spec)


def test_command_queue_history_and_numpy_indices(dev):
    with pytest.raises(mnrt.InvalidArgumentError, match="history"):
        dev.command_queue(1, history="many")
    with pytest.raises(mnrt.InvalidArgumentError, match="history"):
        dev.command_queue(2, history=-1)
    assert dev.command_queue(np.int64(3)).index == 3
    with mnrt.open_device(np.int64(5)) as other:
        assert other.index == 5


@pytest.mark.parametrize(
    "kwargs", [{"pattern": "0xff"}, {"seed": 1.5}, {"pattern": True}, {"zero": "no"}]
)
def test_clear_arguments_of_the_wrong_type(dev, kwargs):
    with pytest.raises(mnrt.InvalidArgumentError, match="clear"):
        dev.clear(**kwargs)


def test_kernel_and_program_arguments(dev):
    with pytest.raises(mnrt.InvalidArgumentError, match="inputs must be a list"):
        mnrt.Kernel("relu", 3, ["y"])
    with pytest.raises(mnrt.KernelAttributeError, match="attrs must be a dict"):
        mnrt.Kernel("relu", ["x"], ["y"], attrs=[("onchip", ())])
    with pytest.raises(mnrt.InvalidArgumentError, match="non-empty list"):
        dev.create_program(3)
    with pytest.raises(mnrt.InvalidArgumentError, match="program name"):
        dev.create_program([mnrt.Kernel("relu", ["x"], ["y"])], name=5)
    # A generator is taken whole, not consumed by the checks into an empty program.
    prog = dev.create_program(mnrt.Kernel("relu", ["x"], [s]) for s in ["y"])
    assert len(prog.kernels) == 1 and prog.slots == ("x", "y")


def test_objects_of_a_closed_or_other_device(dev):
    buf = dev.create_buffer((4,), "float", name="old")
    prog = dev.create_program([mnrt.Kernel("relu", ["x"], ["y"])], name="relu")
    index = dev.index
    dev.close()
    with mnrt.open_device(index) as again, mnrt.open_device("auto") as other:
        q = again.command_queue(0)
        with pytest.raises(mnrt.UseAfterFreeError, match=f"'old' was freed when device {index}"):
            q.enqueue_read_buffer(buf)
        fresh = {"x": again.create_buffer((4,), "float"), "y": again.create_buffer((4,), "float")}
        with pytest.raises(mnrt.UseAfterFreeError, match="program 'relu' was freed"):
            q.enqueue_program(prog, fresh)
        theirs = other.create_program([mnrt.Kernel("relu", ["x"], ["y"])])
        with pytest.raises(mnrt.DeviceMismatchError, match="create it on the device"):
            q.enqueue_program(theirs, fresh)


def test_trace_ids_that_cannot_be_ids(dev, q):
    with pytest.raises(mnrt.TraceError, match="trace id"):
        q.replay_trace([1])
    with pytest.raises(mnrt.TraceError, match="trace id"):
        dev.release_trace({"id": 1})
    a, b, inc = _counter(dev, q)
    tid = q.begin_trace_capture()
    q.enqueue_program(inc, {"a": a, "b": b})
    q.end_trace_capture(tid)
    mnrt.begin_capture()
    with pytest.raises(mnrt.TraceError, match="trace id"):
        q.replay_trace([1])
    q.replay_trace(np.int64(tid))  # a trace of before the capture, named by a numpy int
    live = q.enqueue_read_buffer(a)
    binary = mnrt.end_capture()
    dev.close()
    assert list(live) == [1, 1, 1, 1] and _replay_strict(binary).passed


# --- closing while another thread works ----------------------------------------------------


def test_a_call_racing_close_is_refused_not_left_waiting(dev, q):
    buf = dev.create_buffer((4,), "float")
    q.enqueue_write_buffer(buf, np.ones(4, np.float32), blocking=True)
    # What close() does first, as another thread's blocking call may see it: the queue has
    # stopped but the device is not marked closed yet.
    q._stop()
    (err,) = _in_thread(lambda: q.enqueue_read_buffer(buf))
    assert isinstance(err, mnrt.DeviceClosedError)
    (err,) = _in_thread(lambda: q.enqueue_write_buffer(buf, np.ones(4, np.float32)))
    assert isinstance(err, mnrt.DeviceClosedError)
    assert not q._pending  # nothing was queued on the stopped queue
    assert _in_thread(dev.close) == [None]


def test_close_from_another_thread_never_strands_a_blocking_caller():
    for _ in range(20):
        dev = mnrt.open_device("auto")
        q = dev.command_queue(0)
        buf = dev.create_buffer((16,), "float")
        started, ended = threading.Event(), []

        def spin(q=q, buf=buf, started=started, ended=ended) -> None:
            started.set()
            try:
                while True:
                    q.enqueue_read_buffer(buf)
            except mnrt.MnrtError as e:
                ended.append(e)

        t = threading.Thread(target=spin, daemon=True)
        t.start()
        started.wait(HANG_S)
        dev.close()
        t.join(HANG_S)
        assert not t.is_alive(), "a blocking read was left waiting after close()"
        assert isinstance(ended[0], mnrt.DeviceClosedError)


# --- capture: arguments ------------------------------------------------------------------


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


# --- capture: what is recorded -------------------------------------------------------------


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
