"""Threads that run command queues, kept from one queue to the next.

A replay opens a fresh device, with fresh queues, on every loop. Starting a thread costs
50-100 us on a virtual machine (Thread.start waits until the new thread runs) and joining
one about half that again, a fifth of a small model's whole replay. So a queue borrows a
parked thread when it first needs one and lets it go when it stops, without waiting for it:
the thread parks itself once the queue's loop has returned.
"""

from __future__ import annotations

import os
import queue as _queue
import threading
from collections.abc import Callable

_lock = threading.Lock()
_parked: list[_queue.SimpleQueue] = []  # the inboxes of idle threads


def run(loop: Callable[[], object]) -> None:
    """Call loop() on a worker thread: a parked one, else a new one. Returns at once."""
    with _lock:
        inbox = _parked.pop() if _parked else None
    if inbox is None:
        inbox = _queue.SimpleQueue()
        threading.Thread(target=_serve, args=(inbox,), name="mnrt-queue", daemon=True).start()
    inbox.put(loop)


def _serve(inbox: _queue.SimpleQueue) -> None:
    while True:
        inbox.get()()
        with _lock:
            _parked.append(inbox)


def _forget_in_child() -> None:
    """A forked child has none of the parent's threads: a loop handed to one would never run."""
    global _lock
    _lock = threading.Lock()
    _parked.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
