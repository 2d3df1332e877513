"""Ctrl-C that is never lost.

Python raises KeyboardInterrupt wherever the main thread happens to be when the signal is
handled, and where that is inside a finalizer or `__del__` (a replay drops a device every
loop, and a device's finalizer returns its queue threads) it reports the exception as
ignored and goes on: a `mnrt run --loops 1000000` then ran on after Ctrl-C. While a command
runs, a Ctrl-C is also remembered, and `check` (called between loops) raises it again.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

_seen = threading.Event()


def _handler(signum: int, frame: object) -> None:
    _seen.set()
    raise KeyboardInterrupt


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """While the block runs, Ctrl-C raises KeyboardInterrupt as usual and is remembered
    for `check`. Only the main thread may install a signal handler: elsewhere (a command
    invoked from another thread) the block runs with Python's own."""
    _seen.clear()
    try:
        previous = signal.signal(signal.SIGINT, _handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _seen.clear()


def check() -> None:
    """Raise KeyboardInterrupt if Ctrl-C was pressed inside `kept` (Python may have dropped
    the one it raised)."""
    if _seen.is_set():
        raise KeyboardInterrupt
