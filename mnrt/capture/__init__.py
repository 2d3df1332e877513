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
import itertools
import math
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from ..device.dtypes import host_numbers
from ..errors import InvalidArgumentError
from ..format import LightBinary
from ..format.text import unprintable
from ..host import Buffer, CommandQueue, internal, observe
from ..host.golden import Check, compare
from .build import build
from .recorder import READ, CaptureError, Recorder

_lock = threading.Lock()

__all__ = [
    "CaptureError",
    "CaptureVerificationError",
    "begin_capture",
    "capture",
    "compare_to_golden",
    "end_capture",
]


def begin_capture(goldens: bool = True, fingerprints: bool = False) -> None:
    """Start recording host API calls (from every thread) into a new light binary. With
    `fingerprints`, every kernel's outputs are fingerprinted as they are computed (see
    format/fingerprints.py), for `mnrt run --locate`."""
    _begin(goldens, if_idle=False, fingerprints=fingerprints)


def _begin(
    goldens: bool,
    if_idle: bool,
    owner: str = "",
    fingerprints: bool = False,
    contents: Mapping[int, tuple[Buffer, Callable[[], np.ndarray]]] | None = None,
) -> Recorder | None:
    """Install a new recorder and return it; with `if_idle`, None instead of an error when
    a capture is already running (the check and the start are one step). `contents`: see
    Recorder."""
    for name, flag in (("goldens", goldens), ("fingerprints", fingerprints)):
        if not isinstance(flag, bool):
            raise InvalidArgumentError(f"{name} must be True or False, got {flag!r}")
    with _lock:
        running = observe.current()
        if isinstance(running, Recorder):
            if if_idle:
                return None
            if running.owner:
                raise CaptureError(
                    f"a capture is already running: {running.owner}; captures record the "
                    "whole process, one at a time, so begin yours once it has finished"
                )
            raise CaptureError("a capture is already running; end_capture() it first")
        rec = Recorder(goldens=goldens, owner=owner, fingerprints=fingerprints, contents=contents)
        observe.install(rec)
        return rec


def vouch(contents: Callable[[], Mapping[int, tuple[Buffer, Callable[[], np.ndarray]]]]) -> None:
    """For code whose buffers hold arrays that nothing changes (a compiled function's
    weights): when a capture is running, it snapshots those of the buffers it has not seen
    yet from the arrays (what `contents()` gives, as for capture_if_idle) rather than
    copying hundreds of megabytes of device memory. Nothing is asked when none runs."""
    rec = observe.current()
    if isinstance(rec, Recorder):
        rec.vouch(contents())


def _forget_in_child() -> None:
    """In a forked child the lock may have been held by a thread the child does not have,
    and a capture that a compile was recording on another thread has no one to end it
    there. A capture of the user's goes on: the child may end it (and save its own)."""
    global _lock
    _lock = threading.Lock()
    running = observe.current()
    if isinstance(running, Recorder) and running.owner:
        observe.install(None)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def end_capture(description: str = "") -> LightBinary:
    """Stop recording; wait for the captured queues, then build the binary."""
    _check_description(description)
    with _lock:
        rec = observe.current()
        if not isinstance(rec, Recorder):
            raise CaptureError("end_capture() without begin_capture()")
        observe.install(None)
    rows, devices = rec.close()
    try:
        for q in rec.queues():
            internal.drain(q)
    finally:
        rec.cores.close()  # once the captured kernels have run
    _check_nothing_skipped(rec)
    # Non-blocking reads have run by now: each copied its data as it ran.
    log = [(*e[:4], _kept(e[4])) if e[0] == READ else e for e in itertools.islice(rec.log, rows)]
    # Building allocates a few objects per command and frees none: a collection cycle
    # would only walk the whole log again (as bulk loaders like pickle avoid too).
    paused = gc.isenabled()
    gc.disable()
    try:
        return build(log, devices, description, rec.printed)
    finally:
        if paused:
            gc.enable()


def _kept(golden: np.ndarray | None) -> np.ndarray | None:
    """A read's golden, unless the read failed (ReadBuffer then makes it read-only)."""
    return golden if golden is not None and golden.flags.writeable else None


