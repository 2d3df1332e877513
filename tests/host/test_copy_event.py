"""Copies between (and within) devices, events, and queues waiting for events."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from host_harness import gather_program
from hypothesis import given, settings
from hypothesis import strategies as st

import mnrt


@pytest.fixture
def pair():
    d0, d1 = mnrt.open_device(0), mnrt.open_device(1)
    yield d0, d1
    d0._close_quietly()
    d1._close_quietly()


def test_copy_between_devices_seen_through_an_event(pair):
    d0, d1 = pair
    q0, q1 = d0.command_queue(0), d1.command_queue(0)
    a = d0.create_buffer((64,), "float", name="a")
    b = d1.create_buffer((64,), "float", name="b")
    c = d1.create_buffer((64,), "float", name="c")
    double = d1.create_program([mnrt.Kernel("add", ["b", "b"], ["c"])])
    data = np.arange(64, dtype=np.float32)
    q0.enqueue_write_buffer(a, data)
    q0.enqueue_copy_buffer(a, b)
    ev = q0.record_event()
    assert (ev.device, ev.queue_index, ev.queue) == (d0, 0, q0) and isinstance(ev.id, int)
    q1.wait_event(ev)
    q1.enqueue_program(double, {"b": b, "c": c})
    np.testing.assert_array_equal(q1.enqueue_read_buffer(c), 2 * data)
    ev.wait()
    assert ev.query() is True
    copy = next(cmd for cmd in q0.history if cmd.kind == "copy")
    assert copy.status == "done" and copy.modelled.time_s > 0 and copy.modelled.energy_j > 0


def test_copy_on_the_destination_queue_and_within_one_device(pair):
    d0, d1 = pair
    a = d0.create_buffer((3, 2), "int32", name="a")
    b = d1.create_buffer((3, 2), "int32", name="b")
    c = d1.create_buffer((3, 2), "int32", name="c")
    d0.command_queue(0).enqueue_write_buffer(a, np.arange(6, dtype=np.int32).reshape(3, 2))
    q1 = d1.command_queue(0)
    q1.wait_event(d0.command_queue(0).record_event())
    q1.enqueue_copy_buffer(a, b)  # the destination's queue pulls
    q1.enqueue_copy_buffer(b, c, blocking=True)  # and a copy within one device
    np.testing.assert_array_equal(q1.enqueue_read_buffer(c), np.arange(6).reshape(3, 2))


def test_half_copies_bits_unchanged(pair):
    d0, d1 = pair
    a = d0.create_buffer((4,), "half", name="a")
    b = d1.create_buffer((4,), "half", name="b")
    values = np.array([1.0, 1 / 3, -2.5e-3, 7.0], np.float32)
    d0.command_queue(0).enqueue_write_buffer(a, values)
    d0.command_queue(0).enqueue_copy_buffer(a, b, blocking=True)
    np.testing.assert_array_equal(
        d1.command_queue(0).enqueue_read_buffer(b), d0.command_queue(0).enqueue_read_buffer(a)
    )


def test_copy_argument_errors_name_both_buffers(pair):
    d0, d1 = pair
    q0 = d0.command_queue(0)
    a = d0.create_buffer((4,), "float", name="src4")
    b = d1.create_buffer((5,), "float", name="dst5")
    i = d1.create_buffer((4,), "int32", name="dst_int")
    with pytest.raises(mnrt.ShapeError, match=r"'src4'.*\(4,\).*'dst5'.*\(5,\)"):
        q0.enqueue_copy_buffer(a, b)
    with pytest.raises(mnrt.DTypeError, match=r"'src4' is float.*'dst_int' is int32"):
        q0.enqueue_copy_buffer(a, i)
    with pytest.raises(mnrt.InvalidArgumentError, match="dst must be a Buffer"):
        q0.enqueue_copy_buffer(a, np.zeros(4))
    with mnrt.open_device(2) as d2:
        c = d2.create_buffer((4,), "float", name="other")
        with pytest.raises(mnrt.DeviceMismatchError, match=r"device 1 .*device 2"):
            q0.enqueue_copy_buffer(i, c)
    tid = q0.begin_trace_capture()
    with pytest.raises(mnrt.TraceError, match="inside a device trace"):
        q0.enqueue_copy_buffer(a, a)
    with pytest.raises(mnrt.TraceError):
        q0.record_event()
    q0.end_trace_capture(tid)
    a.deallocate()
    with pytest.raises(mnrt.UseAfterFreeError, match="src4"):
        q0.enqueue_copy_buffer(a, a)
    assert not list(q0.history)  # nothing refused reached the queue


def test_waiting_on_an_event_of_a_closed_device_is_an_error_at_the_call(pair):
    d0, d1 = pair
    ev = d0.command_queue(0).record_event()
    d0.close()
    assert ev.query() is True  # closing ran what was queued
    with pytest.raises(mnrt.DeviceClosedError, match="closed device"):
        d1.command_queue(0).wait_event(ev)
    with pytest.raises(mnrt.InvalidArgumentError, match="takes an Event"):
        d1.command_queue(0).wait_event("event")


def test_a_failed_queue_fails_the_event_and_the_queue_that_waits(pair):
    d0, d1 = pair
    q0, q1 = d0.command_queue(0), d1.command_queue(0)
    bufs, prog = gather_program(d0)
    q0.enqueue_write_buffer(bufs["idx"], np.array([9, 0], np.int32))
    q0.enqueue_program(prog, bufs)
    ev = q0.record_event()  # skipped behind the failed program
    q1.wait_event(ev)
    after = d1.create_buffer((1,), "float", name="after")
    q1.enqueue_write_buffer(after, np.ones(1, np.float32))
    with pytest.raises(mnrt.DeviceExecutionError, match=r"wait_event .*did not complete|failed"):
        ev.wait()
    with pytest.raises(mnrt.DeviceExecutionError, match=r"wait_event.*program 'lookup'"):
        q1.finish()
    with pytest.raises(mnrt.DeviceExecutionError, match="program 'lookup'"):
        q0.finish()
    assert [c.status for c in list(q1.history)[-2:]] == ["failed", "skipped"]
    q1.enqueue_write_buffer(after, np.ones(1, np.float32))
    q1.finish()  # the queue works again once its error was reported


def test_event_wait_timeout_and_query_never_block(pair):
    d0, _ = pair
    q0 = d0.command_queue(0)
    with q0._run_lock:  # as if a long command held the queue
        ev = q0.record_event()
        assert ev.query() is False
        with pytest.raises(mnrt.EventTimeoutError, match=f"event {ev.id}"):
            ev.wait(timeout=0.05)
    ev.wait()
    with pytest.raises(mnrt.InvalidArgumentError, match="timeout"):
        ev.wait(timeout=-1)


def test_queues_waiting_on_each_others_earlier_events_never_deadlock(pair):
    """Two queues, each waiting on the other's events in turn, with the host draining both
    from several threads: every wait names an event already recorded, so all complete."""
    d0, d1 = pair
    q0, q1 = d0.command_queue(0), d1.command_queue(0)
    x = d0.create_buffer((8,), "float", name="x")
    y = d1.create_buffer((8,), "float", name="y")
    q0.enqueue_write_buffer(x, np.zeros(8, np.float32))
    inc = d1.create_program([mnrt.Kernel("add", ["y", "y"], ["y"])])
    for _ in range(50):
        q0.enqueue_copy_buffer(x, y)
        q1.wait_event(q0.record_event())
        q1.enqueue_program(inc, {"y": y})
        q1.enqueue_copy_buffer(y, x)
        q0.wait_event(q1.record_event())
    threads = [threading.Thread(target=q.finish) for q in (q0, q1, q0, q1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    np.testing.assert_array_equal(q0.enqueue_read_buffer(x), np.zeros(8))


def test_eight_threads_copy_and_wait_for_a_while_and_lose_nothing(pair):
    """Eight host threads share one queue per device: each writes its own values on device
    0, copies them to device 1, and has device 1's queue wait for the copy's event before a
    program reads them, then reads the result. Every result is right and every command ran."""
    d0, d1 = pair
    q0, q1 = d0.command_queue(0), d1.command_queue(0)
    n_threads, errors, rounds = 8, [], [0] * 8
    deadline = time.monotonic() + 1.5

    def worker(t: int) -> None:
        try:
            a = d0.create_buffer((16,), "float", name=f"a{t}")
            b = d1.create_buffer((16,), "float", name=f"b{t}")
            c = d1.create_buffer((16,), "float", name=f"c{t}")
            prog = d1.create_program([mnrt.Kernel("add", ["b", "b"], ["c"])])
            i = 0
            while time.monotonic() < deadline or i < 20:
                value = np.full(16, t * 1000 + i, np.float32)
                q0.enqueue_write_buffer(a, value)
                q0.enqueue_copy_buffer(a, b)
                ev = q0.record_event()
                q1.wait_event(ev)
                q1.enqueue_program(prog, {"b": b, "c": c})
                out = q1.enqueue_read_buffer(c)
                if not np.array_equal(out, 2 * value) or not ev.query():
                    errors.append((t, i, out[:2]))
                i += 1
            rounds[t] = i
        except Exception as e:  # reported below, with the thread
            errors.append((t, repr(e)))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not any(th.is_alive() for th in threads)
    assert errors == []
    q0.finish()
    q1.finish()
    total = sum(rounds)
    assert q0.commands_done == 3 * total  # write, copy, record per round
    assert q1.commands_done == 3 * total  # wait, program, read per round


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["write", "copy", "record", "wait", "program"]),
        st.integers(0, 2),  # device
        st.integers(0, 1),  # queue
        st.integers(0, 2),  # other device
        st.integers(0, 99),  # event pick / value
    ),
    max_size=40,
)


@settings(max_examples=25, deadline=None)
@given(ops=_OPS)
def test_any_mix_of_copies_and_events_completes(ops):
    """Whatever copies, records and waits three devices' queues get, in any order, every
    queue finishes (a wait can only name an event already recorded) and every command ran."""
    devs = [mnrt.open_device(i) for i in range(3)]
    try:
        bufs = [d.create_buffer((8,), "float", name=f"b{i}") for i, d in enumerate(devs)]
        progs = [d.create_program([mnrt.Kernel("add", ["x", "x"], ["x"])]) for d in devs]
        events: list[mnrt.Event] = []
        enqueued = 0
        for op, dev, queue, other, pick in ops:
            q = devs[dev].command_queue(queue)
            if op == "write":
                q.enqueue_write_buffer(bufs[dev], np.full(8, pick, np.float32))
            elif op == "copy":
                q.enqueue_copy_buffer(bufs[other], bufs[dev])
            elif op == "record":
                events.append(q.record_event())
            elif op == "wait" and events:
                q.wait_event(events[pick % len(events)])
            elif op == "program":
                q.enqueue_program(progs[dev], {"x": bufs[dev]})
            else:
                continue
            enqueued += 1
        done = threading.Event()
        threading.Thread(
            target=lambda: (
                [d.command_queue(i).finish() for d in devs for i in (0, 1)],
                done.set(),
            ),
            daemon=True,
        ).start()
        assert done.wait(20), "queues did not finish"
        assert all(ev.query() for ev in events)
        ran = sum(d.command_queue(i).commands_done for d in devs for i in (0, 1))
        assert ran == enqueued
    finally:
        for d in devs:
            d._close_quietly()
