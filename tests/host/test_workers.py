"""The pool of queue worker threads (host/workers.py)."""

from __future__ import annotations

import queue
import threading

from mnrt.host import workers


def _pool_threads() -> int:
    return sum(t.name == "mnrt-queue" for t in threading.enumerate())


def _loop(channel: queue.SimpleQueue, started: threading.Event):
    def loop() -> None:
        started.set()
        while channel.get():
            pass

    return loop


def test_a_loop_told_to_stop_hands_its_thread_to_the_next_queue(monkeypatch):
    # A stopped loop returns once its thread gets the GIL, which this thread holds: before,
    # the next queue started a thread of its own, and a process that dropped and reopened
    # devices grew a thread per device the collector freed at once.
    monkeypatch.setattr(workers, "SETTLE_S", 30.0)  # a loaded machine is slow, not wrong
    first, started = queue.SimpleQueue(), threading.Event()
    workers.run(_loop(first, started), first)
    assert started.wait(10)
    threads = _pool_threads()
    for _ in range(20):
        workers.stop(first)
        first, started = queue.SimpleQueue(), threading.Event()
        workers.run(_loop(first, started), first)  # no pause between: the race itself
        assert started.wait(10)
        assert _pool_threads() == threads
    workers.stop(first)


def test_stopping_a_loop_that_never_ran_waits_for_nothing():
    # A queue that never started has a wake-up channel no thread serves (a dropped device's
    # finalizer stops every queue it made): the next start must not wait for it.
    workers.stop(queue.SimpleQueue())
    assert not workers._stopping
    channel, started = queue.SimpleQueue(), threading.Event()
    workers.run(_loop(channel, started), channel)
    assert started.wait(10)
    workers.stop(channel)


def test_a_loop_that_raises_ends_its_thread_and_no_queue_is_handed_to_it(monkeypatch):
    # Its thread dies with the exception: parked, it would take the next queue's loop and
    # never run it, and that queue would wait for ever.
    died: list[threading.Thread] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: died.append(args.thread))

    def raising() -> None:
        raise RuntimeError("a bug in a loop")

    workers.run(raising, queue.SimpleQueue())
    for _ in range(1000):
        if died:
            break
        threading.Event().wait(0.01)
    died[0].join(10)
    assert not died[0].is_alive()
    channel, started = queue.SimpleQueue(), threading.Event()
    workers.run(_loop(channel, started), channel)  # the last inbox parked comes first
    assert started.wait(10)
    workers.stop(channel)
