"""Shared fixtures: every test gets its own device-state folder and an open device."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import defaultdict

import numpy as np
import pytest
from binaries import small_capture
from hypothesis import settings

import mnrt
from mnrt.host import observe

# CI runs every property test from a fixed seed (derandomize), so a verdict does not depend
# on the run: a failure there reproduces anywhere with CI=true; locally examples vary.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="session", autouse=True)
def _isolated_session_state(tmp_path_factory):
    """Fixtures of a wider scope (binaries built once for many tests) are made before any
    test's own state folder below: they get the session's, never the user's device state
    (a device `mnrt smi clear` left holding a seed makes captures record its fill)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MNRT_HOME", str(tmp_path_factory.mktemp("mnrt-home")))
        patch.delenv("MNRT_DEVICE_COUNT", raising=False)
        yield


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path, monkeypatch):
    monkeypatch.setenv("MNRT_HOME", str(tmp_path / "mnrt-home"))
    monkeypatch.delenv("MNRT_DEVICE_COUNT", raising=False)
    yield
    observe.install(None)  # a test that failed mid-capture must not leave it running


@pytest.fixture
def dev():
    device = mnrt.open_device("auto")
    yield device
    device._close_quietly()


@pytest.fixture
def q(dev):
    return dev.command_queue(0)


@pytest.fixture
def in_forked_child():
    """Run fn() in a forked child and return the int it returns (a raise gives 99). A child
    still running after 10 s is killed and fails the test: a hang guard, not a timing."""
    if not hasattr(os, "fork"):
        pytest.skip("needs fork")

    def run(fn) -> int:
        pid = os.fork()
        if pid == 0:
            try:
                code = fn()
            except BaseException:
                code = 99
            os._exit(code)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.01)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung")

    return run


@pytest.fixture
def failing_gather():
    """A function (dev, q) that enqueues a gather whose index (9) is out of range for its
    4-element data: a device error the next finish() raises. It returns the data buffer."""
    return _enqueue_failing_gather


def _enqueue_failing_gather(dev, q):
    data = dev.create_buffer((4,), "float", name="data")
    idx = dev.create_buffer((1,), "int32", name="idx")
    out = dev.create_buffer((1,), "float", name="out")
    prog = dev.create_program([mnrt.Kernel("gather", ["data", "idx"], ["out"])])
    q.enqueue_write_buffer(idx, np.array([9], np.int32))
    q.enqueue_program(prog, {"data": data, "idx": idx, "out": out})
    return data


@pytest.fixture
def assert_nested():
    """A check of a profile's slices (trace events of phase X): on each thread, two slices
    are either disjoint or one holds the other, as trace viewers need (to the nanosecond,
    the trace's resolution: ts + dur carries float error)."""
    return _assert_nested


def _assert_nested(slices: list[dict]) -> None:
    by_thread = defaultdict(list)
    for s in slices:
        by_thread[s["pid"], s["tid"]].append(s)
    for thread, items in by_thread.items():
        stack: list[float] = []  # ends of the open slices
        for s in sorted(items, key=lambda s: (s["ts"], -s["dur"])):
            end = s["ts"] + s["dur"]
            while stack and s["ts"] >= stack[-1] - 1e-6:
                stack.pop()
            assert not stack or end <= stack[-1] + 1e-6, (thread, s)
            stack.append(end)


@pytest.fixture
def small_binary():
    """A short valid capture: one program, one write, one read with a golden."""
    return small_capture()


@pytest.fixture
def fifo(tmp_path):
    """A FIFO; a writer opens it after a while, so that code that blocks on it (the bug)
    comes unstuck instead of hanging the test run."""
    path = tmp_path / "pipe.mnlb"
    os.mkfifo(path)
    done = threading.Event()

    def unblock() -> None:
        while not done.wait(10):
            with contextlib.suppress(OSError):  # no reader waiting
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))

    threading.Thread(target=unblock, daemon=True).start()
    yield path
    done.set()
