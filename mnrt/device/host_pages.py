"""Keeping freed host memory for reuse, so kernel temporaries do not page-fault.

glibc hands every freed block above its mmap threshold (128 KiB at start, rising only to the
largest block freed so far) straight back to the kernel, so each numpy temporary a kernel
makes is fresh memory that faults on first touch, page by page. Kernels make temporaries on
every run, and on a virtual machine a fault costs microseconds: a 256x1024 gelu spent two
thirds of its time faulting. Fixed thresholds keep freed blocks in malloc's arenas.

numpy also asks the kernel for transparent huge pages for every array from 4 MiB. Where THP
is "madvise" with defrag on fault, the first touch of such an array compacts memory as it
goes: copying 548 MB of weights into fresh device memory took 1.46 s instead of 0.34 s.
Emulated DRAM and kernel temporaries are written once and streamed, so plain pages serve
them better; the advice is turned off with malloc's tuning.

Process-wide, so done once, when the first emulated device opens. Elsewhere than glibc, or
with MNRT_KEEP_HOST_PAGES=0, malloc and numpy are left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading

ENV_KEEP_HOST_PAGES = "MNRT_KEEP_HOST_PAGES"
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
MMAP_THRESHOLD = 32 << 20  # blocks below this come from (and go back to) the arenas
TRIM_THRESHOLD = 64 << 20  # free memory an arena keeps at its top before returning it

_lock = threading.Lock()
_tuned: bool | None = None  # None: not tried yet


def keep_freed_pages() -> bool:
    """Raise glibc's mmap and trim thresholds (the first call does it); True when malloc is
    tuned."""
    global _tuned
    with _lock:
        if _tuned is None:
            _tuned = os.environ.get(ENV_KEEP_HOST_PAGES, "1") != "0" and _mallopt()
            if _tuned:
                _no_huge_page_advice()
        return _tuned


def _mallopt() -> bool:
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False  # not glibc: macOS, Windows
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


def _no_huge_page_advice() -> None:
    """numpy's switch for its huge-page advice (what NUMPY_MADVISE_HUGEPAGE=0 sets at import):
    private, so used only where it exists."""
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray
    setter = getattr(multiarray, "_set_madvise_hugepage", None)
    if setter is not None:
        setter(False)
