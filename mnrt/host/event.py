"""Event: a point in one queue's command stream that other queues and the host can wait for.

`q.record_event()` puts a RecordEvent command on the queue and returns its Event; the event
completes when that command runs, i.e. once every command enqueued on the queue before it
has run (cudaEventRecord). An Event exists only from the moment its record is enqueued, so
a wait can name only a record already on some queue: waits can never form a cycle, and
every record runs eventually (a closed device runs what was queued before it closed). A
record skipped behind a failed command fails the event with that command's error instead,
so whoever waits for it gets the error, never a hang.

A queue or host thread that has to wait runs the recording queue's commands itself when
that queue is idle (as `finish()` does), instead of sleeping until its worker has: see
queue.py. It only ever tries that queue's lock, never blocks on it, so two queues waiting
on each other's earlier events cannot deadlock.
"""

from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING

from ..errors import (
    DeviceClosedError,
    DeviceExecutionError,
    EventTimeoutError,
    InvalidArgumentError,
)
from .observe import api

if TYPE_CHECKING:
    from .commands import RecordEvent
    from .device import Device
    from .queue import CommandQueue

_ids = itertools.count(1)
_POLL_S = 0.002  # how often a waiter tries again to run an idle recording queue itself


class Event:
    """A recorded point of a command queue. Get one with `CommandQueue.record_event()`."""

    __slots__ = ("_done", "_error", "_queue", "_record", "device", "id", "queue_index", "tag")

    def __init__(self, queue: CommandQueue) -> None:
        self.id = next(_ids)  # process-unique, never reused
        self.device: Device = queue.device
        self.queue_index = queue.index
        self.tag = 0  # an observer's id for this event (see host/observe.py); 0: none
        self._queue = queue
        self._record: RecordEvent | None = None  # set as the record is enqueued
        self._done = threading.Event()
        self._error: Exception | None = None

    def _complete(self, error: Exception | None) -> None:
        self._error = error
        self._done.set()

    @property
    def queue(self) -> CommandQueue:
        """The queue the event was recorded on."""
        return self._queue

    @property
    def where(self) -> str:
        return f"event {self.id} of device {self.device.index} queue {self.queue_index}"

    @api("event_query", leaf=True)
    def query(self) -> bool:
        """Whether the event has completed (never waits); raises the failure that kept it
        from completing, if any."""
        if not self._done.is_set():
            return False
        self._raise_failure()
        return True

    @api("event_wait", leaf=True)
    def wait(self, timeout: float | None = None) -> None:
        """Block the host until the event has completed; raise the failure that kept it from
        completing. With `timeout` (seconds), raise EventTimeoutError if it has not by then."""
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0
        ):
            raise InvalidArgumentError(
                f"Event.wait: timeout must be a number of seconds >= 0 or None, got {timeout!r}"
            )
        if not self._done.is_set():
            if self.device._closed and self._queue._stopped and not self._queue._pending:
                # Only a forked child's copy of a device can get here (its queue was cleared).
                raise self.device._closed_error()
            if timeout is None:
                self._queue._run_until(self._record)
            elif not self._done.wait(timeout):
                raise EventTimeoutError(
                    f"{self.where} has not completed within {timeout} s; the queue is still "
                    "running earlier commands (or waits for another event)"
                )
        self._raise_failure()

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise DeviceExecutionError(
                f"{self.where} did not complete: {self._error}"
            ) from self._error

    def _await_from_queue(self) -> None:
        """A WaitEvent command's wait, on whichever thread runs the waiting queue. Runs the
        recording queue's commands itself whenever that queue is idle; else sleeps on the
        event a little at a time, trying again."""
        done = self._done
        queue = self._queue
        while not done.is_set():
            if not queue._try_run_until(self._record):
                done.wait(_POLL_S)
        if self._error is not None:
            raise DeviceExecutionError(f"{self.where} failed: {self._error}") from self._error

    def _check_waitable(self, what: str) -> None:
        """An event a queue may be told to wait for now: one of an open device."""
        if not self.device.is_open:
            raise DeviceClosedError(
                f"{what}: {self.where} belongs to a closed device, so it can never complete "
                "for this queue; record a new event on an open device"
            )

    def __repr__(self) -> str:
        state = "done" if self._done.is_set() else "pending"
        return (
            f"<mnrt.Event {self.id}: device {self.device.index} queue {self.queue_index} ({state})>"
        )
