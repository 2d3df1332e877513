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