def _check_description(description: Any) -> None:
    if not isinstance(description, str):
        raise InvalidArgumentError(f"description must be a string, got {description!r}")
    problem = unprintable(description)
    if problem:
        raise InvalidArgumentError(
            f"description {description!r} cannot be stored in a light binary: {problem}; "
            "use printable text on one line"
        )


def _check_nothing_skipped(rec: Recorder) -> None:
    """Refuse a capture whose queues skipped commands behind a failed one: replay would
    run them, so the binary would not reproduce this run."""
    skipped = rec.skipped_commands()
    if skipped:
        where = ", ".join(
            f"{n} on device {q.device.index} queue {q.index}" for q, n in skipped.items()
        )
        raise CaptureError(
            f"commands were skipped during the capture ({where}) because an earlier command "
            "failed on the device; a light binary would run them on replay and not reproduce "
            "this run. Fix the failing command (see the DeviceExecutionError that finish() "
            "raised) and capture again"
        )


def _check_path(path: Any) -> str:
    """Where a capture will be saved, checked before the block runs rather than after."""
    try:
        path = os.fspath(path)
    except TypeError:
        raise InvalidArgumentError(
            f"capture path must be a str or os.PathLike, got {type(path).__name__}"
        ) from None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path) or not os.path.isdir(parent):
        raise InvalidArgumentError(
            f"cannot save a capture to {path}: "
            + ("it is a directory" if os.path.isdir(path) else f"no directory {parent}")
            + "; give a file path in an existing directory"
        )
    return path


class CaptureVerificationError(CaptureError):
    """`capture(..., verify=True)`: replaying the capture did not reproduce its goldens."""


# What checks a capture by replaying it (capture never imports replay: the package sets
# this to replay's check when it is imported, see mnrt/__init__.py). It returns None when
# the binary reproduces its goldens, else why not, naming the first divergent kernel.
_verifier: Callable[[LightBinary], str | None] | None = None


def use_verifier(verifier: Callable[[LightBinary], str | None]) -> None:
    """Set what `capture(..., verify=True)` replays a capture with (see `_verifier`)."""
    global _verifier
    _verifier = verifier


@contextlib.contextmanager
def capture(
    path: str | os.PathLike,
    goldens: bool = True,
    description: str = "",
    fingerprints: bool = False,
    verify: bool = False,
) -> Iterator[None]:
    """Capture the block into `path`, written atomically when the block succeeds; nothing
    is written if it raises (or the capture cannot be built), and the capture ends either way.
    With `verify`, the binary is replayed once before it is kept (fingerprints are then
    recorded): one that does not reproduce its own goldens is refused with a
    CaptureVerificationError naming the first divergent kernel, and nothing is written."""
    path = _check_path(path)
    _check_description(description)
    if not isinstance(verify, bool):
        raise InvalidArgumentError(f"verify must be True or False, got {verify!r}")
    rec = None
    try:
        rec = _begin(goldens, if_idle=False, fingerprints=fingerprints or verify)
        yield
        binary = end_capture(description)
    except BaseException:
        _abandon(rec)
        raise
    if verify:
        if _verifier is None:
            raise CaptureError("capture(verify=True) needs mnrt.replay: import mnrt")
        problem = _verifier(binary)
        if problem is not None:
            raise CaptureVerificationError(
                f"capture(verify=True) refused the capture for {path}: {problem}; nothing was saved"
            )
    binary.save(path)


