"""Device traces: recorded not executed, replayed in order, and their rules."""

from __future__ import annotations

import numpy as np
import pytest

import mnrt


@pytest.fixture
def counter(dev):
    acc = dev.create_buffer((4,), "float", name="acc")
    step = dev.create_buffer((1,), "float", name="step")
    prog = dev.create_program([mnrt.Kernel("add", ["acc", "step"], ["acc"])], name="inc")
    q = dev.command_queue(0)
    q.enqueue_write_buffer(acc, np.zeros(4, np.float32))
    q.enqueue_write_buffer(step, np.ones(1, np.float32))
    return acc, step, prog


def test_capture_records_without_executing_and_replay_runs(dev, q, counter):
    acc, step, prog = counter
    tid = q.begin_trace_capture()
    q.enqueue_program(prog, {"acc": acc, "step": step})
    q.enqueue_program(prog, {"acc": acc, "step": step})
    q.end_trace_capture(tid)
    np.testing.assert_array_equal(q.enqueue_read_buffer(acc), 0)
    for _ in range(10):
        q.replay_trace(tid)
    np.testing.assert_array_equal(q.enqueue_read_buffer(acc), 20)
    replay = list(q.history)[-2]
    assert replay.kind == "replay_trace"
    one_step = prog.plan({"acc": acc, "step": step}).modelled.time_s
    assert replay.modelled.time_s == pytest.approx(2 * one_step)
    dev.release_trace(tid)
    with pytest.raises(mnrt.TraceError, match="never captured, or released"):
        q.replay_trace(tid)


def test_forbidden_calls_inside_a_trace(dev, q, counter):
    acc, step, _ = counter
    tid = q.begin_trace_capture()
    with pytest.raises(mnrt.TraceError, match="enqueue_write_buffer is not allowed"):
        q.enqueue_write_buffer(acc, np.zeros(4, np.float32))
    with pytest.raises(mnrt.TraceError, match="enqueue_read_buffer is not allowed"):
        q.enqueue_read_buffer(acc)
    with pytest.raises(mnrt.TraceError, match="create_buffer is not allowed"):
        dev.create_buffer((2,), "float")
    with pytest.raises(mnrt.TraceError, match="create_program is not allowed"):
        dev.create_program([mnrt.Kernel("relu", ["a"], ["b"])])
    with pytest.raises(mnrt.TraceError, match="deallocate"):
        step.deallocate()
    with pytest.raises(mnrt.TraceError, match="finish"):
        q.finish()
    with pytest.raises(mnrt.TraceError, match="already capturing"):
        q.begin_trace_capture()
    q.end_trace_capture(tid)
    q.finish()


def test_end_and_replay_checks(dev, q, counter):
    acc, step, prog = counter
    with pytest.raises(mnrt.TraceError, match="capturing no trace"):
        q.end_trace_capture(1)
    tid = q.begin_trace_capture()
    q.enqueue_program(prog, {"acc": acc, "step": step})
    with pytest.raises(mnrt.TraceError, match=f"capturing trace {tid}"):
        q.end_trace_capture(tid + 1)
    q.end_trace_capture(tid)
    with pytest.raises(mnrt.TraceError, match="captured on queue 0"):
        dev.command_queue(1).replay_trace(tid)
    with pytest.raises(mnrt.TraceError, match="no such trace"):
        dev.release_trace(999)


def test_replay_after_a_buffer_was_freed_is_an_error(dev, q, counter):
    acc, step, prog = counter
    tid = q.begin_trace_capture()
    q.enqueue_program(prog, {"acc": acc, "step": step})
    q.end_trace_capture(tid)
    step.deallocate()
    with pytest.raises(mnrt.UseAfterFreeError, match="'step'"):
        q.replay_trace(tid)


def test_trace_ids_that_cannot_be_ids(dev, q, counter):
    with pytest.raises(mnrt.TraceError, match="trace id"):
        q.replay_trace([1])
    with pytest.raises(mnrt.TraceError, match="trace id"):
        dev.release_trace({"id": 1})
    a, b, inc = counter
    tid = q.begin_trace_capture()
    q.enqueue_program(inc, {"acc": a, "step": b})
    q.end_trace_capture(tid)
    mnrt.begin_capture()
    with pytest.raises(mnrt.TraceError, match="trace id"):
        q.replay_trace([1])
    q.replay_trace(np.int64(tid))  # a trace of before the capture, named by a numpy int
    live = q.enqueue_read_buffer(a)
    binary = mnrt.end_capture()
    dev.close()
    assert list(live) == [1, 1, 1, 1] and mnrt.replay(binary, rtol=0, atol=0).passed
