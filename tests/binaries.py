"""Small captures that several test modules replay, convert or corrupt."""

from __future__ import annotations

import numpy as np

import mnrt


def small_capture() -> mnrt.LightBinary:
    """A short valid capture: one program, one write, one read with a golden."""
    with mnrt.open_device(0) as dev:
        q = dev.command_queue(0)
        mnrt.begin_capture()
        a = dev.create_buffer((2, 3), "float", name="a")
        y = dev.create_buffer((2, 3), "float", name="y")
        prog = dev.create_program([mnrt.Kernel("exp", ["a"], ["y"])], name="e")
        q.enqueue_write_buffer(a, np.arange(6, dtype=np.float32).reshape(2, 3) / 10)
        q.enqueue_program(prog, {"a": a, "y": y})
        q.enqueue_read_buffer(y)
        return mnrt.end_capture()


def three_device_capture() -> mnrt.LightBinary:
    """Copies both ways between devices and events between them: device 0 computes and
    pushes its result to device 1 (copy on the sender's queue, then an event); device 2
    records an event that device 1's second queue waits on before pulling device 2's
    buffer (copy on the receiver's queue); device 1 computes on both."""
    devices = [mnrt.open_device(i) for i in range(3)]
    try:
        d0, d1, d2 = devices
        q0, q1, q1b, q2 = (
            d0.command_queue(0),
            d1.command_queue(0),
            d1.command_queue(1),
            d2.command_queue(0),
        )
        mnrt.begin_capture()
        x = d0.create_buffer((64, 64), "float", name="x")
        h = d0.create_buffer((64, 64), "float", name="h")
        h1 = d1.create_buffer((64, 64), "float", name="h_on_1")
        z = d2.create_buffer((64, 64), "float", name="z")
        z1 = d1.create_buffer((64, 64), "float", name="z_on_1")
        y = d1.create_buffer((64, 64), "float", name="y")
        q0.enqueue_write_buffer(x, np.linspace(-1, 1, 64 * 64, dtype=np.float32).reshape(64, 64))
        q0.enqueue_program(d0.create_program([mnrt.Kernel("exp", ["a"], ["b"])]), {"a": x, "b": h})
        q0.enqueue_copy_buffer(h, h1)
        pushed = q0.record_event()
        q2.enqueue_write_buffer(z, np.ones((64, 64), np.float32))
        written = q2.record_event()
        q1b.wait_event(written)
        q1b.enqueue_copy_buffer(z, z1)
        pulled = q1b.record_event()
        q1.wait_event(pushed)
        q1.wait_event(pulled)
        add = d1.create_program([mnrt.Kernel("add", ["a", "b"], ["c"])])
        q1.enqueue_program(add, {"a": h1, "b": z1, "c": y})
        q1.enqueue_read_buffer(y)
        return mnrt.end_capture()
    finally:
        for d in devices:
            d.close()
