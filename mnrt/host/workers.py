"""Threads that run command queues, kept from one queue to the next.

A replay opens a fresh device, with fresh queues, on every loop. Starting a thread costs
50-100 us on a virtual machine (Thread.start waits until the new thread runs) and joining
one about half that again, a fifth of a small model's whole replay. So a queue borrows a
parked thread when it first needs one and lets it go when it stops, without waiting for it:
the thread parks itself once the queue's loop has returned.

A loop told to stop returns as soon as its thread gets the GIL, which the thread that told
it (closing a device, or collecting a dropped one to open its index again) holds. A queue
that starts meanwhile waits for that thread to park rather than start another: otherwise a
process that drops and reopens devices in a loop grows a thread per device the collector
frees at once.
"""

from __future__ import annotations

import os
import queue as _queue
import threading
from collections.abc import Callable

# How long a queue that starts waits for a stopping loop's thread to park. It parks within
# microseconds once it runs; this bounds the wait if it is slow to be scheduled.
SETTLE_S = 0.1

_lock = threading.RLock()  # re-entrant: `stop` runs in finalizers, which may run anywhere
_parked_or_left = threading.Condition(_lock)
_parked: list[_queue.SimpleQueue] = []  # the inboxes of idle threads
_serving: set[_queue.SimpleQueue] = set()  # the wake-up channels of loops on a thread now
_stopping: set[_queue.SimpleQueue] = set()  # of those, the ones told to stop


def run(loop: Callable[[], object], channel: _queue.SimpleQueue) -> None:
    """Call loop() on a worker thread: a parked one, else a new one. Returns at once.
    `channel` is the loop's wake-up channel, which `stop` puts False into."""
    with _lock:
        if not _parked and _stopping:
            _parked_or_left.wait_for(lambda: _parked or not _stopping, timeout=SETTLE_S)
        inbox = _parked.pop() if _parked else None
        _serving.add(channel)
    try:
        if inbox is None:
            inbox = _queue.SimpleQueue()
            threading.Thread(target=_serve, args=(inbox,), name="mnrt-queue", daemon=True).start()
    except BaseException:
        with _lock:
            _serving.discard(channel)
        raise
    inbox.put((loop, channel))


def stop(channel: _queue.SimpleQueue) -> None:
    """Tell the loop waiting on `channel` to return, behind the wake-ups already sent."""
    with _lock:
        if channel in _serving:
            _stopping.add(channel)
    channel.put(False)


def _serve(inbox: _queue.SimpleQueue) -> None:
    while True:
        loop, channel = inbox.get()
        returned = False
        try:
            loop()
            returned = True
        finally:
            with _lock:
                _serving.discard(channel)
                _stopping.discard(channel)
                if returned:  # a thread that a raising loop ends must not be handed work
                    _parked.append(inbox)
                _parked_or_left.notify_all()


def _forget_in_child() -> None:
    """A forked child has none of the parent's threads: a loop handed to one would never run."""
    global _lock, _parked_or_left
    _lock = threading.RLock()
    _parked_or_left = threading.Condition(_lock)
    _parked.clear()
    _serving.clear()
    _stopping.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
