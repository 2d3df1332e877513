"""Command queues run by waiting host threads: no command is lost or run twice, whatever
interrupts the thread that runs them."""

from __future__ import annotations

import contextlib
from collections import deque

import numpy as np

import mnrt
from mnrt.device.cost import Modelled
from mnrt.host.commands import Command


class _Note(Command):
    """A command that notes its name in `ran` when it runs."""

    def __init__(self, ran: list[str], name: str) -> None:
        super().__init__()
        self.ran, self.name = ran, name

    def run(self, backend):
        self.ran.append(self.name)
        return Modelled(0.0, 0.0)


class _InterruptedAfterTaking(deque):
    """Pending commands whose next taking off is followed by Ctrl-C: CPython raises a
    KeyboardInterrupt that arrived meanwhile as a call (popleft) returns."""

    def popleft(self):
        super().popleft()
        self.popleft = super().popleft  # once
        raise KeyboardInterrupt


def test_an_interrupt_as_the_host_takes_a_command_neither_loses_nor_repeats_it(dev, q, monkeypatch):
    monkeypatch.setattr(q, "_work", lambda: None)  # the host thread runs every command
    ran: list[str] = []
    for name in ("a", "b", "c"):
        q._submit(_Note(ran, name), blocking=False)
    q._pending = _InterruptedAfterTaking(q._pending)
    with contextlib.suppress(KeyboardInterrupt):
        q.finish()
    with contextlib.suppress(mnrt.DeviceExecutionError):
        q.finish()  # one reported as failed must not have run
    done = [c.name for c in q.history if c.status == "done"]
    assert ran == done
    assert [c.name for c in q.history] == ["a", "b", "c"]  # each ran or failed, once


class _InterruptedAfterPutting(deque):
    """Pending commands whose next putting on is followed by Ctrl-C, raised as the append
    returns."""

    def append(self, cmd):
        super().append(cmd)
        self.append = super().append  # once
        raise KeyboardInterrupt


def test_a_command_put_on_as_ctrl_c_lands_is_waited_for(dev, q, monkeypatch):
    monkeypatch.setattr(q, "_work", lambda: None)  # the host thread runs every command
    x = dev.create_buffer((4,), "float")
    data = np.arange(4, dtype=np.float32) + 0.5
    q._pending = _InterruptedAfterPutting(q._pending)
    with contextlib.suppress(KeyboardInterrupt):
        q.enqueue_write_buffer(x, data)  # queued, though the call was interrupted
    out = q.enqueue_read_buffer(x)  # waits for the write, and for itself
    assert [c.kind for c in q.history] == ["write_buffer", "read_buffer"]
    np.testing.assert_array_equal(out, data)
