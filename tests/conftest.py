"""Shared fixtures: every test gets its own device-state folder and an open device."""

from __future__ import annotations

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