@contextlib.contextmanager
def capture_if_idle(
    path: str | os.PathLike,
    goldens: bool = True,
    description: str = "",
    owner: str = "",
    fingerprints: bool = False,
    contents: Mapping[int, tuple[Buffer, Callable[[], np.ndarray]]] | None = None,
) -> Iterator[bool]:
    """`capture`, unless a capture is already running: then nothing is recorded and the
    block is told so (it gets False) rather than failing. For code that records a binary
    of its own (a compile's codegen_dir) and must neither fail nor run its work inside the
    user's capture, whichever thread began it, and whenever. `owner` names that code in
    the error of a begin_capture made meanwhile. `contents` (id(buffer) -> (buffer, a
    function giving its contents as the device stores them)): buffers whose contents that
    code vouches for, from arrays nothing changes while the capture runs; their snapshots
    record those arrays instead of copying the device memory."""
    path = _check_path(path)
    _check_description(description)
    rec = None
    try:
        rec = _begin(
            goldens, if_idle=True, owner=owner, fingerprints=fingerprints, contents=contents
        )
        if rec is None:
            yield False
            return
        yield True
        binary = end_capture(description)
    except BaseException:
        _abandon(rec)
        raise
    binary.save(path)


def _abandon(rec: Recorder | None) -> None:
    """End a capture that will not be saved, if it is still the one running."""
    with _lock:
        if rec is not None and observe.current() is rec:
            observe.install(None)
            rec.close()
            rec.cores.close()


def compare_to_golden(
    q: CommandQueue,
    buffer: Buffer,
    expected: np.ndarray,
    rtol: float | None = None,
    atol: float | None = None,
    name: str | None = None,
) -> Check:
    """Check a buffer against a user-supplied golden now, and record the check when a
    capture is running, so replay checks it too. Tolerances default to the dtype's.

    The golden is compared as it is recorded: in the buffer's dtype (rounded to half for
    a half buffer), so that the live verdict and the replayed one agree."""
    if not isinstance(q, CommandQueue):
        raise InvalidArgumentError(
            f"compare_to_golden takes a CommandQueue first, got {type(q).__name__}"
        )
    if not isinstance(buffer, Buffer):
        raise InvalidArgumentError(f"compare_to_golden takes a Buffer, got {type(buffer).__name__}")
    golden = _golden_array(buffer, expected)
    rtol, atol = _tolerance("rtol", rtol), _tolerance("atol", atol)
    if name is not None and not isinstance(name, str):
        raise InvalidArgumentError(f"compare_to_golden: name must be a string, got {name!r}")
    name = name or buffer.name
    with observe.unobserved():
        # First: the read rejects a freed buffer, another device's queue, a closed device.
        actual = internal.check_read(q, buffer)
    rec = observe.current()
    if isinstance(rec, Recorder):
        rec.golden(q, buffer, golden, rtol, atol, name)
    return compare(name, actual, golden, buffer.dtype, rtol, atol)


def _golden_array(buffer: Buffer, expected: Any) -> np.ndarray:
    """`expected` as the binary stores it: an array of the buffer's shape in its read
    dtype, rounded as its dtype rounds. Values the dtype cannot hold are refused rather than
    silently changed (2.5 for an int32 buffer would become 2)."""
    dt = buffer.dtype
    array = np.asarray(expected)
    if array.shape != buffer.shape:
        raise InvalidArgumentError(
            f"golden of shape {array.shape} does not match buffer '{buffer.name}' of shape "
            f"{buffer.shape}; give a golden of the buffer's shape"
        )
    numbers = host_numbers(array)
    if numbers is None:
        raise InvalidArgumentError(
            f"golden for buffer '{buffer.name}' must be numbers, got an array of {array.dtype}"
        )
    golden = numbers.astype(dt.read_dtype)
    if not dt.is_float and not np.array_equal(golden, numbers):
        raise InvalidArgumentError(
            f"golden for {dt.name} buffer '{buffer.name}' holds values a {dt.name} cannot "
            "(fractions or out of range); give the exact values the buffer should hold"
        )
    return dt.from_storage(dt.to_storage(golden)) if dt.codec is not None else golden


def _tolerance(what: str, value: Any) -> float | None:
    """A tolerance as recorded: None (or NaN, as binaries spell it) for the dtype's default."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidArgumentError(f"compare_to_golden: {what} must be a number, got {value!r}")
    if math.isnan(value):
        return None
    if value < 0 or math.isinf(value):
        raise InvalidArgumentError(
            f"compare_to_golden: {what} must be a finite number >= 0, got {value!r} "
            "(None for the dtype's default)"
        )
    return float(value)
