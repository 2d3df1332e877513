"""The one interception point of the host API, for capture (which host never imports).

Every public host call is wrapped by `api(name)`. While an observer is installed, the
outermost call on each thread is handed to it as `call(name, fn, args, kwargs)`, and the
observer runs `fn(*args, **kwargs)` itself: so it can look at the objects first (snapshot
what the call is about to change, or refuse the call by raising), then record the call
once it succeeded, all in one step. Calls made inside another API call (the depth guard,
kept per thread), including the observer's own, reach `fn` directly. With no observer the
wrapper costs one global read.

Hot calls that never make another API call are marked `leaf`: their wrapper checks the depth
guard but does not set it, which saves a little on every enqueue; an observer that makes
host calls of its own while handling one must guard itself with `unobserved()`. Host objects
have a `tag` an observer may set (its id for the object; 0 is none), so it can find its ids
without a lookup table.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class Observer(Protocol):
    def call(self, name: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any: ...


class _Depth(threading.local):
    n = 0  # API calls in progress on this thread


_observer: Observer | None = None
_depth = nested_depth = _Depth()  # nested_depth: the same guard, read by the hot calls
# The hottest calls (enqueue_program, enqueue_write_buffer, enqueue_read_buffer, and the
# copy and event calls) are not wrapped by `api`: when they are outermost calls they report
# to the observer's `program`, `write`, `read`, `copy`, `record_event` and `wait_event`
# methods directly, before the command is submitted, so capturing a loop
# of them costs one call and one append each. Each returns the call's log cells (a tuple,
# or None), which the queue passes to the observer's `log_cells` under its lock as it puts
# the command on, so that the log holds each queue's commands in the order they run even
# when threads share a queue (a tuple and a call, not a closure: nothing more to allocate
# per call). `hot` is the observer when it has those methods, else None. For a program
# binding it has seen, the observer may leave `(observer, queue, cells)` in the bound
# plan's `tag`: a later non-blocking enqueue of that plan on that queue then just logs
# `cells`. The observer clears what it left when it is removed. `read` gets the read
# command; when the observer's `goldens` is true, the read copies its data as it runs into
# `cmd.keep`, since the caller may change the array it got as soon as the read has run.
hot: Any = None
HOT_PROTOCOL = (
    "program",
    "write",
    "read",
    "copy",
    "record_event",
    "wait_event",
    "goldens",
    "log_cells",
)  # makes an observer hot; fmt: skip


class _Pending(threading.local):
    record: tuple[Callable[[tuple], object], tuple] | None = None


# For an `api` call that puts a command on a queue (replay_trace), the observer may leave
# (log, cells) here before running the call; the queue takes it and calls log(cells) under
# its lock as it puts the command on, like the hot calls' cells.
pending = _Pending()


def install(observer: Observer | None) -> Observer | None:
    """Set the observer (None removes it); return the one it replaces."""
    global _observer, hot
    previous, _observer = _observer, observer
    hot = observer if all(hasattr(observer, m) for m in HOT_PROTOCOL) else None
    return previous


def current() -> Observer | None:
    return _observer


@contextlib.contextmanager
def unobserved() -> Iterator[None]:
    """Host calls made inside this block are not reported (as if nested in an API call)."""
    depth = _depth.n
    _depth.n = depth + 1
    try:
        yield
    finally:
        _depth.n = depth


def api(name: str, leaf: bool = False) -> Callable[[F], F]:
    """Mark a function as a public host API call named `name` for observers; `leaf` if it
    never makes another API call."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            observer = _observer
            if observer is None or _depth.n:
                return fn(*args, **kwargs)
            if leaf:
                return observer.call(name, fn, args, kwargs)
            _depth.n = 1  # the observer's own host calls are not reported either
            try:
                return observer.call(name, fn, args, kwargs)
            finally:
                _depth.n = 0

        return call  # type: ignore[return-value]

    return wrap
