"""The compiler tests' context: a Context on an emulated MN-Core 2, closed after the test."""

from __future__ import annotations

import pytest

import mnrt


@pytest.fixture
def ctx():
    with mnrt.Context(mnrt.MNDevice("mncore2:auto")) as c:
        yield c
