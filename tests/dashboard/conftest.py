"""Fixtures of the dashboard tests: the bundled CNN compiled into a codegen_dir once, and
the committed multi-device pipeline binary. The tests are skipped where the `dashboard`
extra is not installed."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the dashboard extra is not installed")

import mnrt
from mnrt.compiler.models import MODELS

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


@pytest.fixture(scope="session")
def cnn_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("dashboard") / "cnn_cg"
    builder, inputs = MODELS["cnn"]()
    with mnrt.Context() as ctx:
        ctx.compile(builder, inputs, codegen_dir=folder)
    return folder


@pytest.fixture(scope="session")
def pipeline() -> Path:
    """Four devices in a pipeline: copies, recorded and awaited events."""
    return SAMPLES / "pipeline.mnlb"
