"""Shared fixtures: every test gets its own device-state folder and an open device."""

from __future__ import annotations

import os
import time

import pytest

import mnrt
from mnrt.host import observe


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
