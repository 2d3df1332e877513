"""Lazy fill: a fresh buffer reads as the device's fill whatever happens between its
creation and its first read (a failed program, a second queue, an interrupt, a clear)."""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest

import mnrt
from mnrt.device.memory import DeviceMemory, Fill

HANG_S = 10  # a hang guard, not a timing


@pytest.fixture
def garbage(monkeypatch):
    """Fresh device memory holds 0xa5 bytes until filled: what np.empty may hand out (it
    reuses freed host memory), made the same on every run."""
    allocate = DeviceMemory.allocate

    def dirty(self, nbytes, what="buffer", filled=True):
        address, data = allocate(self, nbytes, what, filled)
        if not filled:
            data.fill(0xA5)
        return address, data

    monkeypatch.setattr(DeviceMemory, "allocate", dirty)


def test_what_a_failed_program_never_wrote_still_holds_the_fill(dev, q, garbage):
    x = dev.create_buffer((4,), "float", name="x")
    idx = dev.create_buffer((1,), "int32", name="idx")
    a, out, b = (dev.create_buffer(s, "float", name=n) for n, s in (("a", 4), ("out", 1), ("b", 1)))
    prog = dev.create_program(
        [
            mnrt.Kernel("neg", ["x"], ["a"]),
            mnrt.Kernel("gather", ["x", "idx"], ["out"]),  # index 9 of 4: fails
            mnrt.Kernel("neg", ["out"], ["b"]),  # never runs
        ]
    )
    q.enqueue_write_buffer(x, np.arange(1, 5, dtype=np.float32))
    q.enqueue_write_buffer(idx, np.array([9], np.int32))
    q.enqueue_program(prog, {"x": x, "idx": idx, "a": a, "out": out, "b": b})
    with pytest.raises(mnrt.DeviceExecutionError, match="gather"):
        q.finish()
    np.testing.assert_array_equal(q.enqueue_read_buffer(a), -np.arange(1, 5))  # it ran
    np.testing.assert_array_equal(q.enqueue_read_buffer(out), [0.0])
    np.testing.assert_array_equal(q.enqueue_read_buffer(b), [0.0])


def test_two_queues_reading_a_fresh_buffer_at_once_both_read_the_fill(dev, garbage, monkeypatch):
    x = dev.create_buffer((8,), "float")
    inside, release = threading.Event(), threading.Event()
    calls = itertools.count()
    apply = Fill.apply

    def slow_apply(self, dest, address):
        if next(calls) == 0:  # the first fill is still going in (a large one takes a while)
            inside.set()
            release.wait(HANG_S)
        apply(self, dest, address)

    monkeypatch.setattr(Fill, "apply", slow_apply)
    first: list[np.ndarray] = []
    q0, q1 = dev.command_queue(0), dev.command_queue(1)
    reader = threading.Thread(target=lambda: first.append(q0.enqueue_read_buffer(x)))
    reader.start()
    try:
        assert inside.wait(HANG_S)
        second = q1.enqueue_read_buffer(x)  # while q0's fill is going in
    finally:
        release.set()
        reader.join(HANG_S)
    np.testing.assert_array_equal(second, np.zeros(8))
    np.testing.assert_array_equal(first[0], np.zeros(8))


def test_a_fill_cut_short_by_an_interrupt_is_put_in_again(dev, q, garbage, monkeypatch):
    monkeypatch.setattr(q, "_work", lambda: None)  # the host thread runs every command
    x = dev.create_buffer((8,), "float")
    apply = Fill.apply
    calls = itertools.count()

    def interrupted_apply(self, dest, address):
        if next(calls) == 0:
            raise KeyboardInterrupt  # Ctrl-C before the fill went in
        apply(self, dest, address)

    monkeypatch.setattr(Fill, "apply", interrupted_apply)
    with pytest.raises(KeyboardInterrupt):
        q.enqueue_read_buffer(x)
    with pytest.raises(mnrt.DeviceExecutionError, match="KeyboardInterrupt"):
        q.finish()
    np.testing.assert_array_equal(q.enqueue_read_buffer(x), np.zeros(8))


def test_a_buffer_created_while_another_thread_clears_reads_as_a_fill(dev, q, garbage, monkeypatch):
    memory = dev._backend.memory
    clear = memory.clear
    made: list[mnrt.Buffer] = []

    def clear_then_create(fill):
        clear(fill)
        # Another thread's create_buffer, landing just after the live buffers were filled.
        made.append(dev.create_buffer((8,), "uint8"))

    monkeypatch.setattr(memory, "clear", clear_then_create)
    dev.clear(pattern=0x5A)
    np.testing.assert_array_equal(q.enqueue_read_buffer(made[0]), np.full(8, 0x5A))
