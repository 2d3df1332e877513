"""Spreading one kernel's work over the host's cores, as onnxruntime's intra-op pool does.

A kernel whose work falls into independent rows (elementwise ones; normalisations over
trailing axes) hands `for_rows` a function of a row slice. Above the size where a thread
handoff pays for itself, slices run on a shared pool while the calling thread takes the
first. Every row is computed exactly as it would be alone, so results never depend on the
thread count. numpy releases the GIL inside its loops, which is what makes this pay.

MNRT_THREADS sets the thread count (default: the cores this process may use; 1: no pool).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import math
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError

ENV_THREADS = "MNRT_THREADS"
MAX_THREADS = 256
# Elements per thread below which one thread wins. Measured on a 2-core VM, where waking a
# pool thread costs 50-300 us: gelu and softmax gained on 2 threads from 256K elements on,
# not at 128K.
MIN_ELEMENTS_PER_THREAD = 1 << 17
PARTS_PER_THREAD = 4  # work is handed out in this many pieces per thread

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_threads: int | None = None


def threads() -> int:
    """How many threads a kernel may use: MNRT_THREADS, else the cores this process may use.
    Read once; devices read it when they open, so a bad value is reported there."""
    global _threads
    if _threads is None:
        raw = os.environ.get(ENV_THREADS)
        if raw is None:
            usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else ()
            _threads = len(usable) or os.cpu_count() or 1
        else:
            try:
                _threads = int(raw)
            except ValueError:
                _threads = 0
            if not 1 <= _threads <= MAX_THREADS:
                _threads = None
                raise InvalidArgumentError(
                    f"{ENV_THREADS}={raw!r}: set it to a whole number of threads from 1 to "
                    f"{MAX_THREADS} (1 runs every kernel on one thread)"
                )
    return _threads


# Replays that share the cores now, by the BLAS threads each asked for; the first to start
# keeps BLAS's own limits, which the last to end puts back. threadpoolctl's limits are
# process-wide, so replays on several threads must not each save and restore them: the
# second would save the first one's limit and leave it behind for good.
_sharing_lock = threading.Lock()
_sharing: collections.Counter[int] = collections.Counter()
_sharing_original: Any = None


@contextlib.contextmanager
def sharing_cores(devices: int) -> Iterator[None]:
    """While `devices` emulated devices run kernels at once (a queue worker each), give
    BLAS only their share of the cores. OpenBLAS's threads spin while they wait for work, so
    four devices' products with two BLAS threads each on two cores ran a 4-stage pipeline's
    replay 2.4x slower per loop (180 ms against 74 ms at 256x512 microbatches).

    OpenBLAS's float32 products round differently on another thread count, so callers pass
    a count that the work fixes (a binary's logical devices), never one that depends on where
    it runs: a replay folded onto fewer devices or spread over MPI ranks then computes the
    same bits as the in-process one."""
    share = GrowingShare()
    share.update(devices)
    try:
        yield
    finally:
        share.close()


class GrowingShare:
    """`sharing_cores` for a count of devices known only as it grows: a capture's, which
    learns of each device at its first host call. The capture's kernels then run with the
    share its binary's replay gives them (by the binary's logical devices), and the replay
    computes the same bits, once every device has been used: a kernel run before the last
    device's first call had the larger share, and may round otherwise (within tolerance)."""

    def __init__(self) -> None:
        self._limit = 0  # the BLAS threads it asked for; 0: none

    def update(self, devices: int) -> None:
        limit = max(1, threads() // devices) if devices > 1 else 0
        if limit != self._limit:
            if limit:
                _share(limit, +1)
            if self._limit:
                _share(self._limit, -1)
            self._limit = limit

    def close(self) -> None:
        self.update(1)


def _share(limit: int, change: int) -> None:
    global _sharing_original
    from threadpoolctl import threadpool_limits

    with _sharing_lock:
        _sharing[limit] += change
        if _sharing[limit] == 0:
            del _sharing[limit]
        if not _sharing:
            _sharing_original.restore_original_limits()
            _sharing_original = None
        elif _sharing_original is None:
            _sharing_original = threadpool_limits(limits=limit, user_api="blas")
        else:
            threadpool_limits(limits=min(_sharing), user_api="blas")


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(threads() - 1, thread_name_prefix="mnrt-kernel")
        return _pool


def _forget_pool_in_child() -> None:
    """A forked child has none of the pool's threads: work sent to it would wait forever."""
    global _pool, _lock
    _pool, _lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def worth(elements: int) -> bool:
    """Whether work over this many elements is large enough to split at all."""
    return elements >= 2 * MIN_ELEMENTS_PER_THREAD and threads() > 1


def for_rows(fn: Callable[[slice], object], rows: int, row_elements: int) -> None:
    """Call fn(slice) over slices covering range(rows), in parallel when the rows hold
    enough elements.

    The rows are cut into several parts per thread, which the calling thread and the pool
    threads take one at a time until none are left. A pool thread that gets no core (numpy's
    BLAS threads spin on idle cores for a while after each product) then costs nothing: the
    caller does its parts, and a pool task that has not started by then is cancelled."""
    n = min(threads(), rows, rows * row_elements // MIN_ELEMENTS_PER_THREAD)
    if n <= 1:
        fn(slice(0, rows))
        return
    parts = min(rows, n * PARTS_PER_THREAD)
    bounds = [rows * i // parts for i in range(parts + 1)]
    taken = itertools.count()  # next() on it is atomic under the GIL
    errstate = np.geterr()  # the caller's floating-point policy holds in pool threads too

    def drain() -> None:
        with np.errstate(**errstate):
            for i in taken:
                if i >= parts:
                    return
                fn(slice(bounds[i], bounds[i + 1]))

    pool = _get_pool()
    futures = [pool.submit(drain) for _ in range(n - 1)]
    try:
        drain()
    finally:
        for f in futures:
            if not f.cancel():
                f.result()


def by_rows(
    fn: Callable[[np.ndarray, np.ndarray], object],
    x: np.ndarray,
    out: np.ndarray | None,
    axis: int,
) -> np.ndarray:
    """Apply fn(x rows, out rows), which writes its result into its second argument, over x
    seen as [rows, *x.shape[axis:]]: the axes before `axis` joined into independent rows
    (all of them for an elementwise kernel). Returns the array written: `out`, or a new one
    when out is missing or not contiguous (the store then copies it where it belongs)."""
    if out is None or not out.flags.c_contiguous:
        out = np.empty(x.shape, x.dtype)
    rows = math.prod(x.shape[:axis])
    xr, outr = x.reshape(rows, *x.shape[axis:]), out.reshape(rows, *x.shape[axis:])
    if worth(x.size):
        for_rows(lambda part: fn(xr[part], outr[part]), rows, x.size // max(rows, 1))
    else:
        fn(xr, outr)
    return out
