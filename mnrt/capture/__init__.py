"""Capture: record host API calls into a LightBinary.

    mnrt.begin_capture(); ...host code...; binary = mnrt.end_capture()
    with mnrt.capture("model.mnlb"): ...host code...   # saved on success only

Only the outermost host call is recorded; objects created before capture began are
recorded at first use as a snapshot of their state. Every read records the data it
returned as a golden unless `goldens=False`; `compare_to_golden` records one explicitly.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Iterator

import numpy as np

from ..errors import InvalidArgumentError
from ..format import LightBinary
from ..host import Buffer, CommandQueue, observe
from ..host.golden import Check, compare
from .build import build
from .recorder import READ, CaptureError, Recorder

_lock = threading.Lock()

__all__ = ["CaptureError", "begin_capture", "capture", "compare_to_golden", "end_capture"]


def begin_capture(goldens: bool = True) -> None:
    """Start recording host API calls (from every thread) into a new light binary."""
    with _lock:
        if isinstance(observe.current(), Recorder):
            raise CaptureError("a capture is already running; end_capture() it first")
        observe.install(Recorder(goldens=goldens))


def end_capture(description: str = "") -> LightBinary:
    """Stop recording; wait for the captured queues, then build the binary."""
    with _lock:
        rec = observe.current()
        if not isinstance(rec, Recorder):
            raise CaptureError("end_capture() without begin_capture()")
        observe.install(None)
    rec.close()
    queues = {id(q): q for q in rec._keep if isinstance(q, CommandQueue)}
    for q in queues.values():
        q._drain()
    # Non-blocking reads were filled by the queues just now: their data is final.
    log = [
        (*e[:4], e[4].copy()) if e[0] == READ and not e[3] and e[4] is not None else e
        for e in rec.log
    ]
    # Building allocates a few objects per command and frees none: a collection cycle
    # would only walk the whole log again (as bulk loaders like pickle avoid too).
    paused = gc.isenabled()
    gc.disable()
    try:
        return build(log, rec.devices, description)
    finally:
        if paused:
            gc.enable()


@contextlib.contextmanager
def capture(path: str | os.PathLike, goldens: bool = True, description: str = "") -> Iterator[None]:
    """Capture the block into `path`, written atomically when the block succeeds; nothing
    is written if it raises."""
    begin_capture(goldens=goldens)
    try:
        yield
    except BaseException:
        with _lock:
            rec = observe.current()
            if isinstance(rec, Recorder):
                observe.install(None)
                rec.close()
        raise
    end_capture(description).save(path)


def compare_to_golden(
    q: CommandQueue,
    buffer: Buffer,
    expected: np.ndarray,
    rtol: float | None = None,
    atol: float | None = None,
    name: str | None = None,
) -> Check:
    """Check a buffer against a user-supplied golden now, and record the check when a
    capture is running, so replay checks it too. Tolerances default to the dtype's."""
    if not isinstance(buffer, Buffer):
        raise InvalidArgumentError(f"compare_to_golden takes a Buffer, got {type(buffer).__name__}")
    expected = np.asarray(expected)
    if expected.shape != buffer.shape:
        raise InvalidArgumentError(
            f"golden of shape {expected.shape} does not match buffer '{buffer.name}' of shape "
            f"{buffer.shape}"
        )
    name = name or buffer.name
    rec = observe.current()
    if isinstance(rec, Recorder):
        rec.golden(q, buffer, expected, rtol, atol, name)
    with observe.unobserved():
        actual = q.enqueue_read_buffer(buffer, blocking=True)
    return compare(name, actual, expected, buffer.dtype, rtol, atol)
