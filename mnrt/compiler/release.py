"""Giving back the device memory of compiled functions.

A compiled function owns the buffers its lowering created (weights, inputs, outputs,
temporaries), as a CUDA graph's exec owns its allocations. `close()` frees them at once. A
function dropped without it has them freed too, but later: the garbage collector may drop
it on any thread, the queue's worker included, at any moment, a capture's included, and a
free waits for the device's queues and is a host call a capture would record. So the
function's finalizer only hands its buffers to its context's `Orphans`, which frees them
at the context's next compile, call or close of a function, outside any capture and any
trace capture (as a stream-ordered free runs once the stream gets there)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable

from ..errors import MnrtError, TraceError
from ..host import Buffer, observe


def free(buffers: Iterable[Buffer]) -> None:
    """Deallocate each buffer still allocated (one buffer may be listed several times: a
    lowering binds one to several values whose lifetimes do not overlap)."""
    for buf in {id(b): b for b in buffers}.values():
        if buf.is_allocated:
            buf.deallocate()


def free_quietly(buffers: Iterable[Buffer]) -> None:
    """`free`, on the way out of an error: the error raised is the one that matters."""
    with contextlib.suppress(MnrtError):
        free(buffers)


class Orphans:
    """Buffers of a context's compiled functions that were dropped without `close()`,
    waiting for a moment when freeing them is safe."""

    def __init__(self) -> None:
        self._pending: list[list[Buffer]] = []
        # Reentrant: a collection that drops a function may run on the thread in `release`.
        self._lock = threading.RLock()

    def adopt(self, buffers: list[Buffer]) -> None:
        """Take a dropped function's buffers (a finalizer: any thread, any moment)."""
        with self._lock:
            self._pending.append(buffers)

    def release(self) -> None:
        """Free what was adopted, on the host thread of a compile or a call. Not while a
        capture records host calls (a free would land in its binary) nor while a queue
        records a trace (which forbids frees): then at a later call."""
        if not self._pending or observe.current() is not None:  # the common case: nothing
            return
        while True:
            with self._lock:
                if not self._pending:
                    return
                buffers = self._pending.pop()
            try:
                free(buffers)
            except TraceError:
                with self._lock:
                    self._pending.append(buffers)
                return

    def clear(self) -> None:
        """Forget what was adopted: the device was closed, which freed it all."""
        with self._lock:
            self._pending.clear()
